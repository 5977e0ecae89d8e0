"""
Scoring for the LoCoMo memory benchmark (``benchmarks/locomo.py``): pure functions, no Evennia,
no Django, no I/O.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024) asks questions about long two-person conversations. Each QA item is a dict::

    {"question": str, "answer": str | int (categories 1-4), "adversarial_answer": str
     (category 5), "evidence": ["D<session>:<turn>", ...], "category": 1..5}

Categories: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial (the question
presupposes something the conversation never said; ``adversarial_answer`` is what a model
must NOT assert).

What is scored here:

* :func:`normalize_answer`: LoCoMo's own normalisation (``task_eval/evaluation.py``: commas
  dropped, lower-case, punctuation removed, the words a/an/the/and removed, whitespace
  collapsed), plus Unicode punctuation (curly quotes, dashes), which LoCoMo's ASCII-only
  ``string.punctuation`` leaves in.
* :func:`answer_score`: is the gold answer in the prompt? Per answer part (multi-hop answers are
  comma-separated lists, scored part by part as LoCoMo's F1 does), contained when its normalised
  tokens occur contiguously in one prompt text, or when one prompt text holds at least 80 % of
  its (stemmed) tokens. The score is the share of parts contained (0 or 1 for a one-part answer).
* :func:`locomo_f1`: LoCoMo's token F1 of a model answer against the gold answer, with Porter
  stems, per category as in ``evaluation.py``; category 5 scores 1 when the answer says "no
  information available" or "not mentioned".
* :func:`parse_evidence`: evidence ids, read leniently (``"D8:6; D9:17"`` is two ids,
  ``"D:11:26"`` is ``D11:26``, ``"D30:05"`` is ``D30:5``, ``"D"`` is none).
* :func:`evidence_score`: the share of a question's evidence turns still verbatim in the
  conversational part of the prompt.
* :func:`aggregate` and :func:`format_report`: the tables.

:func:`stem` is Porter's suffix-stripping algorithm (Porter, "An algorithm for suffix
stripping", Program 14(3), 1980) with the variations of NLTK's default mode, which LoCoMo's
evaluation uses (``nltk.stem.PorterStemmer()``): a few irregular forms, "-ies"/"-ied" on
four-letter words, y -> i only after a consonant, "bli" -> "ble", "logi" -> "log", "alli" and
"fulli", words of one or two letters left alone.
"""

import re
import string
import unicodedata
from collections import Counter

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ANSWERED_CATEGORIES = (1, 2, 3, 4)
ADVERSARIAL = 5
#: Token recall (share of the answer's stemmed tokens found in one prompt text) that counts as
#: "contained".
MIN_RECALL = 0.8
#: Phrases LoCoMo's evaluation accepts as declining an adversarial question.
REFUSAL_PHRASES = ("no information available", "not mentioned")

_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


# ------------------------------------------------------------------------------------------------
# normalisation


def _is_punct(ch):
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


def normalize_answer(text):
    """
    LoCoMo's answer normalisation, plus Unicode punctuation.

    Args:
        text (str | int | None): an answer or any text.

    Returns:
        str: lower-case words separated by single spaces; ``""`` for None.
    """
    if text is None:
        return ""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if not _is_punct(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text):
    """The words of :func:`normalize_answer` (list of str)."""
    return normalize_answer(text).split()


# ------------------------------------------------------------------------------------------------
# Porter stemmer (NLTK's default mode)

_VOWELS = frozenset("aeiou")
_IRREGULAR = {
    "skies": "sky", "sky": "sky", "dying": "die", "lying": "lie", "tying": "tie",
    "news": "news", "innings": "inning", "inning": "inning", "outings": "outing",
    "outing": "outing", "cannings": "canning", "canning": "canning", "howe": "howe",
    "proceed": "proceed", "exceed": "exceed", "succeed": "succeed",
}


def _consonants(word):
    """Per letter: True for a consonant. A 'y' is a consonant at the start or after a vowel."""
    flags = []
    for i, ch in enumerate(word):
        if ch in _VOWELS:
            flags.append(False)
        elif ch == "y":
            flags.append(True if i == 0 else not flags[i - 1])
        else:
            flags.append(True)
    return flags


def _measure(stem):
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    pattern = "".join("c" if c else "v" for c in _consonants(stem))
    return len(re.findall(r"v+c+", pattern))


def _has_vowel(stem):
    return not all(_consonants(stem))


def _double_consonant(word):
    return len(word) >= 2 and word[-1] == word[-2] and _consonants(word)[-1]


def _cvc(word):
    """Porter's *o: ends consonant-vowel-consonant, the last not w, x or y (or a two-letter
    vowel-consonant word, NLTK's addition)."""
    flags = _consonants(word)
    if len(word) >= 3 and flags[-3] and not flags[-2] and flags[-1] and word[-1] not in "wxy":
        return True
    return len(word) == 2 and not flags[0] and flags[1]


