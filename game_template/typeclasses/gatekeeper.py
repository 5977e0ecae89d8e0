"""
The gatekeeper: Bram of the watch, an AI NPC who opens the town gate for the watchword only at
night (``ai_contrib`` docs, "Actions"; the curfew is ``world/lore.py``'s ``watch-curfew``).

Bram may be given actions (``aiactions Bram = unlock, look``, with ``AI_ACTION_CMDSET`` naming
a cmdset holding ``commands.gate.CmdUnlock``: the template's ``commands.lead.TavernActionCmdSet``); :meth:`Gatekeeper.at_ai_action` applies the watch's order
before ``unlock`` runs: only between the tenth bell (:data:`TENTH_BELL`, game time) and dawn, and
only when someone in the turn gave :data:`WATCHWORD`. A refusal's reason is what the model is
told, so he can say why.
"""

import time

from ai_contrib.typeclasses import AssistantCharacter

#: the week's watchword (world/lore.py tells the watch the same)
WATCHWORD = "juniper"
#: the game hour of the tenth bell, when the gate closes for the night
TENTH_BELL = 22
#: the game hour of dawn, when it stands open again
DAWN = 6
#: the actions the watch's order rules
GATE_ACTIONS = ("unlock", "open")


class Gatekeeper(AssistantCharacter):
    """A watchman whose ``unlock`` obeys the curfew: night and the watchword."""

    def game_hour(self):
        """The hour of the game's clock, 0-23 (Evennia's ``gametime``, absolute, in UTC)."""
        from evennia.utils import gametime

        return time.gmtime(gametime.gametime(absolute=True)).tm_hour

    def at_ai_action(self, action, args, context):
        """
        ``unlock``/``open`` runs only at night (from :data:`TENTH_BELL` to :data:`DAWN`) and
        when a line of the turn (``context["lines"]``) holds :data:`WATCHWORD`; otherwise the
        refusal says which is missing. Every other action runs as the model asked.
        """
        if action not in GATE_ACTIONS:
            return None
        hour = self.game_hour()
        if DAWN <= hour < TENTH_BELL:
            return (f"it is {hour}:00 by the game's clock: the gate is opened for the watchword "
                    "only at night, after the tenth bell")
        if not any(WATCHWORD in str(line).lower() for line in context.get("lines") or ()):
            return "nobody gave this week's watchword: the gate stays barred"
        return None
