"""
What the people of the crossroads know: lore entries for the AI NPCs (``ai_contrib.lore``;
the contrib's ``docs/design.md``, "Lore and pins").

``server/conf/settings.py`` lists this module in ``AI_LORE_MODULES``, so the game copies
``LORE`` into its lore store on every start: edit an entry here and reload, and every NPC
allowed to know it knows the new text. Staff add more in the game with ``ailore/add`` (those
are kept across starts) and try entries out with ``ailore/test Marta = how much is a room?``.

Each entry: ``id`` (a name, unique among the modules), ``text`` (a sentence or two, what the NPC
knows), ``keys`` (words or phrases that bring it up, matched as whole words in any case) or
``"constant": True`` (always given), ``condition`` (who knows it; any one clause is enough) and
``priority`` (higher first when the lore budget, ``AI_LORE_TOKEN_BUDGET`` tokens, runs short).

Conditions used here:

- ``location:The Sleeping Stag``: whoever stands in the tavern room (Marta, or a barmaid added
  later) knows its prices;
- ``zone:crossroads``: NPCs whose room carries the Tag ``crossroads`` of category ``zone``
  (``world.tavern.build_tavern`` tags the tavern so) hear the town's rumours;
- ``faction:watch``: only NPCs with the Tag ``watch`` of category ``faction``
  (Bram at the gate, ``world.tavern``, has it) know the watch's orders. Marta has no such
  Tag, so she is never given them, whatever a player says.
"""

LORE = [
    {
        "id": "stag-rooms",
        "text": "A bed at the Sleeping Stag costs 5 silver a night, breakfast included; the "
                "east room, with its own hearth, costs 8.",
        "keys": ["room", "rooms", "bed", "beds", "stay the night", "lodging"],
        "condition": ["location:The Sleeping Stag"],
        "priority": 5,
    },
    {
        "id": "stag-drinks",
        "text": "A mug of ale is 2 copper, a cup of cider 3, and the good Hollin red 1 silver "
                "a bottle.",
        "keys": ["ale", "beer", "cider", "wine", "drink", "drinks", "price", "prices"],
        "condition": ["location:The Sleeping Stag"],
        "priority": 5,
    },
    {
        "id": "stag-food",
        "text": "Today's stew is mutton and barley, 4 copper a bowl with bread.",
        "keys": ["stew", "food", "eat", "hungry", "supper", "dinner"],
        "condition": ["location:The Sleeping Stag"],
        "priority": 3,
    },
    {
        "id": "rumour-bridge",
        "text": "Folk say the bridge at Hollin ford washed out in the last storm, and carters "
                "now go the long way round by the mill.",
        "keys": ["bridge", "hollin", "road", "roads", "news", "rumour", "rumours", "rumor"],
        "condition": ["zone:crossroads"],
        "priority": 1,
    },
    {
        "id": "rumour-lights",
        "text": "Shepherds claim to have seen lights moving on the old barrow hill at night; "
                "most think it is poachers.",
        "keys": ["barrow", "lights", "hill", "news", "rumour", "rumours", "rumor", "strange"],
        "condition": ["zone:crossroads"],
        "priority": 0,
    },
    {
        "id": "watch-curfew",
        "text": "By order of the captain, the town gate closes at the tenth bell and nobody "
                "without a writ passes until dawn; the watchword this week is 'juniper'.",
        "keys": ["curfew", "gate", "watchword", "password", "night", "tenth bell"],
        "condition": ["faction:watch"],
        "priority": 8,
    },
]