def _first_rule(word, rules):
    """Apply the first rule whose suffix ``word`` ends with, if its condition holds on the stem;
    a matching suffix whose condition fails stops the search (Porter's rule lists)."""
    for suffix, replacement, condition in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if condition(stem) else word
    return word


def _m_positive(stem):
    return _measure(stem) > 0


def _m_above_one(stem):
    return _measure(stem) > 1


def _step1a(word):
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("ies"):
        return word[:-2]
    if word.endswith("ss"):
        return word
    if word.endswith("s"):
        return word[:-1]
    return word


def _step1b(word):
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem = word[:-3]
        return stem + "ee" if _measure(stem) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            stem = word[: -len(suffix)]
            break
    else:
        return word
    if stem.endswith(("at", "bl", "iz")):
        return stem + "e"
    if _double_consonant(stem):
        return stem if stem[-1] in "lsz" else stem[:-1]
    if _measure(stem) == 1 and _cvc(stem):
        return stem + "e"
    return stem


def _step1c(word):
    if word.endswith("y") and len(word) > 2 and _consonants(word[:-1])[-1]:
        return word[:-1] + "i"
    return word


_STEP2 = [
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"),
    ("izer", "ize"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
    ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"),
    ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"),
    ("iviti", "ive"), ("biliti", "ble"), ("fulli", "ful"),
]


def _step2(word):
    if word.endswith("alli") and _m_positive(word[:-4]):
        return _step2(word[:-4] + "al")
    if word.endswith("logi"):
        # the 'l' stays with the stem, so short stems like "geo" qualify
        return word[:-1] if _m_positive(word[:-3]) else word
    return _first_rule(word, [(s, r, _m_positive) for s, r in _STEP2])


_STEP3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"),
          ("ful", ""), ("ness", "")]
_STEP4 = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
          "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize"]


def _step3(word):
    return _first_rule(word, [(s, r, _m_positive) for s, r in _STEP3])


def _step4(word):
    rules = []
    for suffix in _STEP4:
        if suffix == "ion":
            rules.append((suffix, "", lambda s: _measure(s) > 1 and s[-1:] in ("s", "t")))
        else:
            rules.append((suffix, "", _m_above_one))
    return _first_rule(word, rules)


def _step5(word):
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


def stem(word):
    """
    Porter stem of one lower-case word (NLTK's default mode, which LoCoMo's F1 uses).

    Examples: ``"caresses" -> "caress"``, ``"ponies" -> "poni"``, ``"relational" -> "relat"``,
    ``"happy" -> "happi"``, ``"painting" -> "paint"``.
    """
    word = word.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 2:
        return word
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5):
        word = step(word)
    return word


def stemmed_tokens(text):
    """Porter stems of the words of :func:`normalize_answer` (list of str)."""
    return [stem(w) for w in answer_tokens(text)]


# ------------------------------------------------------------------------------------------------
# F1 (LoCoMo task_eval/evaluation.py)


def f1_score(prediction, gold):
    """
    Token F1 of ``prediction`` against ``gold`` over Porter-stemmed normalised words.

    Returns:
        float: 0.0-1.0 (0.0 when either side has no words).
    """
    pred = stemmed_tokens(prediction)
    truth = stemmed_tokens(gold)
    common = sum((Counter(pred) & Counter(truth)).values())
    if not common:
        return 0.0
    precision = common / len(pred)
    recall = common / len(truth)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction, gold):
    """LoCoMo's multi-hop F1: both sides split on commas; for each gold part, the best F1
    over the predicted parts; the mean over gold parts."""
    predictions = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(f1_score(p, g) for p in predictions) for g in golds) / len(golds)


def is_refusal(prediction):
    """True when ``prediction`` declines as LoCoMo's category-5 scoring expects."""
    text = (prediction or "").lower()
    return any(phrase in text for phrase in REFUSAL_PHRASES)


def scored_gold(answer, category):
    """The gold answer as LoCoMo scores it: a string; for open-domain (3) the part before
    the first ';'."""
    text = "" if answer is None else str(answer)
    if category == 3:
        text = text.split(";")[0].strip()
    return text


