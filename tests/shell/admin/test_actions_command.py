"""``aiactions`` (ai_contrib/admin/actions_command.py): staff list, set, add, remove and reset an
NPC's actions; a name the action cmdset lacks is refused (``docs/design.md``, "Actions")."""

from django.test import override_settings

from ai_contrib.admin.actions_command import CmdAIActions
from ai_contrib.admin.admin_commands import CmdAIConfig
from ai_contrib.npc.actions import offered_actions

from tests.support.npc_fixtures import NPCTestCase


class TestAIActions(NPCTestCase):
    def names(self):
        return [name for name, _ in offered_actions(self.script)]

    def test_staff_set_add_remove_and_reset_an_npcs_actions(self):
        shown = self.call(CmdAIActions(), "Marta")
        self.assertIn("none (it only speaks)", shown)
        self.assertIn("give", shown)  # the commands it could be given
        self.assertEqual(self.names(), [])
        self.assertIn("its own): give, look", self.call(CmdAIActions(), "Marta = give, look"))
        self.assertEqual(self.names(), ["give", "look"])
        self.call(CmdAIActions(), "/add Marta = whisper")
        self.assertEqual(self.names(), ["give", "look", "whisper"])
        self.call(CmdAIActions(), "/remove Marta = look")
        self.assertEqual(self.names(), ["give", "whisper"])
        with override_settings(AI_ACTIONS=["look"]):
            self.assertIn("follows AI_ACTIONS", self.call(CmdAIActions(), "/reset Marta"))
            self.assertEqual(self.names(), ["look"])

    def test_a_name_the_cmdset_lacks_is_refused(self):
        said = self.call(CmdAIActions(), "Marta = give, @destroy, setdesc")
        self.assertIn("No such command in the action cmdset: @destroy, setdesc", said)
        self.assertEqual(self.names(), [])
        # positive control: the same without them is taken
        self.call(CmdAIActions(), "Marta = give")
        self.assertEqual(self.names(), ["give"])

    def test_aiconfig_shows_the_list_and_points_to_aiactions_to_change_it(self):
        self.call(CmdAIActions(), "Marta = give")
        self.assertIn("actions", self.call(CmdAIConfig(), "Marta"))
        said = self.call(CmdAIConfig(), "Marta/actions=look")
        self.assertIn("use aiactions <npc>", said)
        self.assertEqual(self.names(), ["give"])
