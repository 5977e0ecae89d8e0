"""
The Sleeping Stag: a tavern north of Limbo where Marta, the innkeeper, works, and the town gate
east of Limbo, where Bram of the watch stands guard.

Marta is a ``typeclasses.innkeeper.Innkeeper``, an ``ai_contrib.typeclasses.AssistantCharacter``
whose actions obey the inn's rule (no east room key without payment): an NPC whose replies
come from an LLM and whose conversation history is kept within a token budget by compaction. Her ``db.persona`` is the
character sheet the contrib puts at the head of every prompt. Bram is one too; his Tag ``watch``
(category ``faction``) is what lets him, and never Marta, know the watch's orders in
``world/lore.py``.

:func:`build_tavern` is called once by ``server/conf/at_initial_setup.py`` on the game's first
start. It finds what exists by tag, so it is safe to call again by hand (``py from world.tavern
import build_tavern; build_tavern()``) after deleting something.
"""

from django.conf import settings

TAG_CATEGORY = "ai_tavern"
NPC_KEY = "Marta"

TAVERN_DESC = (
    "A low-beamed common room that smells of woodsmoke, bread and spilled ale. A fire crackles "
    "in a wide stone hearth; scarred oak tables stand between the pillars, and behind the long "
    "counter Marta keeps an eye on every guest. A door leads back |wout|n."
)

LIMBO_DESC = (
    "A muddy crossroads under a wide grey sky. Warm light and the murmur of voices spill from "
    "the door of |wThe Sleeping Stag|n, a tavern just |wnorth|n of here (type |wtavern|n). Its "
    "innkeeper, Marta, listens to anyone: |wtalk Marta = Hello!|n, or just |wsay|n something "
    "once you are inside. The town gate, where the watch stands, is |weast|n (type |wgate|n)."
)

GATE_DESC = (
    "A squat stone gatehouse where the crossroads road enters the town. Iron-bound doors stand "
    "open by day; a brazier smokes beside the arch, and a watchman leans on his halberd under a "
    "board of posted orders. The town gate is |weast|n; the crossroads lie back |wwest|n."
)

BRAM_KEY = "Bram"

BRAM_DESC = (
    "A lanky watchman in a dented kettle hat and a green tabard of the town watch, halberd in "
    "hand, eyeing every traveller who comes up the road."
)

TOWN_DESC = ("A narrow street of shuttered shops inside the town walls; the gate and its "
             "watch are back |wwest|n.")

BRAM_PERSONA = (
    "You are Bram, a watchman of the town guard at the crossroads gate. You are dutiful, dry and "
    "suspicious of strangers, but fair. You keep the captain's orders and tell travellers what "
    "they must know to pass. You answer in one to three short sentences, in character, and you "
    "never say you are an AI."
)

MARTA_DESC = (
    "A broad-shouldered woman in her fifties with flour on her sleeves, grey-streaked hair tied "
    "back with a leather cord, and sharp, friendly eyes that miss nothing."
)

# Short and concrete: small local models follow a few plain sentences better than a long sheet.
EAST_DESC = ("A snug room up the stairs with its own hearth and a wide bed. The door locks; "
             "Marta keeps the key until a guest has paid.")

MARTA_PERSONA = (
    "You are Marta, the innkeeper of The Sleeping Stag, a busy tavern at a crossroads. "
    "You are warm, practical and a little nosy. You listen closely to your guests, remember what "
    "they tell you about their lives (names, family, work, plans, dates) and ask about it later. "
    "You answer in one to three short sentences, in character, and you never say you are an AI."
)


def _tagged(tag):
    """Return the first object tagged ``tag`` in :data:`TAG_CATEGORY`, or None."""
    from evennia.utils.search import search_tag

    found = search_tag(tag, category=TAG_CATEGORY)
    return found[0] if found else None


def _exit(tag, key, aliases, location, destination):
    """
    Create the exit tagged ``tag`` unless it exists.

    Returns:
        bool: True when it was created now.
    """
    from evennia.utils import create

    if _tagged(tag) is not None:
        return False
    create.create_object(settings.BASE_EXIT_TYPECLASS, key=key, aliases=aliases,
                         location=location, destination=destination,
                         tags=[(tag, TAG_CATEGORY)])
    return True


