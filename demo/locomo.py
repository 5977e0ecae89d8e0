"""
Conversation turns from LoCoMo, replayed by the demo's players.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; CC BY-NC 4.0, see ``data/locomo/NOTICE.txt``) holds long two-person conversations split
into dated sessions. The file is a JSON list of samples::

    {"sample_id": "conv-26",
     "conversation": {"speaker_a": "Caroline", "speaker_b": "Melanie",
                      "session_1_date_time": "1:56 pm on 8 May, 2023",
                      "session_1": [{"speaker": "Caroline", "dia_id": "D1:1", "text": "...",
                                     "blip_caption": "a photo of ..." (only with an image)}, ...],
                      ...},
     "qa": [...], ...}

Only the conversation turns are used here, never ``qa`` (the questions and answers are for
benchmarks, and a demo that saw them would prove nothing).
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "locomo" / "locomo_dev.json"

_SESSION_KEY = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Turn:
    """One line of a LoCoMo conversation, as a player will say it."""

    session: int  #: the session number (1-based)
    date: str  #: the session's date and time as written in the data ("" if absent)
    dia_id: str  #: the turn's id, e.g. "D1:3"
    speaker: str  #: the speaker's name
    text: str  #: the words, on one line; an image is described in brackets after them


@dataclass(frozen=True)
class Conversation:
    """A LoCoMo conversation: its id, its two speakers and its turns in order."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    turns: tuple


def _say_text(turn):
    """The turn's words on one line, with the image caption (if any) as a bracketed aside."""
    text = " ".join(str(turn.get("text", "")).split())
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def load_conversation(sample_id=None, path=DATA_FILE):
    """
    Load one conversation's turns, in session order.

    Args:
        sample_id (str | None): e.g. ``"conv-26"``; None takes the first sample.
        path (str | Path): the LoCoMo JSON file.

    Returns:
        Conversation: with ``turns`` a tuple of :class:`Turn`, sessions in numeric order
        (``session_10`` after ``session_9``), turns without text skipped.

    Raises:
        KeyError: if ``sample_id`` is not in the file (the message lists the ids that are).
    """
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    if sample_id is None:
        return _conversation(samples[0])
    by_id = {s["sample_id"]: s for s in samples}
    if sample_id not in by_id:
        raise KeyError(f"no conversation {sample_id!r}; choose one of {sorted(by_id)}")
    return _conversation(by_id[sample_id])


def list_conversations(path=DATA_FILE):
    """``[(sample_id, speaker_a, speaker_b, number_of_turns), ...]`` for every sample in ``path``."""
    samples = json.loads(Path(path).read_text(encoding="utf-8"))
    return [
        (c.sample_id, c.speaker_a, c.speaker_b, len(c.turns)) for c in map(_conversation, samples)
    ]


def _conversation(sample):
    """A :class:`Conversation` from one sample of the JSON file."""
    conv = sample["conversation"]
    sessions = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.match(key)))
    turns = []
    for number, key in sessions:
        date = conv.get(f"{key}_date_time", "")
        for raw in conv[key]:
            text = _say_text(raw)
            if text:
                turns.append(Turn(number, date, raw.get("dia_id", ""), raw["speaker"], text))
    return Conversation(sample["sample_id"], conv["speaker_a"], conv["speaker_b"], tuple(turns))
