"""Token counting: encodings by model, offline tiktoken cache seeding, heuristic tier, ledger."""

import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from ai_contrib.core import tokens
from ai_contrib.core.tokens import (
    PER_MESSAGE_OVERHEAD,
    TokenLedger,
    active_tier,
    count_conversation_tokens,
    count_message_tokens,
    count_tokens,
    encoding_name_for,
    seed_tiktoken_cache,
    truncate_to_tokens,
)
from tests.support.paths import ROOT

URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def _tiktoken_expected_hashes():
    """The SHA-256 values tiktoken itself checks, read from its source (not from our module)."""
    import tiktoken_ext.openai_public as public

    source = Path(public.__file__).read_text()
    found = {}
    for name in ("o200k_base", "cl100k_base"):
        match = re.search(rf"{name}\.tiktoken\",\s*expected_hash=\"([0-9a-f]{{64}})\"", source)
        found[name] = match.group(1)
    return found


@pytest.mark.parametrize(
    "model, expected",
    [
        (None, "o200k_base"),
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-2024-08-06:acme::x", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("GPT-4-0613", "cl100k_base"),
        ("smollm2-135m-instruct", "o200k_base"),
        ("llama3.1:8b", "o200k_base"),
        ("olmo-2", "o200k_base"),
    ],
)
def test_encoding_name_for_models(model, expected):
    assert encoding_name_for(model) == expected


def test_counts_match_tiktoken_for_the_models_encoding():
    text = "Der Schmied von Dunmore schuldet mir 3 Silberstücke, sagte Mara. 鍛冶屋"
    # tiktoken.get_encoding alone would download: the cache is seeded on first count.
    assert count_tokens("hello world", "gpt-4o") == 2 and count_tokens("hello world", "gpt-4") == 2
    o200k = tiktoken.get_encoding("o200k_base").encode_ordinary(text)
    cl100k = tiktoken.get_encoding("cl100k_base").encode_ordinary(text)
    assert len(o200k) != len(cl100k)  # the text tells the encodings apart
    assert count_tokens(text, "gpt-4o") == len(o200k)
    assert count_tokens(text) == len(o200k)
    assert count_tokens(text, "gpt-4") == len(cl100k)
    assert active_tier() == "tiktoken"
    assert active_tier("gpt-3.5-turbo") == "tiktoken"


def test_special_token_text_is_counted_not_rejected():
    assert count_tokens("hi <|endoftext|> there") > 3
    assert count_tokens("<|endoftext|>", "gpt-4") > 1


def test_empty_text_is_zero_tokens():
    assert count_tokens("") == 0
    assert count_tokens(None) == 0


def test_bundled_files_match_the_hash_tiktoken_expects(tmp_path):
    expected = _tiktoken_expected_hashes()
    assert tokens.ENCODING_SHA256 == expected
    paths = seed_tiktoken_cache(str(tmp_path))
    for name, path in paths.items():
        assert Path(path).name == hashlib.sha1(URL.format(name).encode()).hexdigest()
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == expected[name]


def test_prepare_offline_tiktoken_uses_the_user_cache_and_sets_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache_dir = tokens.prepare_offline_tiktoken()
    assert cache_dir == str(tmp_path / "ai_contrib" / "tiktoken")
    assert os.environ["TIKTOKEN_CACHE_DIR"] == cache_dir
    assert len(os.listdir(cache_dir)) == 2


def test_corrupt_cache_file_is_replaced(tmp_path):
    target = Path(seed_tiktoken_cache(str(tmp_path), names=["cl100k_base"])["cl100k_base"])
    target.write_bytes(b"not a bpe file")
    again = Path(seed_tiktoken_cache(str(tmp_path), names=["cl100k_base"])["cl100k_base"])
    digest = hashlib.sha256(again.read_bytes()).hexdigest()
    assert digest == tokens.ENCODING_SHA256["cl100k_base"]


def test_fresh_process_counts_offline_without_any_download(tmp_path):
    cache = tmp_path / "cache"
    script = textwrap.dedent("""
        import json, os, tiktoken.load
        def no_network(*args, **kwargs):
            raise SystemExit("download attempted: " + repr(args))
        tiktoken.load.read_file = no_network
        from ai_contrib.core.tokens import active_tier, count_tokens
        print(json.dumps({"tier": active_tier(), "n": count_tokens("hello brave new world"),
                          "dir": os.environ["TIKTOKEN_CACHE_DIR"]}))
        """)
    env = dict(os.environ, TIKTOKEN_CACHE_DIR=str(cache), HTTPS_PROXY="http://127.0.0.1:9")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"tier": "tiktoken", "n": 4, "dir": str(cache)}
    assert len(list(cache.iterdir())) == 1  # only the encoding that was needed


@pytest.fixture
def no_offline_copy(tmp_path, monkeypatch):
    """No bundled BPE file, an empty cache, tiktoken's registry empty and the network forbidden."""

    def no_network(*args, **kwargs):
        raise AssertionError(f"download attempted: {args!r}")

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokens, "_bundled_bpe_path", lambda name: None)
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    tokens.clear_encoding_cache()
    yield tmp_path
    tokens.clear_encoding_cache()


def test_heuristic_tier_when_no_offline_copy(no_offline_copy):
    assert active_tier() == "heuristic"
    assert count_tokens("abcdefghi") == 3  # ceil(9 / 4)
    assert count_tokens("<|endoftext|>") == 4
    assert truncate_to_tokens("abcdefghij", 2) == "abcdefgh"


def test_corrupt_cache_without_bundle_falls_back_instead_of_downloading(no_offline_copy):
    key = hashlib.sha1(URL.format("o200k_base").encode()).hexdigest()
    (no_offline_copy / key).write_bytes(b"garbage")
    assert active_tier("gpt-4o") == "heuristic"