def build_tavern():
    """
    Create the tavern room, its exits to and from Limbo and Marta, where missing.

    Returns:
        dict: ``{"tavern": room, "marta": npc, "east": room, "gate": room, "bram": npc}`` (the
        existing objects where already built).

    Raises:
        ImportError: if ``ai_contrib.typeclasses`` (under ``typeclasses.innkeeper``) cannot be
            imported. The import happens here and
            not at module level on purpose: Evennia silently skips an initial-setup hook module
            that fails to import, and a game without its NPC should fail loudly instead.
    """
    from evennia.utils import create, logger
    from evennia.utils.search import search_object
    from typeclasses.innkeeper import Innkeeper

    limbo = search_object(settings.DEFAULT_HOME)[0]

    tavern = _tagged("tavern")
    if tavern is None:
        tavern = create.create_object(
            settings.BASE_ROOM_TYPECLASS,
            key="The Sleeping Stag",
            tags=[("tavern", TAG_CATEGORY)],
            attributes=[("desc", TAVERN_DESC)],
        )
        logger.log_info(f"AI tavern: created room {tavern.key} ({tavern.dbref}).")
    # the zone of world/lore.py's rumours (condition zone:crossroads); a game built before it
    # gets it by running build_tavern() again
    tavern.tags.add("crossroads", category="zone")

    if _exit("tavern_entrance", "tavern", ["north", "n", "sleeping stag"], limbo, tavern):
        limbo.db.desc = LIMBO_DESC
    _exit("tavern_exit", "out", ["south", "s", "leave"], tavern, limbo)

    marta = _tagged("innkeeper")
    if marta is None:
        marta = create.create_object(
            Innkeeper,
            key=NPC_KEY,
            location=tavern,
            home=tavern,
            tags=[("innkeeper", TAG_CATEGORY)],
            attributes=[("desc", MARTA_DESC)],
        )
        # db.persona is read on every reply, so it is set after creation like any later edit
        marta.db.persona = MARTA_PERSONA
        logger.log_info(f"AI tavern: created NPC {marta.key} ({marta.dbref}) in {tavern.key}.")
    east = _build_east_room(tavern, marta)
    # after Marta, so that she stays the game's first NPC (#<n> order: tools and tests rely on it)
    gate = _build_gate(limbo)
    return {"tavern": tavern, "marta": marta, "east": east, "gate": gate["gate"],
            "bram": gate["bram"]}


def _build_east_room(tavern, marta):
    """
    The east room up the stairs, its door (passable only holding the east room key, or for
    Marta herself) and the key in Marta's hands, where missing: the rent of
    ``typeclasses/innkeeper.py``, which gives the key only to a guest who paid, once Marta has
    actions (``aiactions Marta = give, lead, look``: she shows the guest up and comes back).

    Returns:
        Object: the room.
    """
    from evennia.utils import create, logger
    from typeclasses.innkeeper import EAST_DOOR_LOCK, KEY_NAME

    east = _tagged("east_room")
    if east is None:
        east = create.create_object(
            settings.BASE_ROOM_TYPECLASS, key="The East Room",
            tags=[("east_room", TAG_CATEGORY)], attributes=[("desc", EAST_DESC)])
        logger.log_info(f"AI tavern: created room {east.key} ({east.dbref}).")
    if _exit("east_door", "east", ["e", "stairs"], tavern, east):
        door = _tagged("east_door")
        door.locks.add(EAST_DOOR_LOCK)
        door.db.err_traverse = "The east room's door is locked; Marta has the key."
    _exit("east_room_exit", "down", ["west", "w", "out"], east, tavern)
    if _tagged("east_key") is None:
        create.create_object(settings.BASE_OBJECT_TYPECLASS, key=KEY_NAME, location=marta,
                             home=tavern, tags=[("east_key", TAG_CATEGORY)],
                             attributes=[("desc", "A heavy iron key on a red ribbon.")])
    return east


def _build_gate(limbo):
    """
    The gate room east of Limbo, its exits and Bram of the watch, where missing: the guard of
    ``world/lore.py``'s worked example (the curfew is lore only the ``watch`` faction knows).

    Returns:
        dict: ``{"gate": room, "bram": npc}``.
    """
    from evennia.utils import create, logger
    from typeclasses.gatekeeper import Gatekeeper

    gate = _tagged("gate")
    if gate is None:
        gate = create.create_object(
            settings.BASE_ROOM_TYPECLASS,
            key="The North Gate",
            tags=[("gate", TAG_CATEGORY)],
            attributes=[("desc", GATE_DESC)],
        )
        logger.log_info(f"AI tavern: created room {gate.key} ({gate.dbref}).")
    gate.tags.add("crossroads", category="zone")
    _exit("gate_entrance", "gate", ["east", "e"], limbo, gate)
    _exit("gate_exit", "crossroads", ["west", "w"], gate, limbo)
    bram = _tagged("guard")
    if bram is None:
        bram = create.create_object(
            Gatekeeper,
            key=BRAM_KEY,
            location=gate,
            home=gate,
            tags=[("guard", TAG_CATEGORY), ("watch", "faction")],
            attributes=[("desc", BRAM_DESC)],
        )
        bram.db.persona = BRAM_PERSONA
        logger.log_info(f"AI tavern: created NPC {bram.key} ({bram.dbref}) in {gate.key}.")
    _build_town(gate)
    return {"gate": gate, "bram": bram}


def _build_town(gate):
    """
    The town inside the walls and the barred gate to it, where missing: a real locked exit
    (``traverse:false()``) that only the watch may unlock (``commands/gate.py``), which Bram does
    for the watchword only at night (``typeclasses/gatekeeper.py``).

    Returns:
        Object: the town's room.
    """
    from evennia.utils import create, logger

    town = _tagged("town")
    if town is None:
        town = create.create_object(settings.BASE_ROOM_TYPECLASS, key="Market Street",
                                    tags=[("town", TAG_CATEGORY)],
                                    attributes=[("desc", TOWN_DESC)])
        logger.log_info(f"AI tavern: created room {town.key} ({town.dbref}).")
    if _exit("town_gate", "town gate", ["through", "east", "e"], gate, town):
        barred = _tagged("town_gate")
        barred.locks.add("traverse:false();unlock:tag(watch, faction)")
        barred.db.err_traverse = "The town gate is barred; the watch opens it."
    _exit("town_gate_back", "gate", ["west", "w", "out"], town, gate)
    return town
