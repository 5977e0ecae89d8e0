"""
Sleep-phase housekeeping of the journal and entity profiles (``docs/design.md``, "Journal and
Mem0", "Sleep phase": entity consolidation and episodic prune).

Pure functions over the plain dicts kept in ``character.db.journal`` (shape in
:mod:`ai_contrib.memory.journal`) and ``character.db.entity_profiles``
(``{entity_name: [observation, ...]}``); the caller saves them back.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


def _norm(text):
    return " ".join(str(text).split()).casefold()


def consolidate_entities(profiles, max_observations=20) -> tuple:
    """
    Merge entity profiles whose names differ only in case or spacing, drop repeated
    observations (same words, any case/spacing), and keep the newest ``max_observations`` per
    entity.

    Args:
        profiles (dict): ``{entity_name: [observation (str), ...]}``, oldest observation first.
        max_observations (int): per entity.

    Returns:
        tuple: ``(new_profiles, stats)`` where ``stats`` is ``{"entities_merged",
        "observations_removed"}``.
    """
    merged, names, before = {}, {}, 0
    for name, observations in (profiles or {}).items():
        key = _norm(name)
        names.setdefault(key, name)
        merged.setdefault(key, [])
        before += len(observations or [])
        merged[key].extend(observations or [])
    result, after = {}, 0
    for key, observations in merged.items():
        seen, kept = set(), []
        for obs in observations:
            if _norm(obs) not in seen:
                seen.add(_norm(obs))
                kept.append(obs)
        kept = kept[-max_observations:] if max_observations else kept
        after += len(kept)
        result[names[key]] = kept
    return result, {
        "entities_merged": len(profiles or {}) - len(result),
        "observations_removed": before - after,
    }


def prune_episodic(journal, max_importance=3, min_age_seconds=7 * 86400, now=None) -> list[str]:
    """
    Remove low-importance journal entries that Mem0 already holds (episodic prune).

    Only entries that are consolidated (listed in ``consolidated_entry_ids``), have importance
    ``<= max_importance`` and are older than ``min_age_seconds`` go; they stay retrievable from
    Mem0 and, as raw messages, from the archive. Compaction syntheses are never pruned.

    Returns:
        list[str]: the ids removed (``journal`` is modified in place).
    """
    now = now or datetime.now(timezone.utc)
    cutoff = now - timedelta(seconds=min_age_seconds)
    done = set(journal.get("consolidated_entry_ids", []))
    keep, removed = [], []
    for entry in journal.get("entries", []):
        try:
            when = datetime.fromisoformat(entry.get("timestamp") or "")
        except ValueError:
            when = now
        if (
            entry.get("id") in done
            and entry.get("source_type") != "compaction"
            and int(entry.get("importance", 5)) <= max_importance
            and when < cutoff
        ):
            removed.append(entry["id"])
        else:
            keep.append(entry)
    journal["entries"] = keep
    gone = set(removed)
    journal["consolidated_entry_ids"] = [
        i for i in journal.get("consolidated_entry_ids", []) if i not in gone
    ]
    return removed
