"""
The archive's full-text index (``ai_contrib.memory.fulltext``): incremental catch-up from the
JSONL archive, rebuilds when the index is missing, corrupt, behind or ahead, player text as
query, audience and in-context filtering, agreement with the former rank-bm25 ranking, and an
NPC's archive searched through ``recall.archived_out_of_context``.
"""

import os
import shutil
import tempfile
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.memory import fulltext
from ai_contrib.memory.archive import MessageArchive
from ai_contrib.memory.fulltext import (
    ArchiveSearch,
    FullTextIndex,
    index_path,
    match_expression,
)
from ai_contrib.memory.retrieval import build_memory_context, doc_text, terms

from tests.support.npc_fixtures import NPCTestCase

A, B, C = "#11", "#12", "#13"

LINES = [
    "Bob promised to bring three iron ingots on Friday.",
    "The weather was fine and we walked to the market.",
    "My sister Elena lives in Riverwood, past the old mill.",
    "I lost my silver ring near the well last winter.",
    "The blacksmith wants forty gold for the long sword.",
    "We should repair the roof before the autumn rains.",
    "Alice is allergic to peanuts, keep them out of the stew.",
    "The ferry to Eastport leaves at dawn every Tuesday.",
    "Tom owes the tavern twelve silver coins for last week's ale.",
    "A wolf was seen near the north gate two nights ago.",
    "Elena sent a letter about the harvest festival in Riverwood.",
    "The mill stone cracked, so the miller cannot grind wheat.",
    "Iron is scarce since the mine at Greyhill flooded.",
    "The priest will bless the new well on Sunday morning.",
    "Bob's brother keeps bees and sells honey at the market.",
    "The guard captain asked about strangers in the inn.",
    "I hid the cellar key under the blue barrel.",
    "The bard sang about the dragon of Greyhill all night.",
    "Alice brought fresh bread and a jar of honey.",
    "The roof of the stable leaks when it rains hard.",
    "Forty gold is too much for a sword, said Tom.",
    "The market is closed on festival days.",
    "Wolves took two sheep from the farm by the river.",
    "The new well water tastes of iron.",
    "Elena's husband works at the Greyhill mine.",
    "The tavern serves lamb stew on Fridays.",
    "The ferryman's daughter is getting married in spring.",
    "Tom lost his dog in the woods near Riverwood.",
    "A merchant from Eastport sells silk and spices.",
    "The inn's cellar floods every spring.",
]


def message(i, content, role=None, audience=None, name=None, msg_id=None):
    meta = {} if audience is None else {"audience": sorted(audience)}
    return {"id": msg_id or f"m{i}", "role": role or ("user" if i % 2 == 0 else "assistant"),
            "name": name or ("Bob" if i % 2 == 0 else "Marta"), "content": content,
            "timestamp": "2026-11-20T14:02:11+00:00", "metadata": meta}


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="ai-fulltext-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def new_archive(workdir, lines=LINES, audience=None):
    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    for i, text in enumerate(lines):
        archive.append_message(message(i, text, audience=audience))
    return archive


class TailSpy:
    """Records the offset of every ``archive.tail`` call and the lines it yielded."""

    def __init__(self, archive):
        self.calls = []
        self._tail = archive.tail
        archive.tail = self

    def __call__(self, offset=0, **kwargs):
        call = {"offset": offset, "lines": 0}
        self.calls.append(call)
        for item in self._tail(offset, **kwargs):
            call["lines"] += 1
            yield item


def ids(hits):
    return [doc["id"] for doc, _score in hits]


# ------------------------------------------------------------------------------ incremental


