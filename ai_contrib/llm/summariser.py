"""
The summariser's I/O: summary requests to the LLM, sized to the summariser's context window
(``docs/design.md``, "Summary compaction" step 2, "Structured summaries", "Cascade summaries").

Functions here take messages, their token counts and options, never an NPC's script: the
shell (:mod:`ai_contrib.npc.compaction_runner`) resolves the NPC's settings and passes them in.
Messages are
the dicts of ``core/messages.py``; tokens are model tokens (``core/tokens.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evennia.utils import logger
from twisted.internet import defer

from ..core import cascade
from ..core.structured import build_base_summary_request, normalise_summary
from ..core.summary import build_summary_request, clean_summary, plan_summary_chunks
from ..core.tokens import count_tokens
from ..settings import get_setting
from .client import LLMContextOverflowError, LLMError, LLMResponseError, get_client

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

# tokens kept free in every summary request besides prompt and output: chat-template overhead
SUMMARY_HEADROOM_TOKENS = 256
DEFAULT_SUMMARIZER_CONTEXT = 8192  # tokens, when neither a setting nor the server tells
SUMMARY_MIN_OUTPUT_TOKENS = 32  # the least a summary request may ask the model to write
# the smallest transcript budget worth a request: below it the window is misconfigured
MIN_SUMMARY_INPUT_TOKENS = 64
SUMMARY_TEMPERATURE = 0.2

__all__ = [
    "SUMMARY_HEADROOM_TOKENS",
    "fold_summaries",
    "generate_context_summary",
    "send_summary_request",
    "summarise_messages",
    "summarizer_context",
    "summary_input_budget",
    "summary_output_tokens",
]


def summary_input_budget(prompt, max_output_tokens, summarizer_context) -> int:
    """
    Tokens of transcript one summary request may carry so that prompt, transcript, previous
    summary and the generated summary always fit the summariser's context window (a full
    context must never deadlock compaction, as it does in Claude Code).

    Args:
        prompt (str): the system prompt of the summary requests.
        max_output_tokens (int): ``max_tokens`` of each request; a running summary brought into
            the next request is at most this long too.
        summarizer_context (int): the summariser's context window, in tokens.

    Returns:
        int: tokens left for the transcript: the window minus the prompt, one previous summary,
        the reply and :data:`SUMMARY_HEADROOM_TOKENS` of framing; ``0`` or less when those alone
        fill the window (then no request can fit, see :data:`MIN_SUMMARY_INPUT_TOKENS`).
    """
    reserved = count_tokens(prompt) + 2 * max_output_tokens + SUMMARY_HEADROOM_TOKENS
    return summarizer_context - reserved


def summarizer_context() -> int:
    """
    Tokens one summary or extraction request may fill: ``AI_COMPACT_SUMMARIZER_CONTEXT``, else
    the model's context window as the LLM client knows it, else 8,192.
    """
    configured = get_setting("COMPACT_SUMMARIZER_CONTEXT")
    if configured:
        return int(configured)
    return int(getattr(get_client(), "known_context_window", None) or DEFAULT_SUMMARIZER_CONTEXT)


def summary_output_tokens(replaced_tokens, max_tokens=None) -> int:
    """
    The token target of a summary of ``replaced_tokens`` tokens: ``max_tokens`` (default
    ``AI_COMPACT_SUMMARY_MAX_TOKENS``), but at most half of what it replaces (small models
    otherwise write "summaries" longer than a short stretch of talk, which the saving check must
    then refuse), and at least :data:`SUMMARY_MIN_OUTPUT_TOKENS`. Returns int (tokens).
    """
    if max_tokens is None:
        max_tokens = get_setting("COMPACT_SUMMARY_MAX_TOKENS")
    return max(SUMMARY_MIN_OUTPUT_TOKENS, min(int(max_tokens), int(replaced_tokens) // 2))


def send_summary_request(request, completion=False, **options) -> Deferred:
    """
    Send one summary request: ``request`` (chat messages) to ``/chat/completions``, or with
    ``completion`` its last message's text alone to ``/completions``, with no chat template
    around it (the base-model prompt ending in ``SUMMARY:``, ``docs/design.md``, "Structured
    summaries").

    Args:
        request (list[dict]): ``{"role", "content"}`` messages.
        completion (bool): send as a text completion.
        **options: ``model``, ``max_tokens``, ``temperature`` (see ``LLMClient.chat``); the
            ``purpose`` tag is ``"summary"`` unless given.

    Returns:
        Deferred[ChatResult]; errbacks with LLMError.
    """
    client = get_client()
    # background work over long transcripts: more time than a reply gets
    options.setdefault("timeout", float(get_setting("COMPACT_TIMEOUT")))
    options.setdefault("purpose", "summary")
    if completion:
        return client.complete(request[-1]["content"], **options)
    return client.chat(request, **options)


@defer.inlineCallbacks
def generate_context_summary(messages, counts, prompt, *, model=None, max_output=None,
                             build_request=None, completion=False, label="NPC") -> Deferred:
    """
    Summarise ``messages`` with the LLM (``docs/design.md``, "Summary compaction").

    When the transcript is larger than one request can carry (:func:`summary_input_budget` of
    :func:`summarizer_context`), it is summarised in chunks, each request folding in the summary
    so far (a running summary); an earlier ``[CONTEXT SUMMARY]`` among ``messages`` is folded in
    the same way. If the server still answers that a request exceeds its context window (its
    tokenizer counts more tokens than ours), the messages not yet summarised are chunked again
    with half the budget, once (OpenCode retries with less input; Codex CLI drops input instead,
    which loses it).

    Args:
        messages (list[dict]): the messages to summarise, oldest first.
        counts (list[int]): tokens of each message.
        prompt (str): the fixed text of every request (the system prompt, or a base model's
            instruction line), counted against the window.
        model (str, optional): the summariser model; None: the client's default.
        max_output (int, optional): ``max_tokens`` of each request; default
            :func:`summary_output_tokens` of the messages.
        build_request (callable, optional): ``build_request(chunk, previous_summary)`` returning
            the chat messages of one request; default
            :func:`~ai_contrib.core.summary.build_summary_request` with ``prompt``. Its framing
            besides ``prompt``, the previous summary and the transcript must stay within
            :data:`SUMMARY_HEADROOM_TOKENS`.
        completion (bool): send each request's last message as a plain text completion
            (``/completions``) instead of a chat request: for base models without a chat
            template (``docs/design.md``, "Structured summaries").
        label (str): who the summary is for, in log lines.

    Returns:
        Deferred firing the summary text (str, without the ``[CONTEXT SUMMARY]`` prefix).

    Raises (through the Deferred):
        LLMError: the request failed (``LLMContextOverflowError`` when even half the budget did
        not fit), the summary came back empty (``LLMResponseError``), or the window cannot
        hold a request at all (prompt, summaries and reply leave less than
        :data:`MIN_SUMMARY_INPUT_TOKENS`): no request is sent then.
    """
    if build_request is None:

        def build_request(chunk, previous_summary):
            return build_summary_request(chunk, prompt=prompt, previous_summary=previous_summary)

    if max_output is None:
        max_output = summary_output_tokens(sum(counts))
    budget = _request_input_budget(prompt, max_output)
    remaining, remaining_counts = list(messages), list(counts)
    summary = None
    halved = False
    while remaining:
        try:
            chunks = plan_summary_chunks(remaining, remaining_counts, budget)
        except ValueError as err:  # one message's line cannot be cut down to the budget
            raise LLMError(f"a summary request cannot fit: {err}") from None
        try:
            for chunk in chunks:
                summary = yield _summarise_chunk(build_request(chunk, summary), completion,
                                                 model, max_output)
                # chunks hold the messages in order, one entry each (some truncated copies)
                remaining = remaining[len(chunk):]
                remaining_counts = remaining_counts[len(chunk):]
        except LLMContextOverflowError as err:
            if halved:
                raise
            halved = True
            budget //= 2
            logger.log_warn(
                f"AI {label}: the summariser said a request was too long ({err}); "
                f"retrying the {len(remaining)} messages left with {budget}-token chunks"
            )
    return summary


def _request_input_budget(prompt, max_output):
    """
    Tokens of transcript one summary request may carry (:func:`summary_input_budget` of
    :func:`summarizer_context`).

    Raises:
        LLMError: the window cannot hold a request at all (less than
            :data:`MIN_SUMMARY_INPUT_TOKENS` left), saying which settings to change.
    """
    context = summarizer_context()
    budget = summary_input_budget(prompt, max_output, context)
    if budget < MIN_SUMMARY_INPUT_TOKENS:
        raise LLMError(
            f"a summary request cannot fit the summariser's context window: "
            f"AI_COMPACT_SUMMARIZER_CONTEXT={context} tokens leaves {max(0, budget)} for the "
            f"transcript after the prompt ({count_tokens(prompt)}), the previous and the new "
            f"summary (2 x AI_COMPACT_SUMMARY_MAX_TOKENS={max_output}) and "
            f"{SUMMARY_HEADROOM_TOKENS} of framing; raise the one or lower the other"
        )
    return budget


@defer.inlineCallbacks
def _summarise_chunk(request, completion, model, max_output):
    """
    Send one chunk's summary ``request`` (:func:`send_summary_request`).

    Returns:
        Deferred firing the cleaned summary text; errbacks with LLMError
        (``LLMResponseError`` when it is empty).
    """
    result = yield send_summary_request(
        request, completion, model=model, max_tokens=max_output,
        temperature=SUMMARY_TEMPERATURE,
    )
    text = clean_summary(result.content)
    if not text:
        raise LLMResponseError("the summariser returned an empty summary")
    return text


@defer.inlineCallbacks
def summarise_messages(messages, counts, prompt, *, style="chat", structured=True, model=None,
                       max_output=None, label="NPC") -> Deferred:
    """
    Summarise ``messages`` in prompt ``style``: ``"chat"`` (``prompt`` as the system message)
    or ``"base"`` (``docs/design.md``, "Structured summaries": one completion-style prompt
    ending in ``SUMMARY:``, ``prompt`` its instruction line, sent to ``/completions`` with no
    chat template), in chunks with a running summary (:func:`generate_context_summary`).

    Args:
        messages (list[dict]): the messages (markers among them are folded in).
        counts (list[int]): tokens of each message.
        prompt (str): the system prompt or the base prompt's instruction line.
        structured (bool): normalise the section headings (:mod:`ai_contrib.core.structured`).
        model, max_output, label: as for :func:`generate_context_summary`.

    Returns:
        Deferred firing the cleaned summary text; errbacks with LLMError.
    """
    base = style == "base"

    def build_base(chunk, previous):
        return build_base_summary_request(chunk, prompt, previous_summary=previous)

    build = build_base if base else None
    text = yield generate_context_summary(
        messages, counts, prompt, model=model, max_output=max_output, build_request=build,
        completion=base, label=label,
    )
    return normalise_summary(text) if structured else text


@defer.inlineCallbacks
def fold_summaries(fold, *, style="chat", model=None, max_tokens=None) -> Deferred:
    """
    Waterfall: merge the long-term and short-term summaries in ``fold`` (marker dicts) into one
    (``docs/design.md``, "Cascade summaries"), in prompt ``style`` (``"chat"`` or ``"base"``).
    ``max_tokens`` defaults to ``AI_COMPACT_SUMMARY_MAX_TOKENS``.

    Returns:
        Deferred firing the cleaned text; errbacks with LLMError (``LLMResponseError`` when the
        answer is empty).
    """
    request = cascade.build_fold_request(fold, style=style)
    if max_tokens is None:
        max_tokens = int(get_setting("COMPACT_SUMMARY_MAX_TOKENS"))
    result = yield send_summary_request(
        request, style == "base", model=model, max_tokens=max_tokens,
        temperature=SUMMARY_TEMPERATURE,
    )
    text = clean_summary(result.content)
    if not text:
        raise LLMResponseError("the summariser returned an empty long-term summary")
    return text
