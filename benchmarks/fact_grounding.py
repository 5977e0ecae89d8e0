"""
The threshold of the one-line fact check (``ai_contrib.core.grounding.MIN_LINE_SUPPORT``):
labelled facts (``fact_grounding_labels.json``) about sessions of LoCoMo conversations, scored
against their session's lines. Prints each fact's support, then, per threshold, how many true
facts pass and how many false ones are stopped (by the whole check: names, subject, one line,
language), beside the word-level check of ``core/fidelity.fact_problem``.

With ``--model-facts N`` it also lets the embedded model (SmolLM2-135M, structured output, one
extraction request per session) journal facts about the first N sessions of each conversation
named by ``--conversations``, and compares what three ways of storing them keep: the model's
facts as written, checked (those that fail replaced by their best line, attributed), and
verbatim (every fact replaced by its best line): how many pass, and how many of the LoCoMo
questions about those sessions have every content word of their answer in the stored text.

Usage: python benchmarks/fact_grounding.py [--data locomo_dev.json] [--model-facts 3]
(``docs/design.md``, "Facts you can trust").
"""

import argparse
import json
import os
import re
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ai_contrib.core.fidelity import fact_problem, source_text  # noqa: E402
from ai_contrib.core.grounding import check_fact, fact_support, source_lines  # noqa: E402

DEFAULT_DATA = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")
LABELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fact_grounding_labels.json")
THRESHOLDS = (0.4, 0.5, 0.6, 0.67, 0.7, 0.75, 0.8, 0.9)


def session_messages(conversations, sample_id, session):
    """The messages (``core/messages.py`` shape) of one LoCoMo session."""
    turns = conversations[sample_id]["conversation"][f"session_{session}"]
    return [{"role": "user", "name": t["speaker"], "content": t["text"]} for t in turns]


def _answer_words(answer):
    words = re.findall(r"[a-z0-9]+", str(answer).casefold())
    return {w for w in words if len(w) >= 3 and w not in ("the", "and", "for", "with")}


ROUNDS = 3  # extraction requests per session, as the sleep's loop makes them (up to 5)


def _ask(server, messages, seqs):
    """The facts of up to :data:`ROUNDS` structured extraction replies (the example's facts
    left out, as the loop leaves them out), each reply and a nudge added to the next request."""
    from ai_contrib.llm import extraction_tools as tools
    from ai_contrib.npc.extraction import STRUCTURED_NUDGE

    facts = []
    for rounds in range(ROUNDS):
        content, calls = _request(server, messages, seqs, allow_noop=rounds > 0)
        texts = [c["arguments"].get("content") or "{}: {}".format(
            c["arguments"].get("entity"), c["arguments"].get("observation"))
            for c in calls if c["name"] != tools.NOOP and not c["error"]]
        print(f"    reply {rounds + 1}: " + " | ".join(texts), flush=True)
        texts = [t for t in texts if not tools.repeats_example(t)]
        facts += texts
        if not texts and any(c["name"] == tools.NOOP for c in calls):
            break
        messages = messages + [
            {"role": "assistant", "content": content},
            {"role": "user", "content": f"TOOL RESULTS:\n{len(texts)} recorded\n\n"
                                        f"{STRUCTURED_NUDGE} Or call noop if nothing is left."}]
    return facts


def _request(server, messages, seqs, allow_noop):
    from ai_contrib.llm import extraction_tools as tools

    body = json.dumps({"messages": messages, "max_tokens": 256, "temperature": 0.2,
                       "seed": 1234, "response_format": tools.structured_response_format(
                           seqs=seqs, allow_noop=allow_noop)}).encode()
    request = urllib.request.Request(
        server.base_url + "/chat/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {server.api_key}"})
    with urllib.request.urlopen(request, timeout=600) as response:
        content = json.loads(response.read())["choices"][0]["message"]["content"]
    return content, tools.parse_structured_calls(content)


