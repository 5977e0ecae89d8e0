from datetime import datetime, timedelta, timezone

from ai_contrib.memory.housekeeping import consolidate_entities, prune_episodic
from ai_contrib.memory.journal import add_entry, new_journal


def test_entities_merge_by_name_and_drop_repeats():
    profiles = {"Bob": ["likes ale", "Likes  ale"], "bob ": ["owes 2 silver"], "Alice": ["a", "b", "c"]}
    result, stats = consolidate_entities(profiles, max_observations=2)
    assert result == {"Bob": ["likes ale", "owes 2 silver"], "Alice": ["b", "c"]}
    assert stats == {"entities_merged": 1, "observations_removed": 2}


def test_prune_removes_only_old_consolidated_low_importance_facts():
    now = datetime(2026, 11, 21, tzinfo=timezone.utc)
    old = now - timedelta(days=30)
    journal = new_journal()
    trivial = add_entry(journal, "Bob said hi", importance=2, now=old)
    vital = add_entry(journal, "Bob owes 2 silver", importance=8, now=old, entry_id="f2")
    fresh = add_entry(journal, "Bob waved", importance=2, now=now, entry_id="f3")
    unsynced = add_entry(journal, "Bob sneezed", importance=1, now=old, entry_id="f4")
    synth = add_entry(journal, "summary", importance=1, source_type="compaction", now=old)
    journal["consolidated_entry_ids"] = [trivial["id"], vital["id"], fresh["id"], synth["id"]]
    removed = prune_episodic(journal, now=now)
    assert removed == [trivial["id"]]
    assert [e["id"] for e in journal["entries"]] == [vital["id"], fresh["id"], unsynced["id"], synth["id"]]
    assert trivial["id"] not in journal["consolidated_entry_ids"]
