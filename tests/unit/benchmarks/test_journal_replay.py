"""
The pure parts of ``benchmarks/journal_replay.py``: the classifier of journal entries (player
fact, NPC line, junk) and the figures built on it, which must count an NPC's line and junk
whenever there is one; and the script's size.
"""

import importlib.util

from tests.support.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_journal_replay", ROOT / "benchmarks" / "journal_replay.py")
replay = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(replay)


def test_the_script_has_sixty_lines_and_twenty_stated_facts_of_players():
    assert len(replay.LINES) == 60
    assert len(replay.STATED) == 20
    assert all(replay.LINES[i][0] in replay.PLAYERS for i, _words in replay.STATED)


def test_entries_are_told_apart_and_counted():
    journal = {"entries": [
        {"source_type": "fact", "content": "Carol is a weaver from Eastwick."},
        {"source_type": "fact", "content": "Marta said: I'm not sure about that."},
        {"source_type": "fact", "content": "How have you been feeling lately?",
         "speaker": None},
        {"source_type": "fact", "content": "Alice is allergic to peanuts."},
        {"source_type": "compaction", "content": "[CONTEXT SYNTHESIS] ..."},
    ]}
    assert [replay.classify(e)[0] for e in journal["entries"][:4]] == [
        "player", "npc", "npc", "junk"]
    figures = replay.measure(journal)
    assert (figures["entries"], figures["player"], figures["npc"], figures["junk"]) == (
        4, 1, 2, 1)
    assert (figures["stated_journaled"], figures["npc_share"]) == (1, 0.5)
    # control: without the NPC's lines and the junk, the shares fall to nothing
    clean = replay.measure({"entries": journal["entries"][:1]})
    assert (clean["npc_share"], clean["junk_share"], clean["stated_share"]) == (0.0, 0.0, 0.05)