def model_facts(conversations, sample_ids, sessions):
    """Per policy, ``{"facts", "passed", "answered", "questions"}`` over the sessions."""
    from ai_contrib.core.grounding import attributed_line
    from ai_contrib.llm.embedded import EmbeddedServerProcess
    from ai_contrib.npc.extraction import build_extraction_messages

    totals = {p: {"facts": 0, "answered": 0} for p in ("model", "checked", "verbatim")}
    questions = passed = 0
    with EmbeddedServerProcess() as server:
        for sample_id in sample_ids:
            conv = conversations[sample_id]
            npc = conv["conversation"]["speaker_b"]
            for session in range(1, sessions + 1):
                messages = session_messages(conversations, sample_id, session)
                for seq, msg in enumerate(messages, 1):
                    msg.update(seq=seq, role="assistant" if msg["name"] == npc else "user")
                request = build_extraction_messages(f"You are {npc}.", messages, structured=True)
                lines = source_lines(messages)
                stored = {p: [] for p in totals}
                for fact in _ask(server, request, list(range(1, len(messages) + 1))):
                    verdict = check_fact(fact, lines)
                    best = attributed_line(lines[verdict.line]) if verdict.line is not None \
                        else None
                    passed += verdict.passed
                    print(f"  {sample_id} s{session} {verdict.support:.2f} "
                          f"{'pass' if verdict.passed else 'FAIL'} {fact}")
                    stored["model"].append(fact)
                    stored["checked"].append(fact if verdict.passed else best)
                    stored["verbatim"].append(best)
                asked = [qa for qa in conv["qa"] if any(
                    str(e).startswith(f"D{session}:") for e in qa.get("evidence", []))
                    and "answer" in qa]
                questions += len(asked)
                for policy, facts in stored.items():
                    facts = [f for f in facts if f]
                    text = set(re.findall(r"[a-z0-9]+", " ".join(facts).casefold()))
                    totals[policy]["facts"] += len(facts)
                    totals[policy]["answered"] += sum(
                        1 for qa in asked if _answer_words(qa["answer"])
                        and _answer_words(qa["answer"]) <= text)
    return totals, questions, passed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--model-facts", type=int, default=0, metavar="N")
    parser.add_argument("--conversations", default="conv-26,conv-30")
    args = parser.parse_args()
    with open(args.data, encoding="utf-8") as fh:
        conversations = {c["sample_id"]: c for c in json.load(fh)}
    with open(LABELS, encoding="utf-8") as fh:
        facts = json.load(fh)["facts"]
    rows = []
    for sample_id, session, label, fact in facts:
        messages = session_messages(conversations, sample_id, session)
        lines = source_lines(messages)
        support = fact_support(fact, lines)[0]
        rows.append((label, fact, lines, support, fact_problem(fact, source_text(messages))))
        print(f"{'T' if label else 'F'} {support:.2f} {fact}")
    true_n = sum(1 for r in rows if r[0])
    false_n = len(rows) - true_n
    old_pass_false = sum(1 for r in rows if not r[0] and not r[4])
    old_pass_true = sum(1 for r in rows if r[0] and not r[4])
    print(f"\nword-level check (fact_problem): {old_pass_true}/{true_n} true facts pass, "
          f"{false_n - old_pass_false}/{false_n} false facts stopped")
    print("threshold  true facts pass  false facts stopped  accuracy")
    for threshold in THRESHOLDS:
        passed = [check_fact(r[1], r[2], min_support=threshold).passed for r in rows]
        tp = sum(1 for r, p in zip(rows, passed) if r[0] and p)
        tn = sum(1 for r, p in zip(rows, passed) if not r[0] and not p)
        print(f"{threshold:9.2f}  {tp:>6}/{true_n:<8} {tn:>8}/{false_n:<10} "
              f"{(tp + tn) / len(rows):.2f}")
    if args.model_facts:
        totals, questions, passed = model_facts(
            conversations, args.conversations.split(","), args.model_facts)
        print(f"\nembedded model: {totals['model']['facts']} facts, {passed} pass the check; "
              f"{questions} questions about those sessions")
        for policy, row in totals.items():
            print(f"{policy:>9}: {row['facts']} stored, answers of {row['answered']} "
                  f"questions in them")


if __name__ == "__main__":
    main()