def test_truncate_to_tokens_keeps_a_prefix_within_the_limit():
    text = "The innkeeper of the Prancing Pony remembers every traveller. " * 20
    cut = truncate_to_tokens(text, 17)
    assert text.startswith(cut) and count_tokens(cut) == 17
    assert truncate_to_tokens("short", 100) == "short"
    assert truncate_to_tokens("anything", 0) == ""


def test_message_tokens_add_overhead_name_and_tool_calls():
    bare = {"role": "user", "content": ""}
    assert count_message_tokens(bare) == PER_MESSAGE_OVERHEAD
    said = {"role": "user", "content": "Where is the blacksmith?", "name": "Mara"}
    # a player's line is charged its name as the prompt shows it: "Mara: Where is ..."
    assert count_message_tokens(said) == (
        PER_MESSAGE_OVERHEAD + count_tokens("Where is the blacksmith?") + count_tokens("Mara: ")
    )
    # the NPC's own line is shown as its text alone: its name is not sent
    reply = {"role": "assistant", "content": "By the well.", "name": "Wren"}
    assert count_message_tokens(reply) == PER_MESSAGE_OVERHEAD + count_tokens("By the well.")
    calls = [{"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]
    call_msg = {"role": "assistant", "content": "", "tool_calls": calls}
    assert count_message_tokens(call_msg) == PER_MESSAGE_OVERHEAD + count_tokens(
        json.dumps(calls, ensure_ascii=False)
    )
    result = {"role": "tool", "content": "a forge", "tool_call_id": "c1"}
    assert count_message_tokens(result) == (
        PER_MESSAGE_OVERHEAD + count_tokens("a forge") + count_tokens("c1")
    )
    history = [said, call_msg, result]
    assert count_conversation_tokens(history) == sum(map(count_message_tokens, history))


def test_a_players_line_costs_at_least_what_the_prompt_shows():
    # a busy room of short lines, said to the NPC or only overheard: the count that fills the
    # history budget is never below the tokens of the lines as the reply prompt renders them
    from ai_contrib.core.prompts import render_for_chat

    for addressed in (True, False):
        for text in ("ok", "ok 4", "Where is the blacksmith?", "Marta, the ale!"):
            msg = {"role": "user", "content": text, "name": "Char2",
                   "metadata": {"addressed": addressed}}
            shown = render_for_chat(msg)["content"]
            assert count_message_tokens(msg) >= PER_MESSAGE_OVERHEAD + count_tokens(shown), shown
    overheard = {"role": "user", "content": "ok", "name": "Char2",
                 "metadata": {"addressed": False}}
    assert render_for_chat(overheard)["content"] == "Char2 (overheard): ok"  # control


def _msg(i, text):
    return {"id": f"m{i}", "role": "user", "content": text}


def test_ledger_add_remove_replace():
    ledger = TokenLedger()
    a, b, c = _msg(1, "hello there"), _msg(2, "the bridge is out"), _msg(3, "")
    assert ledger.add(a) == count_message_tokens(a)
    ledger.add(b)
    ledger.add(c)
    assert ledger.total == count_conversation_tokens([a, b, c]) and len(ledger) == 3
    assert ledger.add(a) == count_message_tokens(a)  # same id twice counts once
    assert ledger.total == count_conversation_tokens([a, b, c])
    assert ledger.remove_ids(["m2", "unknown"]) == count_message_tokens(b)
    assert ledger.total == count_conversation_tokens([a, c]) and "m2" not in ledger
    assert ledger.replace([b]) == count_message_tokens(b) and len(ledger) == 1


def test_ledger_tokens_of_uses_the_cached_count():
    ledger = TokenLedger()
    msg = _msg(1, "short")
    cached = ledger.add(msg)
    msg["content"] = "much longer text than before, edited in place"
    assert ledger.tokens_of(msg) == cached  # cached by id: edits need replace()
    assert ledger.tokens_of(_msg(9, "not in the ledger")) == count_message_tokens(
        _msg(9, "not in the ledger")
    )
    ledger.replace([msg])
    assert ledger.total == count_message_tokens(msg)


def test_ledger_rejects_messages_without_id():
    with pytest.raises(ValueError):
        TokenLedger().add({"role": "user", "content": "hi"})


def test_bundled_source_really_is_gzip_of_the_cache_file(tmp_path):
    source = tokens._bundled_bpe_path("o200k_base")
    assert source and source.endswith(".gz")
    cached = seed_tiktoken_cache(str(tmp_path), names=["o200k_base"])["o200k_base"]
    with gzip.open(source, "rb") as handle:
        assert handle.read() == Path(cached).read_bytes()


def test_a_ledger_leaves_uncounted_messages_out_of_its_total():
    from ai_contrib.core.tokens import TokenLedger, count_message_tokens

    said = {"id": "a", "role": "user", "content": "Bob: the east room, please"}
    chatter = {"id": "b", "role": "tool", "content": "ok: noted in your journal.",
               "metadata": {"type": "pre_compaction"}}
    ledger = TokenLedger(uncounted=lambda m: (m.get("metadata") or {}).get("type") == "pre_compaction")
    ledger.add(said)
    ledger.add(chatter)
    assert ledger.total == count_message_tokens(said)  # the chatter is not in the total
    assert ledger.tokens_of(chatter) == count_message_tokens(chatter) > 0  # but is counted
    assert ledger.counted(chatter) == 0 and ledger.counted(said) == ledger.total
    assert ledger.remove_ids(["b"]) == 0 and ledger.total == count_message_tokens(said)
    assert ledger.remove_ids(["a"]) == count_message_tokens(said) and ledger.total == 0
    assert ledger.replace([said, chatter]) == count_message_tokens(said)