def test_appends_are_indexed_incrementally_without_rebuild(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    assert index.sync()["docs"] == len(LINES)
    archive.append("evict", ids=["m0"], reason="test")  # not a message: read, not indexed
    spy = TailSpy(archive)
    offset = index.stats()["offset"]
    archive.append_message(message(100, "A griffin nests on the Greyhill tower."))
    archive.append_message(message(101, "   ", role="user"))  # no text: not indexed
    archive.append_message(message(102, "system text about griffins", role="system"))
    hits = index.search("griffin nest", 5)
    assert ids(hits) == ["m100"]
    # one catch-up, from where the last one stopped, reading only the four new lines
    assert spy.calls == [{"offset": offset, "lines": 4}]
    assert index.stats()["docs"] == len(LINES) + 1
    assert index.stats()["seq"] == archive.last_seq
    # nothing new: a query reads no archive line
    index.search("griffin", 5)
    index.score_external("griffin", ["griffin"])
    assert len(spy.calls) == 1
    index.close()


def test_a_line_said_after_a_forget_is_found_and_scored(workdir):
    # a forget and one new line leave the line count as it was: the word counts the index
    # keeps between searches must still see the new line's words
    archive = new_archive(workdir, lines=["My locker code is 4417.", "Good morning to you."])
    index = FullTextIndex(index_path(archive.path), archive)
    assert index.search("ferry dawn", 5) == []  # the words are counted, as absent
    archive.append("forget", seqs=[0])
    archive.append_message(message(3, "The ferry leaves at dawn."))
    assert [doc["content"] for doc, _ in index.search("ferry dawn", 5)] == [
        "The ferry leaves at dawn."]
    said = "The ferry leaves at dawn."
    assert index.score_external("ferry dawn", [said])[0] == pytest.approx(
        FullTextIndex(index_path(archive.path) + ".fresh", archive).score_external(
            "ferry dawn", [said])[0])
    assert index.score_external("ferry dawn", [said])[0] > 0
    assert "4417" not in build_memory_context([], ArchiveSearch(index), "locker code").text


def test_a_line_being_written_waits_for_the_next_catch_up(workdir):
    archive = new_archive(workdir, LINES[:3])
    index = FullTextIndex(index_path(archive.path), archive)
    index.sync()
    with open(archive.path, "ab") as fh:  # the reactor is mid-write
        fh.write(b'{"seq": 3, "kind": "message", "msg": {"id": "m3", "role": "user", "con')
    assert index.sync()["seq"] == 2
    with open(archive.path, "ab") as fh:
        fh.write(b'tent": "the zeppelin lands"}}\n')
    assert index.sync()["seq"] == 3
    assert ids(index.search("zeppelin", 3)) == ["m3"]
    index.close()


def test_any_thread_may_use_the_index_in_turn(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    index.sync()  # opened here
    results = []
    worker = threading.Thread(target=lambda: results.append(ids(index.search("cellar key", 1))))
    worker.start()
    worker.join()
    assert results == [["m16"]]
    index.close()


def test_least_recently_used_files_are_closed_and_reopened(workdir, monkeypatch):
    monkeypatch.setattr(fulltext, "MAX_OPEN", 2)
    indexes = []
    for n in range(3):
        folder = os.path.join(workdir, str(n))
        os.makedirs(folder)
        archive = new_archive(folder)
        indexes.append(FullTextIndex(index_path(archive.path), archive))
    for index in indexes:
        assert ids(index.search("cellar key", 1)) == ["m16"]
    assert [index._conn is not None for index in indexes] == [False, True, True]
    assert ids(indexes[0].search("ferry Eastport", 1)) == ["m7"]  # reopened
    assert [index._conn is not None for index in indexes] == [True, False, True]
    for index in indexes:
        index.close()


# ------------------------------------------------------------------------------ JSONL: the record


def test_a_deleted_index_is_rebuilt_from_the_archive(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    before = index.search("Elena Riverwood", 5)
    index.close()
    os.remove(index.path)
    again = FullTextIndex(index_path(archive.path), archive)
    assert again.search("Elena Riverwood", 5) == before
    assert again.stats()["docs"] == len(LINES)
    again.close()


def test_an_index_behind_the_archive_catches_up_from_its_own_offset(workdir):
    archive = new_archive(workdir, LINES[:10])
    index = FullTextIndex(index_path(archive.path), archive)
    index.sync()
    index.close()
    backup = index.path + ".bak"
    shutil.copy(index.path, backup)  # an admin's copy with 10 messages
    for i, text in enumerate(LINES[10:], start=10):
        archive.append_message(message(i, text))
    index.sync()
    index.close()
    shutil.copy(backup, index.path)
    restored = FullTextIndex(index_path(archive.path), archive)
    behind = restored.stats()
    assert behind["docs"] == 10 and behind["seq"] == 9
    spy = TailSpy(archive)
    assert restored.sync()["docs"] == len(LINES)
    assert spy.calls == [{"offset": behind["offset"], "lines": len(LINES) - 10}]
    assert ids(restored.search("dragon bard", 1)) == ["m17"]
    restored.close()


def test_an_archive_restored_from_an_older_backup_rebuilds_the_index(workdir):
    archive = new_archive(workdir, LINES[:12])
    backup = archive.path + ".bak"
    shutil.copy(archive.path, backup)
    for i, text in enumerate(LINES[12:], start=12):
        archive.append_message(message(i, text))
    index = FullTextIndex(index_path(archive.path), archive)
    assert index.sync()["docs"] == len(LINES)
    archive.close()
    shutil.copy(backup, archive.path)
    older = MessageArchive(archive.path)
    index.archive = older
    # the index is ahead of the archive: rebuilt, so nothing the archive lost is found
    assert index.sync()["docs"] == 12
    assert index.search("dragon bard", 3) == []
    # same length, other content: the CRC of the last line read tells them apart
    older.append_message(message(12, "A brand new line about a unicorn."))
    assert index.sync()["docs"] == 13
    older.close()
    with open(older.path, "rb") as fh:
        data = fh.read()
    with open(older.path, "wb") as fh:
        fh.write(data.replace(b"unicorn.", b"pegasus."))
    index.archive = MessageArchive(older.path)
    assert ids(index.search("pegasus", 3)) == ["m12"]
    assert index.search("unicorn", 3) == []
    index.close()


def test_a_corrupt_index_file_is_rebuilt(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    expected = ids(index.search("silver ring well", 3))
    index.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(index.path + suffix):
            os.remove(index.path + suffix)
    with open(index.path, "wb") as fh:
        fh.write(b"this is not a database" * 100)
    again = FullTextIndex(index_path(archive.path), archive)
    assert ids(again.search("silver ring well", 3)) == expected
    again.close()


def test_an_index_of_another_schema_version_is_rebuilt(workdir, monkeypatch):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    index.sync()
    index.close()
    monkeypatch.setattr(fulltext, "SCHEMA_VERSION", fulltext.SCHEMA_VERSION + 1)
    monkeypatch.setitem(fulltext._FRESH, "version", fulltext.SCHEMA_VERSION)
    spy = TailSpy(archive)
    again = FullTextIndex(index_path(archive.path), archive)
    assert again.sync()["docs"] == len(LINES)
    assert spy.calls[-1]["offset"] == 0
    again.close()


# ------------------------------------------------------------------------------ player text is data


HOSTILE = [
    '"', '""', '"iron', "iron\"ingots", "*", "iron*", "* iron", "NEAR", "NEAR(iron ingots)",
    "NEAR(iron ingots, 2)", "iron AND", "AND", "OR OR", "NOT iron", "iron NOT", "(", ")",
    "(iron", "iron)", "((iron) OR (", "terms:iron", "msg:iron", "audience:x", "^iron", "-iron",
    "+iron", "{terms msg}: iron", "iron:", ":", "'", "';--", "Bob's", "ïron ïngots", "中文 铁",
    "🗡️ sword", "\x00iron", "iron\x1f#11", "\\", "%", "_", "a" * 5000, "iron " * 500,
    "the and of", "", "   ",
]


@pytest.mark.parametrize("query", HOSTILE)
def test_no_player_text_breaks_a_query(workdir, query):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    hits = index.search(query, 5)
    assert all(score > 0 for _doc, score in hits)
    scores = index.score_external(query, ["iron ingots near the well"])
    assert len(scores) == 1
    expression = match_expression(query)
    assert expression is None or all(part.startswith('"') and part.endswith('"')
                                     for part in expression.split(" OR "))
    index.close()


def test_fts_keywords_are_plain_words(workdir):
    archive = new_archive(workdir, ["They met near the old oak.", "Salt and pepper."])
    index = FullTextIndex(index_path(archive.path), archive)
    assert ids(index.search("NEAR", 2)) == ["m0"]
    assert ids(index.search("pepper AND", 2)) == ["m1"]
    index.close()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_a_valid_query(query):
    index = _shared_memory_index()
    for _doc, score in index.search(query, 3):
        assert score > 0


_memory_index = []


def _shared_memory_index():
    if not _memory_index:
        index = FullTextIndex(":memory:")
        index.add([message(i, text) for i, text in enumerate(LINES)])
        _memory_index.append(index)
    return _memory_index[0]


# ------------------------------------------------------------------------------ filters


def test_only_what_every_listener_heard(workdir):
    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    archive.append_message(message(0, "I hid the silver key under the mill stone.", audience=[A]))
    archive.append_message(message(1, "The silver key fair is at the mill.", audience=[A, B]))
    archive.append_message(message(2, "Silver prices at the mill went up.", audience=None))
    archive.append_message(message(3, "Nobody heard this silver mill line.", audience=[]))
    index = FullTextIndex(index_path(archive.path), archive)
    query = "silver key mill"
    assert set(ids(index.search(query, 10))) == {"m0", "m1", "m2", "m3"}
    assert set(ids(index.search(query, 10, listeners=[A]))) == {"m0", "m1", "m2"}
    assert set(ids(index.search(query, 10, listeners=[B]))) == {"m1", "m2"}
    assert set(ids(index.search(query, 10, listeners=[A, B]))) == {"m1", "m2"}
    assert set(ids(index.search(query, 10, listeners=[A, C]))) == {"m2"}
    # a dbref that is a prefix of another one is not a match
    assert set(ids(index.search(query, 10, listeners=["#1"]))) == {"m2"}
    index.close()


def test_neighbours_are_the_lines_around_a_hit_that_every_listener_heard(workdir):
    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    archive.append_message(message(0, "Where did you go last summer?", audience=[A, B]))
    archive.append("evict", ids=[], reason="a record that is not a message")
    archive.append_message(message(2, "To the lake, with Mel.", audience=[A, B]))
    archive.append_message(message(3, "My debts are my own business.", audience=[A]))
    index = FullTextIndex(index_path(archive.path), archive)
    (hit, _score), = index.search("lake Mel", 5)
    assert hit["id"] == "m2"
    around = index.neighbours([hit["seq"]])[hit["seq"]]
    assert [d["id"] for d in around] == ["m0", "m3"]  # the evict record is skipped
    assert [d["id"] for d in index.neighbours([hit["seq"]], listeners=[B])[hit["seq"]]] == ["m0"]
    in_context = ArchiveSearch(index, {"m0": "Where did you go last summer?"})
    assert [d["id"] for d in in_context.neighbours([hit["seq"]])[hit["seq"]]] == ["m3"]
    index.close()


def test_filtered_rows_do_not_starve_the_result(workdir):
    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    for i in range(200):  # the best matches are all private to A
        archive.append_message(message(i, "gold gold gold coins", audience=[A]))
    archive.append_message(message(200, "a long line that mentions gold once among many other "
                                        "words about the weather and the road", audience=[B]))
    index = FullTextIndex(index_path(archive.path), archive)
    assert ids(index.search("gold", 3, listeners=[B])) == ["m200"]
    source = ArchiveSearch(index, {f"m{i}": "gold gold gold coins" for i in range(150)})
    hits = source.search("gold", 60)
    assert len(hits) == 51 and "m0" not in ids(hits) and "m199" in ids(hits)
    index.close()


def test_a_listener_who_heard_few_matching_lines_reads_a_bounded_number(workdir, monkeypatch):
    # 300 lines about gold that only A heard rank before the one B heard: B's search reads at
    # most MAX_K rows, so with a cap below 300 it finds nothing, with one above it finds the line
    lines = [f"Gold, gold and more gold for ore {i}." for i in range(300)]
    archive = new_archive(workdir, lines=lines, audience=[A])
    archive.append_message(message(301, "Some say the old mine may still hold a little gold "
                                        "under the flooded lower tunnels.", audience=[A, B]))
    index = FullTextIndex(index_path(archive.path), archive)
    monkeypatch.setattr(fulltext, "MAX_K", 100)
    assert index.search("gold", 5, listeners=[B]) == []
    assert len(index.search("gold", 5, listeners=[A])) == 5
    monkeypatch.setattr(fulltext, "MAX_K", 1000)
    assert ids(index.search("gold", 5, listeners=[B])) == ["m301"]


def test_messages_verbatim_in_context_are_left_out(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    query = "Elena Riverwood"
    assert set(ids(index.search(query, 5))) >= {"m2", "m10", "m24"}
    in_context = {"m2": LINES[2], "m10": "[masked: a letter about the festival]"}
    hits = ArchiveSearch(index, in_context).search(query, 5)
    assert "m2" not in ids(hits)
    assert "m10" in ids(hits)  # masked in context: its words are only in the archive
    assert "m24" in ids(hits)
    index.close()


# ------------------------------------------------------------------------------ ranking quality


def _rank_bm25_top(texts, query, n):
    """The former ranking: rank-bm25's Okapi (k1 = 1.5, b = 0.75) with Lucene's IDF, over the
    words the index matches (:func:`ai_contrib.memory.lexical.terms`)."""
    import math

    from rank_bm25 import BM25Okapi

    class Lucene(BM25Okapi):
        def _calc_idf(self, nd):
            for word, freq in nd.items():
                self.idf[word] = math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

    bm25 = Lucene([terms(text) for text in texts])
    scores = bm25.get_scores(terms(query))
    ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
    return ranked[:n]


QUERIES = [
    "Where does Elena live?", "How much is the sword?", "Who owes the tavern money?",
    "When does the ferry leave?", "What happened at the Greyhill mine?", "Tell me about wolves",
    "Where is the cellar key?", "Who sells honey?", "What is wrong with the well?",
    "Did Tom lose something?",
]


def test_ranking_agrees_with_the_former_bm25(workdir):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    texts = [doc_text(message(i, text)) for i, text in enumerate(LINES)]
    overlap = []
    for query in QUERIES:
        ours = [int(doc_id[1:]) for doc_id in ids(index.search(query, 5))]
        theirs = _rank_bm25_top(texts, query, 5)
        assert ours[0] == theirs[0], (query, ours, theirs)
        overlap.append(len(set(ours) & set(theirs)) / len(set(ours) | set(theirs)))
    # on the LoCoMo conversations the two top 20s agree less (other k1 and IDF; see
    # benchmarks/retrieval_recall.py); on short lines like these they agree
    assert sum(overlap) / len(overlap) >= 0.9, overlap
    index.close()


# ------------------------------------------------------------------------------ on an NPC


class NPCArchiveSearch(NPCTestCase):
    """The archive of a real NPC, searched as a reply would, after evictions and masking."""

    def test_an_npc_searches_what_left_its_context(self):
        from ai_contrib.npc.recall import archived_out_of_context

        secret = self.script.add_message(
            "user", "Remember: the cellar key is under the blue barrel.", name="Bob")
        self.fill(6)
        source = archived_out_of_context(self.script)
        # built in the reactor thread: nothing opened, nothing read yet
        self.assertIsNone(source.index._conn)
        self.assertEqual(source.search("cellar key barrel", 5), [])  # still in context

        self.script.runtime.evict([secret["id"]], reason="test")
        source = archived_out_of_context(self.script)
        hits = source.search("cellar key barrel", 5)
        self.assertEqual([doc["id"] for doc, _ in hits], [secret["id"]])
        context = build_memory_context([], source, "Where is the cellar key?")
        self.assertIn('Bob: "Remember: the cellar key is under the blue barrel."',
                      context.memories_text)

        # later lines reach the index at the next search, without a rebuild
        spy = TailSpy(self.script.archive)
        offset = source.index.stats()["offset"]
        later = self.script.add_message("user", "The ferry to Eastport leaves at dawn.",
                                        name="Bob")
        self.script.runtime.evict([later["id"]], reason="test")
        hits = archived_out_of_context(self.script).search("ferry Eastport", 5)
        self.assertEqual([doc["id"] for doc, _ in hits], [later["id"]])
        self.assertEqual(spy.calls, [{"offset": offset, "lines": 2}])
        self.assertTrue(os.path.exists(index_path(self.script.archive_path())))

    def test_lines_heard_after_the_snapshot_are_not_recalled_as_archived(self):
        from ai_contrib.npc.recall import archived_out_of_context

        gone = self.script.add_message("user", "The ferry to Eastport left at noon yesterday.",
                                       name="Bob")
        self.fill(4)
        self.script.runtime.evict([gone["id"]], reason="test")
        # the reply's snapshot is taken; a line is heard while its search waits for the
        # memory thread: it is in the context the prompt is built from, not a memory
        source = archived_out_of_context(self.script)
        heard = self.script.add_message("user", "The ferry to Eastport leaves at dawn today.",
                                        name="Carol")
        hits = [doc["id"] for doc, _ in source.search("ferry Eastport", 5)]
        self.assertEqual(hits, [gone["id"]])  # the control: what left the context is found
        context = build_memory_context([], source, "When does the ferry to Eastport leave?")
        self.assertNotIn("leaves at dawn", context.text)
        self.assertIn("left at noon", context.text)
        # once it has left the context too, the next reply's snapshot finds it
        self.script.runtime.evict([heard["id"]], reason="test")
        hits = [doc["id"] for doc, _ in archived_out_of_context(self.script).search(
            "ferry Eastport", 5)]
        self.assertEqual(sorted(hits), sorted([gone["id"], heard["id"]]))

    def test_listeners_filter_the_npc_archive(self):
        from ai_contrib.npc.recall import archived_out_of_context

        bob, carol = self.char1.dbref, self.char2.dbref
        private = self.script.add_message(
            "user", "My vault code is 7341, tell nobody.", name="Bob",
            metadata={"speaker": bob, "audience": [bob]})
        shared = self.script.add_message(
            "user", "The vault of the guild opens at noon.", name="Bob",
            metadata={"speaker": bob, "audience": sorted([bob, carol])})
        self.script.runtime.evict([private["id"], shared["id"]], reason="test")
        source = archived_out_of_context(self.script)
        for_carol = build_memory_context([], source, "vault code", listeners=[carol])
        self.assertNotIn("7341", for_carol.text)
        self.assertIn("opens at noon", for_carol.text)
        for_bob = build_memory_context([], source, "vault code", listeners=[bob])
        self.assertIn("7341", for_bob.text)


def test_common_words_left_out_of_a_large_match_still_score(workdir, monkeypatch):
    archive = new_archive(workdir)
    index = FullTextIndex(index_path(archive.path), archive)
    query = "Tom lost the silver ring near the well"
    exact_3, exact_10 = index.search(query, 3), index.search(query, 10)
    assert len(exact_10) == 7
    # every word but the rarest ("ring") is left out of the MATCH...
    monkeypatch.setattr(fulltext, "MAX_POSTINGS", 1)
    spy = []
    ranked = FullTextIndex._ranked
    monkeypatch.setattr(FullTextIndex, "_ranked", staticmethod(
        lambda conn, tokens, *rest: spy.append(tokens) or ranked(conn, tokens, *rest)))
    pruned = index.search(query, 1)
    assert spy == [["ring"]]
    # ...and the doc found is scored with all of them
    assert ids(pruned) == ids(exact_3[:1]) == ["m3"]
    assert abs(pruned[0][1] - exact_3[0][1]) < 1e-9
    assert abs(pruned[0][1] - index.score_external(query, [doc_text(pruned[0][0])])[0]) < 1e-9
    # the rare words find fewer docs than asked for: the whole query is run
    spy.clear()
    assert index.search(query, 10) == exact_10
    assert spy == [["ring"], ["tom", "lost", "silver", "ring", "near", "well"]]
    index.close()
