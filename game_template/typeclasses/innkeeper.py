"""
The innkeeper: Marta, an AI NPC whose actions the game disposes of (``ai_contrib`` docs,
"Actions").

Marta may be given actions (``aiactions Marta = give, look``); the model then asks for them, and
:meth:`Innkeeper.at_ai_action` applies the inn's rule before any runs: the east room's key is
given only to a guest who has paid :data:`ROOM_PRICE` silver. A guest pays by giving her coins
(objects with a ``silver`` Attribute: ``give purse to Marta``); :meth:`at_object_receive` counts
them. A refusal's reason is what the model is told, so she can say why.

She also shows a guest up (``lead Wren = east``, ``commands/lead.py``), only a guest who asked in
the turn, and walks back to her counter (her ``home``) by the exits' own commands
:data:`BACK_AFTER` seconds after she left it.
"""

from ai_contrib.typeclasses import AssistantCharacter

#: silver a night in the east room (world/lore.py tells her the same)
ROOM_PRICE = 8
#: the key's name (world/tavern.py creates it in Marta's hands; the east door's lock asks for it)
KEY_NAME = "east room key"
#: the east door's lock (world/tavern.py): the key's holder, or the innkeeper herself
EAST_DOOR_LOCK = f"traverse:holds({KEY_NAME}) or tag(innkeeper, ai_tavern)"
#: seconds after leaving her counter before she walks back (``db.back_after`` overrides it)
BACK_AFTER = 20


def _target(args):
    """The receiver of a ``give`` line: after ``=`` or `` to ``; ``""`` when it names none."""
    for mark in ("=", " to "):
        if mark in args:
            return args.split(mark, 1)[1].strip()
    return ""


class Innkeeper(AssistantCharacter):
    """
    An innkeeper who rents rooms: ``db.paid`` is ``{dbref: silver}`` received from each guest
    and not yet spent on a room.
    """

    def at_object_receive(self, moved_obj, source_location, move_type="move", **kwargs):
        """A guest's coins (an object with ``db.silver``) count as payment from the giver."""
        super().at_object_receive(moved_obj, source_location, move_type=move_type, **kwargs)
        silver = moved_obj.db.silver
        if move_type == "give" and source_location is not None and silver:
            paid = dict(self.db.paid or {})
            paid[source_location.dbref] = paid.get(source_location.dbref, 0) + int(silver)
            self.db.paid = paid

    def at_ai_action(self, action, args, context):
        """
        No key without payment: ``give <key> to <guest>`` runs only when the guest has paid
        :data:`ROOM_PRICE` silver (which the key uses up as it leaves her,
        :meth:`at_object_leave`); the refusal says what is owed.
        ``lead <guest> = <exit>`` runs only for a guest who spoke in the turn (nobody is walked
        off who did not ask). Every other action runs as the model asked.
        """
        if action == "lead":
            return self._may_lead(args.split("=")[0].strip(), context)
        if action != "give" or "key" not in args.lower().split("=")[0].split(" to ")[0]:
            return None
        name = _target(args)
        found = self.search(name, quiet=True) if name else []
        guest = found[0] if found else None
        if guest is None:
            return f"there is nobody called '{name}' here to give the key to"
        paid = dict(self.db.paid or {})
        owed = ROOM_PRICE - paid.get(guest.dbref, 0)
        if owed > 0:
            return (f"{guest.key} has not paid for the east room: {owed} more silver first "
                    "(a guest pays by giving you the coins)")
        return None

    def _may_lead(self, name, context):
        """None when ``name`` is a guest here who spoke in the turn, else the refusal."""
        found = self.search(name, quiet=True) if name else []
        if not found or found[0].dbref not in (context.get("speakers") or ()):
            return f"only a guest who asked to be shown the way is led, and '{name}' did not ask"
        return None

    def at_post_move(self, source_location, move_type="move", **kwargs):
        """Having walked away from her counter, she walks back :data:`BACK_AFTER` seconds
        later (:meth:`walk_back`)."""
        super().at_post_move(source_location, move_type=move_type, **kwargs)
        if move_type == "traverse" and self.home and self.location != self.home:
            from evennia.utils.utils import delay

            delay(float(self.db.back_after or BACK_AFTER), self.walk_back)

    def walk_back(self):
        """
        Go back to her ``home`` through an exit of the room she is in that leads there, by the
        exit's own command (its lock applies); she stays where she is when none does.

        Returns:
            Deferred or None: the walk.
        """
        from ai_contrib.action_commands import traverse

        here = self.location
        if here is None or here == self.home:
            return None
        ways = [obj for obj in here.contents if obj.destination == self.home]
        return traverse(self, ways[0]) if ways else None

    def at_object_leave(self, moved_obj, target_location, move_type="move", **kwargs):
        """The key given to a guest uses up the room's price from what they paid."""
        super().at_object_leave(moved_obj, target_location, move_type=move_type, **kwargs)
        if move_type == "give" and moved_obj.key == KEY_NAME and target_location is not None:
            paid = dict(self.db.paid or {})
            paid[target_location.dbref] = max(0, paid.get(target_location.dbref, 0) - ROOM_PRICE)
            self.db.paid = paid
