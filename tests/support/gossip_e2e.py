"""
What the end-to-end tests of NPCs that journal and gossip share: whose prompt a request of the
LLM double is, the archive seq an extraction request shows for a line (the number a fact cites
as its source), and an admin's sleep of an NPC that waits until its journal holds given facts,
consolidated into Mem0 (``docs/design.md``, "Gossip", "Journal and Mem0").
"""

import asyncio
import re
import time

from tests.support.e2e_util import ask, rows_with


def npc_of(body):
    """The NPC a request is for: the first word after "You are" in its messages."""
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    match = re.search(r"You are (\w+)", text)
    return match.group(1) if match else None


def cited(body, words):
    """The archive seq the extraction request shows for the first line holding ``words``
    (``"[12] Wren: ..."``), None when it shows none."""
    for message in body.get("messages") or []:
        match = re.match(r"\[(\d+)\] ", str(message.get("content") or ""))
        if match and words in str(message.get("content")):
            return int(match.group(1))
    return None


async def sleep_until_journaled(admin, npc, until_rows, deadline):
    """
    Put ``npc`` to sleep (``aisleep``), then poll ``aihistory <npc>/journal`` (once a second)
    until every word of ``until_rows`` has a row consolidated into Mem0, or the monotonic
    ``deadline`` passes; wake it (``aiwake``).

    Returns:
        str: the last journal listing.
    """
    await ask(admin, f"aisleep {npc}", rf"{npc} (falls asleep|is already asleep|dozes off)")
    journal = ""
    while time.monotonic() < deadline:
        journal = await ask(admin, f"aihistory {npc}/journal",
                            rf"Journal of {npc}|journal is empty")
        rows = [rows_with(journal, word) for word in until_rows]
        if all(found and found[0][4] == "yes" for found in rows):
            break
        await asyncio.sleep(1.0)
    await ask(admin, f"aiwake {npc}", rf"{npc} (wakes up|is already awake)")
    return journal