def locomo_f1(prediction, answer, category):
    """
    LoCoMo's score of a model answer, per category: multi-hop (1) :func:`multi_answer_f1`;
    temporal, open-domain, single-hop (2-4) :func:`f1_score` (open-domain gold cut at ';');
    adversarial (5) 1.0 for a refusal (:func:`is_refusal`), else 0.0.

    Args:
        prediction (str | None): the model's answer; None (no answer) scores 0.0.
        answer: the gold ``answer`` (ignored for category 5).
        category (int): 1-5.

    Raises:
        ValueError: for an unknown category.
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown LoCoMo category {category!r}")
    if prediction is None:
        return 0.0
    if category == ADVERSARIAL:
        return 1.0 if is_refusal(prediction) else 0.0
    gold = scored_gold(answer, category)
    if category == 1:
        return multi_answer_f1(prediction, gold)
    return f1_score(prediction, gold)


# ------------------------------------------------------------------------------------------------
# is the answer in the prompt?


def answer_parts(answer, category):
    """The parts of a gold answer scored separately: comma-separated parts for multi-hop (1),
    the part before ';' for open-domain (3), else the whole answer. Parts without words after
    normalisation are dropped."""
    gold = scored_gold(answer, category)
    parts = gold.split(",") if category == 1 else [gold]
    return [p.strip() for p in parts if normalize_answer(p)]


def token_recall(answer, text):
    """Share of the stemmed words of ``answer`` that occur among those of ``text`` (0.0-1.0;
    0.0 for an answer without words)."""
    wanted = stemmed_tokens(answer)
    if not wanted:
        return 0.0
    present = set(stemmed_tokens(text))
    return sum(1 for w in wanted if w in present) / len(wanted)


def contains_part(part, texts, min_recall=MIN_RECALL):
    """
    True when answer ``part`` is in one of ``texts``: its normalised words occur there
    contiguously, or that text holds at least ``min_recall`` of its stemmed words.

    Args:
        part (str): one answer part.
        texts (list[str]): prompt texts (one per chat message, say); a match never spans two.
    """
    needle = normalize_answer(part)
    if not needle:
        return False
    padded = f" {needle} "
    for text in texts:
        if padded in f" {normalize_answer(text)} ":
            return True
    return any(token_recall(part, text) >= min_recall for text in texts)


def answer_score(answer, texts, category, min_recall=MIN_RECALL):
    """
    How much of the gold ``answer`` the prompt ``texts`` contain: the share of
    :func:`answer_parts` that :func:`contains_part` finds.

    Returns:
        float | None: 0.0-1.0; None when the answer has no scorable words.
    """
    parts = answer_parts(answer, category)
    if not parts:
        return None
    return sum(1 for p in parts if contains_part(p, texts, min_recall)) / len(parts)


# ------------------------------------------------------------------------------------------------
# evidence


def parse_evidence(items):
    """
    Evidence ids, normalised to ``"D<session>:<turn>"`` without leading zeros, in order, each
    once. Tolerates the malformed ids in the data: ``"D8:6; D9:17"`` (two ids in one string),
    ``"D:11:26"``, ``"D30:05"``; strings without an id (``"D"``) give nothing.

    Args:
        items (list | str | None): the ``evidence`` field (or one ``dia_id``).

    Returns:
        list[str]
    """
    if items is None:
        return []
    if isinstance(items, (str, bytes)):
        items = [items]
    found = []
    for item in items:
        for session, turn in _EVIDENCE.findall(str(item)):
            found.append(f"D{int(session)}:{int(turn)}")
    return list(dict.fromkeys(found))


def normalise_dia_id(dia_id):
    """``"D1:03"`` -> ``"D1:3"``; None when it holds no id."""
    ids = parse_evidence([dia_id])
    return ids[0] if ids else None


def evidence_session(evidence_id):
    """The session number of a normalised evidence id (``"D8:6"`` -> 8)."""
    return int(evidence_id[1:].split(":")[0])


def evidence_score(evidence_ids, turn_texts, context_texts):
    """
    Share of a question's evidence turns still verbatim in the conversational part of a prompt.

    Args:
        evidence_ids (list[str]): normalised ids (:func:`parse_evidence`).
        turn_texts (dict): ``{turn id: the exact text the turn was replayed as}``; ids missing
            here (evidence pointing nowhere) are ignored.
        context_texts (list[str]): the prompt's conversation messages (not summaries, not
            retrieved memories).

    Returns:
        float | None: 0.0-1.0, or None when no evidence id names a known turn.
    """
    known = [turn_texts[e] for e in evidence_ids if e in turn_texts]
    if not known:
        return None
    return sum(1 for text in known if any(text in ctx for ctx in context_texts)) / len(known)


#: what ``ai_contrib.core.dates.resolve_relative_dates`` inserts after a relative expression in
#: a remembered line: " (7 May 2023)", " (May 2023)", " (2021)", " (the week before 8 May 2023)"
_DATE_ANNOTATION = re.compile(
    r" \((?:the (?:week|weekend) (?:before|after|of) )?"
    r"(?:\d{1,2} [A-Z][a-z]+ \d{4}|[A-Z][a-z]+ \d{4}|\d{4})\)"
)


def _plain(text):
    """``text`` without date annotations, its whitespace runs as single spaces."""
    return " ".join(_DATE_ANNOTATION.sub("", text).split())


def evidence_in_prompt(evidence_ids, said_texts, prompt_texts):
    """
    The strict recall figure: share of a question's evidence turns whose own text is anywhere
    in the prompt the model answers from (history, summaries, recall notes, any message).

    A turn counts only when its whole text, as said, is one substring of one prompt message;
    the date annotations retrieval adds to a remembered line are allowed (removed before
    matching), nothing else: a summary that paraphrases the turn does not count, nor does a
    message that holds the answer's words in another order.

    Args:
        evidence_ids (list[str]): normalised ids (:func:`parse_evidence`).
        said_texts (dict): ``{turn id: the turn's text as said}``;
            ids missing here are ignored.
        prompt_texts (list[str]): every message of the prompt, the question taken out.

    Returns:
        float | None: 0.0-1.0, or None when no evidence id names a known turn.
    """
    known = [_plain(said_texts[e]) for e in evidence_ids if e in said_texts]
    if not known:
        return None
    haystack = [_plain(text) for text in prompt_texts]
    return sum(1 for text in known if any(text in h for h in haystack)) / len(known)


# ------------------------------------------------------------------------------------------------
# aggregation and tables


def mean(values):
    """Mean of the non-None ``values``; None when there are none."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def aggregate(rows):
    """
    Per system and category means of per-question rows.

    Args:
        rows (list[dict]): ``{"system", "category", "evidence_in_prompt", "answer_in_prompt",
            "evidence_verbatim", "prompt_tokens", "f1"?, "adversarial_in_prompt"?,
            "asserted"?}`` (None = not scored).

    Returns:
        dict: ``{system: {key: stats}}`` where key is a category number, ``"1-4"`` (all
        answerable questions) or nothing else; stats are ``{"n", "evidence_in_prompt",
        "answer_in_prompt",
        "evidence_verbatim", "prompt_tokens", "f1", "adversarial_in_prompt", "asserted"}``,
        means as fractions (None where nothing was scored), plus ``"prompt_tokens_max"``.
    """
    out = {}
    for row in rows:
        system = out.setdefault(row["system"], {})
        keys = [row["category"]]
        if row["category"] in ANSWERED_CATEGORIES:
            keys.append("1-4")
        for key in keys:
            system.setdefault(key, []).append(row)
    fields = ("evidence_in_prompt", "answer_in_prompt", "evidence_verbatim", "prompt_tokens", "f1",
              "adversarial_in_prompt", "asserted")
    return {
        name: {
            key: {"n": len(group), **{f: mean([r.get(f) for r in group]) for f in fields},
                  "prompt_tokens_max": max((r.get("prompt_tokens") or 0 for r in group),
                                           default=None)}
            for key, group in groups.items()
        }
        for name, groups in out.items()
    }


#: the ``turn`` of a game-path row for the line of small talk (``--small-talk``)
SMALL_TALK_TURN = "small talk"


#: what sets a game-path row's ``system`` label apart from its system's name
GAME_MARK = " in a game, "


def game_label(system, turn) -> str:
    """The ``system`` of a game-path row: ``"mask in a game, reply 2"`` (``turn`` from 1), or
    ``"mask in a game, small talk"`` for :data:`SMALL_TALK_TURN`."""
    if turn == SMALL_TALK_TURN:
        return f"{system}{GAME_MARK}{SMALL_TALK_TURN}"
    return f"{system}{GAME_MARK}reply {int(turn)}"


def label_system(label) -> str:
    """The system a row's ``system`` label is of: ``"mask"`` for :func:`game_label`'s
    ``"mask in a game, reply 2"``, the label itself for a row asked afresh."""
    return label.split(GAME_MARK, 1)[0]


#: replies of the game path: the question, then its two follow-ups
GAME_TURNS = (1, 2, 3)
GAME_HEADER = ["system", "path", "n", "evidence in prompt % (strict)", "multi-hop",
               "temporal", "open-domain", "single-hop", "answer in prompt %",
               "prompt tokens mean", "new memory tokens median", "asked about the past %",
               "left out for time %"]


def _median(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def game_path_rows(summary, systems, rows):
    """
    Rows of the table that sets the game path (each question asked in the flow of a talk, then
    two follow-ups on its subject) beside the same questions asked afresh, categories 1-4.

    Args:
        summary (dict): :func:`aggregate`'s result.
        systems (list[str]): system names in display order.
        rows (list[dict]): the per-question rows (the game path's carry ``new_memory_tokens``,
            ``asks`` and ``left_out_for_time``).

    Returns:
        list[list]: one row per system and path (``"afresh"``, ``"game, reply 1"`` ...).
    """
    out = []
    for system in systems:
        labels = [(system, "afresh")] + [(game_label(system, t), f"game, reply {t}")
                                         for t in GAME_TURNS]
        for label, path in labels:
            group = summary.get(label, {}).get("1-4")
            if not group or (path == "afresh" and game_label(system, 1) not in summary):
                continue
            mine = [r for r in rows if r["system"] == label
                    and r["category"] in ANSWERED_CATEGORIES]
            by_category = [_pct((summary[label].get(c) or {}).get("evidence_in_prompt"))
                           for c in ANSWERED_CATEGORIES]
            game = path != "afresh"
            asks = mean([float(r.get("asks") is not None) for r in mine]) if game else None
            timed = mean([float(bool(r.get("left_out_for_time"))) for r in mine]) if game \
                else None
            out.append([system, path, group["n"], _pct(group.get("evidence_in_prompt")),
                        *by_category, _pct(group["answer_in_prompt"]),
                        _num(group["prompt_tokens"]),
                        _num(_median([r.get("new_memory_tokens") for r in mine])) if game
                        else "-", _pct(asks), _pct(timed)])
    return out


GAME_TIME_HEADER = ["system", "turn", "n", "reply s median", "reply s p95",
                    "x small talk (median)"]
GAME_EVALUATED_HEADER = ["system", "turn", "n", "evaluated tokens median",
                         "evaluated tokens p95", "x small talk (median)",
                         "evaluation s median at 150 tokens/s"]
#: the embedded model's prompt speed the client assumes until it has measured one
#: (``docs/design.md``, "Recall notes"), for the evaluated-tokens table's seconds
EMBEDDED_PROMPT_SPEED = 150


def evaluated_tokens(previous, prompt, count) -> int:
    """
    Tokens a server with a prefix cache (llama.cpp's slot cache) evaluates for ``prompt`` after
    ``previous``: those of the messages from the first one that differs, at message granularity
    (a message that changed counts whole: an upper bound).

    Args:
        previous (list[dict] | None): the last prompt sent (None: nothing cached).
        prompt (list[dict]): message dicts ``{"role", "content", ...}``.
        count (callable): ``message dict -> int`` tokens.

    Returns:
        int: tokens.
    """
    same = 0
    for old, new in zip(previous or (), prompt):
        if old != new:
            break
        same += 1
    return sum(count(message) for message in prompt[same:])


def game_evaluated_rows(systems, rows):
    """
    Rows of the evaluated-tokens table of the game path (``--small-talk``): the median and p95
    tokens each turn's prompt made the server evaluate (a row's ``evaluated_tokens``,
    :func:`evaluated_tokens`) for the replies to a question, its follow-ups and the small talk
    after them, each median over the small talk's, and the median in seconds at
    :data:`EMBEDDED_PROMPT_SPEED`. What differs between a memory reply and small talk is this
    evaluation (the answer's generation is the same on average), so the ratio bounds the ratio
    of whole reply times from above.

    Returns:
        list[list]: one row per system and turn; empty when the run had no small talk.
    """
    return [[system, label, len(values), _num(median), _num(p95), _num(median / base, 2),
             _num(median / EMBEDDED_PROMPT_SPEED, 2)]
            for system, label, values, median, p95, base
            in _beside_small_talk(systems, rows, "evaluated_tokens")]


def _beside_small_talk(systems, rows, key):
    """
    ``(system, turn label, sorted values, median, p95, small talk's median)`` for each system
    and game-path turn whose rows carry ``key``, the small talk last; none for a system whose
    run had no small talk (:func:`game_evaluated_rows`, :func:`game_time_rows`).
    """
    for system in systems:
        by_turn = {turn: sorted(r[key] for r in rows
                                if r["system"] == game_label(system, turn)
                                and r.get(key) is not None)
                   for turn in (*GAME_TURNS, SMALL_TALK_TURN)}
        base = _median(by_turn[SMALL_TALK_TURN])
        if not base:
            continue
        for turn, values in by_turn.items():
            if values:
                p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
                yield (system, turn if turn == SMALL_TALK_TURN else f"reply {turn}", values,
                       _median(values), p95, base)


def game_time_rows(systems, rows):
    """
    Rows of the reply-time table of the game path (``--answer --small-talk``): the median and
    p95 seconds of each turn (retrieval, prompt and the model's answer: a row's ``turn_s``) of
    the replies to a question, its follow-ups and the small talk after them, and each median
    over the small talk's, measured in the same run.

    Returns:
        list[list]: one row per system and turn; empty when the run had no small talk.
    """
    return [[system, label, len(values), _num(median, 2), _num(p95, 2), _num(median / base, 2)]
            for system, label, values, median, p95, base
            in _beside_small_talk(systems, rows, "turn_s")]


def _pct(value):
    return "-" if value is None else f"{100 * value:.1f}"


def _num(value, digits=0):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(header, rows):
    """A Markdown table (str) from a header list and rows of cell strings."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def format_report(summary, systems, stats, with_f1, rows_by_question=None):
    """
    The stdout report: one table for categories 1-4, one for category 5, one for the replay.

    Args:
        summary (dict): :func:`aggregate`'s result.
        systems (list[str]): system names in display order.
        stats (dict): ``{system: {"llm_calls", "llm_seconds", "wall_s", "replay_s", "qa_s",
            "compactions", "failed_compactions", "evictions", "facts", "final_tokens",
            "answer_errors", "summary_calls", "summary_completion_tokens", "extraction_calls",
            "compaction_s"}}`` (missing keys print as 0 or ``-``).
        with_f1 (bool): whether answers were generated (adds the F1 and refusal columns).
        rows_by_question (list[dict], optional): the per-question rows; with ``full`` among
            them, a table of each system against it per conversation
            (:func:`versus_full_rows`).

    Returns:
        str
    """
    header = ["system", "category", "n", "evidence in prompt % (strict)", "answer in prompt %",
              "evidence verbatim %"]
    if with_f1:
        header.append("F1 %")
    header += ["prompt tokens mean", "max", "LLM calls", "wall s"]
    rows = []
    for system in systems:
        groups = summary.get(system, {})
        for key in ["1-4", *ANSWERED_CATEGORIES]:
            group = groups.get(key)
            if not group:
                continue
            label = "all 1-4" if key == "1-4" else f"{key} {CATEGORIES[key]}"
            row = [system if key == "1-4" else "", label, group["n"],
                   _pct(group.get("evidence_in_prompt")), _pct(group["answer_in_prompt"]),
                   _pct(group["evidence_verbatim"])]
            if with_f1:
                row.append(_pct(group["f1"]))
            row += [_num(group["prompt_tokens"]), _num(group.get("prompt_tokens_max"))]
            if key == "1-4":
                row += [stats.get(system, {}).get("llm_calls", 0),
                        _num(stats.get(system, {}).get("wall_s"), 1)]
            else:
                row += ["", ""]
            rows.append(row)
    parts = ["## Categories 1-4 (answerable)", "", markdown_table(header, rows)]
    game = game_path_rows(summary, systems, rows_by_question or [])
    if game:
        parts += ["", "## In a game: the questions asked in the flow of the talk, categories 1-4",
                  "", markdown_table(GAME_HEADER, game)]
    evaluated = game_evaluated_rows(systems, rows_by_question or [])
    if evaluated:
        parts += ["", "## Prompt evaluation per reply in a game (a prefix cache, message "
                  "granularity)", "", markdown_table(GAME_EVALUATED_HEADER, evaluated)]
    timed = game_time_rows(systems, rows_by_question or []) if with_f1 else []
    if timed:
        parts += ["", "## Reply time in a game (the model answering each turn)", "",
                  markdown_table(GAME_TIME_HEADER, timed)]
    if rows_by_question:
        against = versus_full_rows(rows_by_question, systems)
        if against:
            parts += ["", "## Against the whole conversation (categories 1-4)", "",
                      markdown_table(VERSUS_FULL_HEADER, against)]

    adv_header = ["system", "n", "adversarial answer in prompt %", "evidence in prompt % (strict)",
                  "evidence verbatim %"]
    if with_f1:
        adv_header += ["declined % (LoCoMo score)", "asserted adversarial answer %"]
    adv_header.append("prompt tokens")
    adv_rows = []
    for system in systems:
        group = summary.get(system, {}).get(ADVERSARIAL)
        if not group:
            continue
        row = [system, group["n"], _pct(group["adversarial_in_prompt"]),
               _pct(group.get("evidence_in_prompt")), _pct(group["evidence_verbatim"])]
        if with_f1:
            row += [_pct(group["f1"]), _pct(group["asserted"])]
        row.append(_num(group["prompt_tokens"]))
        adv_rows.append(row)
    if adv_rows:
        parts += ["", "## Category 5 (adversarial)", "", markdown_table(adv_header, adv_rows)]

    rep_header = ["system", "compactions", "failed", "evictions", "facts journaled",
                  "context tokens at end", "LLM calls (memory work / answers)",
                  "summary calls", "summary tokens generated", "extraction calls",
                  "compaction s", "LLM s", "replay s", "questions s"]
    if with_f1:
        rep_header.append("answer errors")
    rep_rows = []
    for system in systems:
        s = stats.get(system, {})
        row = [system, s.get("compactions", 0), s.get("failed_compactions", 0), s.get("evictions", 0), s.get("facts", 0),
               s.get("final_tokens", "-"),
               f"{s.get('memory_calls', 0)} / {s.get('answer_calls', 0)}",
               s.get("summary_calls", 0), s.get("summary_completion_tokens", 0),
               s.get("extraction_calls", 0), _num(s.get("compaction_s"), 1),
               _num(s.get("llm_seconds"), 1), _num(s.get("replay_s"), 1), _num(s.get("qa_s"), 1)]
        if with_f1:
            row.append(s.get("answer_errors", 0))
        rep_rows.append(row)
    parts += ["", "## Replay", "", markdown_table(rep_header, rep_rows)]
    memory_rows = memory_table_rows(systems, stats)
    if memory_rows:
        parts += ["", "## Facts journaled and summary fidelity", "",
                  markdown_table(MEMORY_HEADER, memory_rows)]
    return "\n".join(parts) + "\n"


VERSUS_FULL_HEADER = ["system", "conversation", "n", "evidence in prompt % (strict)",
                      "full's strict %", "answer in prompt %", "full's %",
                      "share of full's answers %", "prompt tokens mean", "full's tokens mean",
                      "share of full's tokens %"]


def versus_full_rows(rows, systems, reference="full"):
    """
    Rows of the table that sets each system against the whole conversation (categories 1-4),
    per conversation and for all of them: its strict evidence-in-prompt and answer-in-prompt
    rates and mean prompt tokens beside ``reference``'s on the same questions, and the shares
    (system / reference).

    Args:
        rows (list[dict]): per-question rows (:func:`aggregate`'s input; ``"conversation"``
            and ``"qa_index"`` identify a question).
        systems (list[str]): system names in display order; ``reference`` and systems without
            rows are skipped.
        reference (str): the system compared against.

    Returns:
        list[list]: rows of cells in :data:`VERSUS_FULL_HEADER` order; empty when
        ``reference`` has no rows.
    """
    answered = [r for r in rows if r["category"] in ANSWERED_CATEGORIES]
    ref = {(r["conversation"], r["qa_index"]): r for r in answered if r["system"] == reference}
    if not ref:
        return []
    out = []
    for system in systems:
        mine = [r for r in answered if r["system"] == system and system != reference
                and (r["conversation"], r["qa_index"]) in ref]
        if not mine:
            continue
        conversations = list(dict.fromkeys(r["conversation"] for r in mine))
        groups = [(c, [r for r in mine if r["conversation"] == c]) for c in conversations]
        if len(groups) > 1:
            groups.append(("all", mine))
        for name, group in groups:
            theirs = [ref[(r["conversation"], r["qa_index"])] for r in group]
            got, full = (mean([r["answer_in_prompt"] for r in g]) for g in (group, theirs))
            strict, full_strict = (mean([r.get("evidence_in_prompt") for r in g])
                                   for g in (group, theirs))
            tokens, full_tokens = (mean([r["prompt_tokens"] for r in g]) for g in (group, theirs))
            out.append([system, name, len(group), _pct(strict), _pct(full_strict),
                        _pct(got), _pct(full),
                        _pct(got / full) if full else "-", _num(tokens), _num(full_tokens),
                        _pct(tokens / full_tokens) if full_tokens else "-"])
    return out


MEMORY_HEADER = ["system", "conversation", "facts journaled", "facts rejected",
                 "facts replaced by their line", "summaries scored",
                 "fidelity min", "fidelity median", "replaced by an extract",
                 "rejected", "max unsupported names+numbers %",
                 "summaries refused for a quote", "quotes repaired",
                 "invented quotes in context", "invented quotes in journal",
                 "junk facts (of facts classified)"]


def memory_table_rows(systems, stats):
    """
    Rows of the facts and summary-fidelity table (``docs/design.md``, "Summary fidelity"):
    per system, one row per conversation with the facts its journal gained, the facts the
    one-line check rejected and those it replaced by their line (``docs/design.md``, "Facts
    you can trust"), then a row
    ``all`` with the fidelity scores of every summary put in (min and median), how many were
    replaced by an extract or rejected, and the worst share of a used summary's names and
    numbers absent from its source.

    Args:
        systems (list[str]): system names in display order.
        stats (dict): ``{system: {"facts_by_conversation": {conversation: {"journaled",
            "rejected", "replaced"} (ints; a plain int, from a run before the check, is the
            journaled count)}, "summary_fidelity": [float], "fidelity_replaced": int,
            "fidelity_rejected": int, "max_unsupported_share": float | None, "facts": int,
            "facts_rejected": int, "facts_replaced": int, "invented_quotes_context": int,
            "invented_quotes_journal": int (:func:`invented_quotes`), "misquoted_summaries":
            int (summaries refused for quotes not their speaker's words), "quotes_repaired": int
            (quotes the sleep's repair removed), "journal_junk": int,
            "journal_classified": int (:func:`journal_kinds`)}}``;
            systems without
            ``facts_by_conversation`` (baselines) get no row.

    Returns:
        list[list]: rows of cells, in :data:`MEMORY_HEADER` order.
    """
    import statistics

    rows = []
    for system in systems:
        s = stats.get(system, {})
        per_conversation = s.get("facts_by_conversation")
        if per_conversation is None:
            continue
        for conversation, facts in sorted(per_conversation.items()):
            if not isinstance(facts, dict):
                facts = {"journaled": facts}
            rows.append([system, conversation, facts.get("journaled", 0),
                         facts.get("rejected", "-"), facts.get("replaced", "-"),
                         "", "", "", "", "", "", "", "", "", "", ""])
        scores = s.get("summary_fidelity") or []
        worst = s.get("max_unsupported_share")
        rows.append([
            system, "all", s.get("facts", 0), s.get("facts_rejected", 0),
            s.get("facts_replaced", 0), len(scores),
            _num(min(scores), 2) if scores else "-",
            _num(statistics.median(scores), 2) if scores else "-",
            s.get("fidelity_replaced", 0), s.get("fidelity_rejected", 0),
            "-" if worst is None else _pct(worst),
            s.get("misquoted_summaries", "-"), s.get("quotes_repaired", "-"),
            s.get("invented_quotes_context", "-"), s.get("invented_quotes_journal", "-"),
            _junk_cell(s.get("journal_junk"), s.get("journal_classified")),
        ])
    return rows


def _junk_cell(junk, classified):
    """``"3 of 21 (14.3%)"``; ``"-"`` when nothing was classified."""
    if not classified:
        return "-"
    return f"{junk} of {classified} ({_pct(junk / classified)}%)"


def invented_quotes(history, archived, entries):
    """
    Quotes nobody said that a run left where a prompt reads them (``docs/design.md``, "Summary
    fidelity", quotes): ``{"context": failed quotes in the summaries in context, "journal":
    failed quotes in journal entries}``, each checked by
    :func:`ai_contrib.core.quotes.check_quotes` against every line of the archive and the
    history (what the speakers said).

    Args:
        history (list[dict]): the runtime history (summaries are its markers).
        archived (list[dict]): the archive's messages. entries (list[dict]): journal entries.
    """
    from ai_contrib.core.fidelity import message_texts
    from ai_contrib.core.messages import is_marker
    from ai_contrib.core.quotes import check_quotes, speaker_lines

    # what was said, never what a summary says was said: a summary's quotes would vouch for
    # themselves
    said = speaker_lines([m for m in list(archived) + list(history)
                          if m.get("role") in ("user", "assistant") and not is_marker(m)])
    in_context = sum(len(check_quotes(text, said).failures)
                     for _position, _msg, text, summary in message_texts(history) if summary)
    in_journal = sum(len(check_quotes(str(e.get("content") or ""), said).failures)
                     for e in entries)
    return {"context": in_context, "journal": in_journal}


#: share of an entry's stemmed words one line must hold for the entry to be that line's fact
#: (a restatement in the third person adds a name and changes a pronoun or two)
FACT_SUPPORT = 0.6
#: journal entries that hold what someone said (a synthesis or a compaction's entry is a
#: summary, checked by the fidelity check instead)
FACT_SOURCES = ("fact", "observation")


def journal_kinds(entries, archived):
    """
    What the journal's facts are, by the benchmark's classifier (``docs/benchmarks.md``, "What
    the journal holds"): ``"player"`` when one archived player line (role ``user``) holds at
    least :data:`FACT_SUPPORT` of the entry's stemmed words, its speaker's name aside;
    ``"npc"`` when one of the NPC's own lines does;
    ``"junk"`` otherwise (a prompt's example, a question, words no one said together).

    Args:
        entries (list[dict]): journal entries (``ai_contrib.memory.journal`` shape: ``content``,
            ``source_type``, optional ``speaker``); only :data:`FACT_SOURCES` are classified.
        archived (list[dict]): the archive's messages (``role``, ``content``, ``name``).

    Returns:
        dict: ``{"player": int, "npc": int, "junk": int, "junk_share": float (0.0 with no
        fact), "contents": [(kind, content), ...]}``.
    """
    lines = [(m.get("role"), set(stemmed_tokens(str(m.get("content") or ""))),
              set(stemmed_tokens(str(m.get("name") or ""))))
             for m in archived if m.get("role") in ("user", "assistant")]
    counts, contents = {"player": 0, "npc": 0, "junk": 0}, []
    for entry in entries:
        if entry.get("source_type") not in FACT_SOURCES:
            continue
        kind = _fact_kind(entry, lines)
        counts[kind] += 1
        contents.append((kind, str(entry.get("content") or "")))
    total = sum(counts.values())
    return {**counts, "junk_share": counts["junk"] / total if total else 0.0,
            "contents": contents}


def _fact_kind(entry, lines):
    """:func:`journal_kinds`'s kind of one entry; ``lines``: ``(role, words, name words)``."""
    words = stemmed_tokens(str(entry.get("content") or ""))
    best = {"user": 0.0, "assistant": 0.0}
    for role, said, name in lines:
        wanted = [w for w in words if w not in name]
        if not wanted:
            continue
        share = sum(1 for w in wanted if w in said) / len(wanted)
        best[role] = max(best[role], share)
    if best["user"] >= FACT_SUPPORT and best["user"] >= best["assistant"]:
        return "player"
    if best["assistant"] >= FACT_SUPPORT:
        return "npc"
    return "junk"
