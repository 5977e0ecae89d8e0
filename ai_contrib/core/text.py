"""
Player text is data: one normalisation step before anything a player says is stored
(``docs/design.md``, "Player text is data").

What a player types reaches the model inside a chat template and reaches admins inside tables,
so it must not be able to end a turn, open a system turn, forge a second speaker's line or carry
markup. After the game's own markup stripping (Evennia colour and MXP codes, done by the shell),
:func:`normalise_player_text`:

- removes control characters (C0/C1, DEL) and zero-width or bidirectional format characters;
- joins all lines into one (a player's line is one line, so ``"hi\\nMarta: ..."`` cannot
  forge a line of the NPC's);
- neutralises the special tokens of the common chat templates (ChatML and SmolLM
  ``<|im_start|>``, Llama 3 ``<|start_header_id|>``/``<|eot_id|>``, any ``<|...|>``, Gemma
  ``<start_of_turn>``/``<end_of_turn>``, Mistral/Llama 2 ``[INST]``/``[/INST]``/``<<SYS>>``,
  ``<s>``/``</s>``/``<bos>``/``<eos>``/``<pad>``) by putting a space after the opening bracket:
  the text still reads the same to a person, but a tokenizer sees ordinary characters, not a
  control token;
- caps the length (characters), cutting at a word boundary where one is near.

Pure functions.
"""

from __future__ import annotations

import re
import unicodedata

#: characters a player's line may hold at most (about 250 tokens of English)
DEFAULT_MAX_CHARS = 1000

_SPECIAL_TOKENS = re.compile(
    r"<(?=\|)"  # <|im_start|>, <|eot_id|>, <|endoftext|>, any <|...|>
    r"|<(?=/?(?:s|bos|eos|pad|unk|start_of_turn|end_of_turn|think|tool_call)>)"
    r"|\[(?=/?INST\])"
    r"|<(?=<\s*/?SYS\s*>>)",
    re.IGNORECASE,
)
_PIPE_CLOSE = re.compile(r"\|>")
_WHITESPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")
#: characters a model's multi-line text (a summary) may hold at most: far above any summary the
#: token caps allow (``AI_COMPACT_SUMMARY_MAX_TOKENS``), it bounds only a runaway answer
MODEL_TEXT_MAX_CHARS = 16000


def _is_unprintable(char):
    # Cc: control characters; Cf: format characters (zero-width joiners, bidi overrides) that
    # can hide text from an admin's screen while the model still reads it
    return unicodedata.category(char) in ("Cc", "Cf") and char not in "\n\t"


def neutralise_special_tokens(text) -> str:
    """
    ``text`` with every chat-template special token broken up by a space after its opening
    bracket (``"<|im_end|>"`` -> ``"< |im_end| >"``), so it tokenizes as plain characters.

    Returns:
        str
    """
    text = _SPECIAL_TOKENS.sub(lambda match: match.group(0) + " ", text)
    return _PIPE_CLOSE.sub("| >", text)


def normalise_player_text(text, max_chars=DEFAULT_MAX_CHARS, multiline=False) -> str:
    """
    What a player meant to say, safe to store and to put in a prompt (module docstring); the
    same for what a model wrote (a reply, a summary, a fact, a tool call's argument:
    ``docs/design.md``, "Player text is data"), which comes back in later prompts as well.

    Args:
        text (str): the player's words, game markup already stripped; or a model's text.
        max_chars (int): the longest text kept, in characters.
        multiline (bool): keep line breaks (a summary's bullets and headings); each line's
            runs of spaces and tabs become one space and runs of blank lines one blank line.
            Everything else is as for one line.

    Returns:
        str: one line (or, with ``multiline``, lines), possibly empty (the caller then stores
        nothing).

    Raises:
        ValueError: ``max_chars`` below 1.
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    text = "".join(char for char in str(text or "") if not _is_unprintable(char))
    if multiline:
        lines = [_WHITESPACE.sub(" ", line).rstrip() for line in text.split("\n")]
        text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    else:
        text = _WHITESPACE.sub(" ", text).strip()
    text = neutralise_special_tokens(text)
    if len(text) > max_chars:
        cut = text[:max_chars]
        space = cut.rfind(" ")
        text = (cut[:space] if space > max_chars * 0.8 else cut).rstrip() + "..."
    return text


#: what a stored ``|`` looks like on an admin's screen: Evennia reads ``|`` as the start of a
#: colour, line-break or clickable-link code, and EvTable parses a cell's markup again when it
#: wraps it, so doubling the bar (Evennia's own escape) does not survive a table
INERT_BAR = "\u00a6"


def inert_markup(text) -> str:
    """
    Stored text (a player's line, a model's summary, an error message) made safe to show on an
    Evennia screen, inside an EvTable or not (``docs/design.md``, "Player text is data").

    Every ``|`` becomes ``INERT_BAR`` (``"¦"``), so no colour, ``|/`` line break or ``|lc``
    clickable command can come out of it, and control characters other than line breaks are
    dropped (a raw ``ESC`` would be a terminal escape sequence). Display only: the archive keeps
    the exact text.

    Returns:
        str
    """
    text = "".join(char for char in str(text or "") if char == "\n" or not _is_unprintable(char))
    return text.replace("|", INERT_BAR)


def content_key(text) -> str:
    """What two texts that say the same thing word for word share: the text case-folded, its
    whitespace collapsed and a final full stop dropped (``"The mill burned down."`` ==
    ``"the mill  burned down"``)."""
    return " ".join(str(text or "").split()).casefold().rstrip(".")


def quote_words(text) -> tuple:
    """The words of ``text`` as quotes are compared (:mod:`ai_contrib.core.quotes`):
    case-folded, apostrophes dropped (``"I'm"`` -> ``"im"``), every other mark a separator. A
    tuple of str."""
    flat = (text or "").replace("'", "").replace("\u2019", "").casefold()
    return tuple(re.findall(r"[^\W_]+", flat))
