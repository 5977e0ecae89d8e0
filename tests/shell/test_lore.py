"""
Lore and pins in the game (``ai_contrib.lore``, ``ai_contrib.npc.pins``, ``ailore``, ``aipin``;
``docs/design.md``, "Lore and pins"): the store, lore modules loaded idempotently, what a
tagged NPC gets against an untagged one, the staff commands with admin text kept inert, and
pins that survive ``aireset`` unless asked.
"""

import inspect
import sys
import types
from unittest import mock

from django.test import override_settings
from evennia.utils import create

from ai_contrib import lore
from ai_contrib.admin.admin_commands import CmdAIReset
from ai_contrib.admin.lore_commands import CmdAILore, CmdAIPin
from ai_contrib.commands import AIContribCmdSet
from ai_contrib.npc.pins import PINS_ATTRIBUTE, add_pin, get_pins, pins_for
from ai_contrib.typeclasses import AssistantCharacter

from tests.support.npc_fixtures import NPCTestCase
from tests.support.admin_fixtures import FORGED, AdminCase, FakeStore


def words(text):
    return len(text.split())


def module(name, entries):
    """A lore module ``name`` importable for the duration of a test."""
    mod = types.ModuleType(name)
    mod.LORE = entries
    return mock.patch.dict(sys.modules, {name: mod})


CURFEW = {"id": "curfew", "text": "The gate closes at the tenth bell.",
          "keys": ["curfew", "gate"], "condition": ["faction:watch"], "priority": 8}
PRICES = {"id": "prices", "text": "Ale is 2 copper.", "keys": ["ale"],
          "condition": ["location:Room"]}
TOWN = {"id": "town", "text": "This is Hollin.", "constant": True}


class TestStore(NPCTestCase):
    def test_entries_are_attributes_of_one_script_and_the_index_follows_them(self):
        self.assertIsNone(lore.get_lore_store())
        first = lore.add_entry("Ale is 2 copper.", keys="ale, beer", by="Admin")
        second = lore.add_entry("The gate closes at ten.", keys=["gate"],
                                condition="faction:watch", priority=3)
        self.assertEqual((first["id"], second["id"]), ("1", "2"))
        store = lore.get_lore_store()
        self.assertIsInstance(store, lore.LoreScript)
        attrs = store.attributes.all(category=lore.LORE_CATEGORY)
        self.assertEqual(sorted(a.key for a in attrs), ["1", "2"])
        self.assertEqual(lore.get_entry("1")["keys"], ["ale", "beer"])
        self.assertEqual(lore.lore_for_npc(self.npc, ["an ale"], count=words)["chosen"][0]["id"],
                         "1")
        lore.update_entry("1", keys="cider")
        self.assertEqual(lore.lore_for_npc(self.npc, ["an ale"], count=words)["chosen"], [])
        self.assertEqual(len(lore.lore_for_npc(self.npc, ["cider"], count=words)["chosen"]), 1)
        lore.delete_entry("1")
        self.assertEqual(lore.lore_for_npc(self.npc, ["cider"], count=words)["chosen"], [])
        self.assertEqual(lore.add_entry("Again.", keys="x")["id"], "3")  # ids are not reused

    def test_bad_changes_store_nothing(self):
        lore.add_entry("Ale is 2 copper.", keys="ale")
        with self.assertRaisesRegex(ValueError, "empty key"):
            lore.update_entry("1", keys=" , ")
        with self.assertRaisesRegex(ValueError, "expected 'all'"):
            lore.update_entry("1", condition="watch")
        self.assertEqual(lore.get_entry("1")["keys"], ["ale"])
        self.assertEqual(lore.get_entry("1")["condition"], ["all"])
        with self.assertRaises(KeyError):
            lore.update_entry("99", text="x")


class TestModules(NPCTestCase):
    def test_loading_is_idempotent_and_keeps_game_entries(self):
        lore.add_entry("Written in the game.", keys="ale")
        with module("game_lore", [CURFEW, PRICES]):
            first = lore.load_lore_modules(["game_lore"])
            store = lore.get_lore_store()
            with mock.patch.object(store.attributes, "add",
                                   wraps=store.attributes.add) as writes:
                again = lore.load_lore_modules(["game_lore"])
        self.assertEqual(sorted(first["added"]), ["curfew", "prices"])
        self.assertEqual(first["errors"], [])
        self.assertEqual((again["added"], again["updated"], again["removed"], again["unchanged"]),
                         ([], [], [], 2))
        writes.assert_not_called()
        self.assertEqual(sorted(e["id"] for e in lore.lore_entries()),
                         ["1", "curfew", "prices"])
        self.assertEqual(lore.get_entry("curfew")["source"], "game_lore")
        # an entry changed in the module is rewritten, one it dropped is removed
        changed = dict(PRICES, text="Ale is 3 copper now.")
        with module("game_lore", [changed]):
            report = lore.load_lore_modules("game_lore")
        self.assertEqual((report["updated"], report["removed"]), (["prices"], ["curfew"]))
        self.assertEqual(lore.get_entry("prices")["text"], "Ale is 3 copper now.")
        self.assertIsNotNone(lore.get_entry("1"))
        # module entries are edited in their module
        with self.assertRaisesRegex(ValueError, "comes from game_lore"):
            lore.update_entry("prices", text="x")
        with self.assertRaisesRegex(ValueError, "comes from game_lore"):
            lore.delete_entry("prices")

    def test_the_setting_names_the_modules_and_errors_do_not_stop_loading(self):
        bad = {"id": "bad", "text": "", "keys": ["x"]}
        with module("game_lore", [TOWN, bad, dict(TOWN, text="twice")]), \
                override_settings(AI_LORE_MODULES=["game_lore", "no.such.module"]):
            report = lore.load_lore_modules()
        self.assertEqual(report["added"], ["town"])
        errors = "\n".join(report["errors"])
        self.assertIn("game_lore.LORE[1]: lore entry 'bad': the text is empty", errors)
        self.assertIn("'town' is already used", errors)
        self.assertIn("no.such.module: ModuleNotFoundError", errors)

    def test_a_module_that_fails_to_import_keeps_its_entries(self):
        with module("game_lore", [TOWN]):
            lore.load_lore_modules(["game_lore"])
        report = lore.load_lore_modules(["game_lore"])  # not importable now
        self.assertEqual(report["removed"], [])
        self.assertIsNotNone(lore.get_entry("town"))
        report = lore.load_lore_modules([])  # no longer listed
        self.assertEqual(report["removed"], ["town"])

    def test_the_game_templates_module_loads(self):
        sys.path.insert(0, "game_template")
        self.addCleanup(sys.path.remove, "game_template")
        self.addCleanup(sys.modules.pop, "world.lore", None)
        self.addCleanup(sys.modules.pop, "world", None)
        report = lore.load_lore_modules(["world.lore"])
        self.assertEqual(report["errors"], [])
        self.assertIn("watch-curfew", report["added"])
        self.assertEqual(lore.get_entry("watch-curfew")["condition"], ["faction:watch"])


class TestTemplateWorld(NPCTestCase):
    def test_marta_knows_the_prices_and_bram_the_curfew(self):
        """The worked example of ``game_template``: built twice, loaded, asked."""
        sys.path.insert(0, "game_template")
        self.addCleanup(sys.path.remove, "game_template")
        for name in ("world.lore", "world.tavern", "world"):
            self.addCleanup(sys.modules.pop, name, None)
        from world.tavern import build_tavern

        with override_settings(DEFAULT_HOME=self.room1.dbref):
            built = build_tavern()
            again = build_tavern()
        self.assertEqual({k: v.dbref for k, v in built.items()},
                         {k: v.dbref for k, v in again.items()})
        marta, bram = built["marta"], built["bram"]
        self.assertEqual(bram.location, built["gate"])
        self.assertTrue(bram.tags.has("watch", category="faction"))
        self.assertTrue(callable(getattr(bram, "game_hour", None)))  # the gatekeeper's hook
        # the town gate beyond him is barred to a guest and may be unlocked by the watch alone
        town_gate = [o for o in built["gate"].contents if o.key == "town gate"]
        self.assertEqual(len(town_gate), 1)
        self.assertFalse(town_gate[0].access(marta, "traverse"))
        self.assertFalse(town_gate[0].access(marta, "unlock"))
        self.assertTrue(town_gate[0].access(bram, "unlock"))
        # the east door lets Marta show a guest up, and a guest through only with the key
        east_door = [o for o in built["tavern"].contents if o.key == "east"][0]
        self.assertFalse(east_door.access(self.char1, "traverse"))
        [key] = [o for o in marta.contents if o.key == "east room key"]
        key.location = self.char1
        self.assertTrue(east_door.access(self.char1, "traverse"))
        self.assertTrue(east_door.access(marta, "traverse"))  # the key given away
        self.assertFalse(east_door.access(self.char2, "traverse"))
        self.assertEqual(lore.load_lore_modules(["world.lore"])["errors"], [])

        def given(npc, line):
            return [c["id"] for c in lore.lore_for_npc(npc, [line])["chosen"]]

        self.assertIn("watch-curfew", given(bram, "When is the curfew, watchman?"))
        self.assertNotIn("watch-curfew", given(marta, "When is the curfew, Marta?"))
        self.assertIn("stag-drinks", given(marta, "A mug of ale, please."))
        self.assertNotIn("stag-drinks", given(bram, "A mug of ale, please."))
        # both stand in the crossroads zone: the town's rumours reach both
        self.assertIn("rumour-bridge", given(marta, "Any news of the bridge?"))
        self.assertIn("rumour-bridge", given(bram, "Any news of the bridge?"))


class TestLoreForNPC(NPCTestCase):
    def setUp(self):
        super().setUp()
        with module("game_lore", [CURFEW, PRICES, TOWN]):
            lore.load_lore_modules(["game_lore"])
        self.guard = create.create_object(AssistantCharacter, key="Bram", location=self.room2)

    def test_a_tagged_npc_gets_what_an_untagged_one_does_not(self):
        said = ["When is the CURFEW?", "the ale was fine"]
        untagged = lore.lore_for_npc(self.guard, said, budget_tokens=100, count=words)
        self.assertEqual([c["id"] for c in untagged["chosen"]], ["town"])
        self.guard.tags.add("watch", category="faction")
        tagged = lore.lore_for_npc(self.guard, said, budget_tokens=100, count=words)
        self.assertEqual([(c["id"], c["key"]) for c in tagged["chosen"]],
                         [("curfew", "curfew"), ("town", None)])
        # a tag without that category is not enough
        self.guard.tags.remove("watch", category="faction")
        self.guard.tags.add("watch")
        self.assertNotIn("curfew", [c["id"] for c in lore.lore_for_npc(
            self.guard, said, budget_tokens=100, count=words)["chosen"]])

    def test_location_and_zone_come_from_the_npcs_room(self):
        said = ["an ale please"]
        self.assertIn("prices", [c["id"] for c in lore.lore_for_npc(
            self.npc, said, count=words)["chosen"]])  # Marta stands in "Room"
        self.assertNotIn("prices", [c["id"] for c in lore.lore_for_npc(
            self.guard, said, count=words)["chosen"]])
        lore.add_entry("Wolves in the hills.", keys="wolves", condition="zone:hills")
        self.assertEqual([c["id"] for c in lore.lore_for_npc(
            self.guard, ["wolves"], count=words)["chosen"]], ["town"])
        self.room2.tags.add("hills", category="zone")
        self.assertEqual(lore.npc_facts(self.guard)["zones"], ["hills"])
        self.assertEqual([c["id"] for c in lore.lore_for_npc(
            self.guard, ["wolves"], count=words)["chosen"]], ["town", "1"])

    def test_the_budget_is_the_npcs_option(self):
        self.guard.tags.add("watch", category="faction")
        said = ["curfew"]
        result = lore.lore_for_npc(self.guard, said, count=words)
        self.assertEqual(len(result["chosen"]), 2)
        self.guard.assistant.db.lore_token_budget = 5
        result = lore.lore_for_npc(self.guard, said, count=words)
        self.assertEqual([c["id"] for c in result["chosen"]], ["town"])
        self.assertEqual(result["skipped"], [{"id": "curfew", "reason": "budget", "tokens": 7,
                                              "key": "curfew", "constant": False,
                                              "priority": 8}])
        # the real tokenizer by default
        self.assertGreater(lore.lore_for_npc(self.guard, said)["chosen"][0]["tokens"], 0)

    def test_lore_texts_take_the_turn_then_the_last_lines(self):
        texts = lore.lore_texts(self.npc, ["turn a", "turn b"], ["l1", "l2", "l3", "l4", "l5"])
        self.assertEqual(texts, ["turn b", "turn a", "l5", "l4", "l3"])
        self.script.db.lore_scan_lines = 0
        self.assertEqual(lore.lore_texts(self.npc, ["t"], ["l1"]), ["t"])

    def test_no_store_no_lore(self):
        lore.get_lore_store().delete()
        self.assertEqual(lore.lore_for_npc(self.npc, ["ale"]), {"chosen": [], "skipped": []})


class TestAILore(AdminCase):
    def test_add_list_show_set_edit_del(self):
        out = self.call(CmdAILore(), "/add ale, east room = Ale is 2 copper.")
        self.assertIn("Added lore entry 1: ale, east room; who knows: all; priority 0", out)
        self.call(CmdAILore(), "/add constant = This is Hollin.", "Added lore entry 2: (constant)")
        out = self.call(CmdAILore(), "/set 1/condition = faction:watch, npc:Marta")
        self.assertIn("who knows: faction:watch, npc:marta", out)
        self.call(CmdAILore(), "/set 1/priority = 4", "Changed lore entry 1")
        self.call(CmdAILore(), "/set 1/priority = high", "lore entry '1': priority must be")
        self.call(CmdAILore(), "/set 1/colour = red", "Fields: keys, condition")
        self.call(CmdAILore(), "/edit 1 = Ale is 3 copper.", "Changed lore entry 1")
        out = self.call(CmdAILore(), "")
        self.assertIn("Lore: 2 entries", out)
        self.assertLess(out.index("Ale is 3"), out.index("Hollin"))  # priority 4 first
        out = self.call(CmdAILore(), "/show 1")
        for line in ("keys: ale, east room", "who knows: faction:watch, npc:marta",
                     "priority: 4", "from: game, by Char", "text: Ale is 3 copper."):
            self.assertIn(line, out)
        self.call(CmdAILore(), "/del 1", "Deleted lore entry 1")
        self.call(CmdAILore(), "/show 1", "No lore entry '1'")
        self.call(CmdAILore(), "/set 1/keys = beer", "No lore entry '1' (ailore lists them)")
        self.call(CmdAILore(), "/show 2", "Lore entry 2")
        self.call(CmdAILore(), "/add  = nothing", "Usage: ailore")
        self.call(CmdAILore(), "/add ?! = text", "lore entry '3': empty key")
        self.assertIsNone(lore.get_entry("3"))

    def test_a_key_that_looks_like_a_pattern_is_refused_with_a_message_saying_so(self):
        for keys in ("(a+)+$", "^griffin$", "a{1,99999}"):
            out = self.call(CmdAILore(), f"/add {keys} = A griffin nests on the tower.")
            self.assertIn("is not a plain word or phrase", out)
            self.assertIn("never patterns", out)
            self.assertEqual(lore.lore_entries(), [])  # nothing stored, not even rewritten
        with self.assertRaisesRegex(ValueError, "not a plain word or phrase"):
            lore.add_entry("A griffin nests on the tower.", keys="^griffin$")
        # positive control: the plain key is stored as written, and a change to a pattern
        # is refused and leaves it so
        self.call(CmdAILore(), "/add griffin, bell tower = A griffin nests on the tower.",
                  "Added lore entry")
        [entry] = lore.lore_entries()
        self.assertEqual(entry["keys"], ["griffin", "bell tower"])
        self.assertIn("not a plain word or phrase",
                      self.call(CmdAILore(), f"/set {entry['id']}/keys = gr.ffin"))
        self.assertEqual(lore.get_entry(entry["id"])["keys"], ["griffin", "bell tower"])
        with self.assertRaisesRegex(ValueError, "not a plain word or phrase"):
            lore.update_entry(entry["id"], keys=["griffin|tower"])

    def test_admin_text_is_inert_on_every_screen(self):
        self.call(CmdAILore(), f"/add ale = Ale. {FORGED}")
        self.call(CmdAILore(), "/set 1/condition = npc:|rRed")
        for out in (self.call(CmdAILore(), ""), self.call(CmdAILore(), "/show 1"),
                    self.call(CmdAILore(), "/test Marta = ale")):
            self.assertIn("\u00a6", out)
            self.assertFalse([line for line in out.splitlines()
                              if line.lstrip().startswith("[MudInfo]")], out)
        self.assertIn("\u00a6/\u00a6w[MudInfo]", self.call(CmdAILore(), "/show 1"))
        self.assertIn("npc:\u00a6rred", self.call(CmdAILore(), "/show 1"))
        add_pin(self.npc, f"Owes rent. {FORGED}")
        out = self.call(CmdAIPin(), "Marta")
        self.assertIn("\u00a6/\u00a6w[MudInfo]", out.replace("\n", ""))
        self.assertFalse([line for line in out.splitlines()
                          if line.lstrip().startswith("[MudInfo]")], out)

    def test_test_shows_given_skipped_and_hidden(self):
        from ai_contrib.core.tokens import count_tokens

        with module("game_lore", [CURFEW, PRICES, TOWN]):
            lore.load_lore_modules(["game_lore"])
        out = self.call(CmdAILore(), "/test Marta = an ale before the curfew?")
        self.assertIn("Lore Marta would get", out)
        self.assertIn("2 given", out)
        self.assertRegex(out, r"prices\s*\|\s*yes\s*\|\s*ale")
        self.assertRegex(out, r"town\s*\|\s*yes\s*\|\s*\(constant\)")
        self.assertNotRegex(out, r"curfew\s*\|")
        self.assertIn("Not known to Marta (condition): curfew (faction:watch)", out)
        self.npc.tags.add("watch", category="faction")
        self.script.db.lore_token_budget = count_tokens(CURFEW["text"])
        out = self.call(CmdAILore(), "/test Marta = an ale before the curfew?")
        self.assertIn(f"1 given ({count_tokens(CURFEW['text'])}/", out)
        self.assertRegex(out, r"curfew\s*\|\s*yes")
        self.assertRegex(out, r"prices\s*\|\s*no: budget")
        self.assertIn("2 left out for the budget", out)
        self.assertNotIn("Not known to Marta", out)

    def test_module_entries_are_edited_in_their_module(self):
        with module("game_lore", [PRICES]):
            lore.load_lore_modules(["game_lore"])
            self.call(CmdAILore(), "/edit prices = x", "lore entry 'prices' comes from game_lore")
            self.assertIn("comes from game_lore", self.call(CmdAILore(), "/del prices"))
            self.assertIsNotNone(lore.get_entry("prices"))
            with override_settings(AI_LORE_MODULES=["game_lore"]):
                self.call(CmdAILore(), "/reload", "Lore modules loaded: 0 added, 0 updated, "
                          "0 removed, 1 unchanged; 1 entries in all.")


class TestPins(AdminCase):
    def test_add_list_del_and_player_pins(self):
        self.call(CmdAIPin(), "Marta", "Marta has no pins.")
        self.call(CmdAIPin(), "Marta = Her brother Tom is the miller.",
                  "Pinned on Marta as 1: Her brother Tom is the miller.")
        self.call(CmdAIPin(), "/player Marta:Char2 = Owes 3 silver for the east room.",
                  "Pinned on Marta about Char2 as 2")
        self.call(CmdAIPin(), "/player Marta:Nobody = x", "Could not find 'Nobody'")
        out = self.call(CmdAIPin(), "Marta")
        self.assertIn("Pins of Marta: 2", out)
        self.assertIn(f"Char2 {self.char2.dbref}", out)
        self.assertEqual(get_pins(self.npc)[1]["player"], self.char2.dbref)
        self.assertEqual(get_pins(self.npc)[1]["by"], "Char")
        # the player's pin only while the player listens
        self.assertEqual(pins_for(self.npc, {self.char1.dbref: "Char"}),
                         ["Her brother Tom is the miller."])
        self.assertEqual(pins_for(self.npc, {self.char2.dbref: "Char2"}),
                         ["Her brother Tom is the miller.",
                          "About Char2: Owes 3 silver for the east room."])
        self.call(CmdAIPin(), "/del Marta = 1", "Removed pin 1 of Marta")
        self.call(CmdAIPin(), "/del Marta = 1", "Marta has no pin '1'")
        self.assertEqual([p["id"] for p in get_pins(self.npc)], [2])
        self.call(CmdAIPin(), "Marta = Another.", "Pinned on Marta as 3")  # numbers not reused
        self.call(CmdAIPin(), "Marta =", "Usage: aipin")

    def test_the_pin_budget_refuses_a_pin_that_does_not_fit(self):
        self.script.db.pins_token_budget = 12
        self.call(CmdAIPin(), "Marta = one two three four five", "Pinned on Marta as 1")
        self.assertIn("over the pin budget of 12", self.call(CmdAIPin(), "Marta = " + "word " * 40))
        self.assertEqual(len(get_pins(self.npc)), 1)

    def test_pins_survive_aireset_and_aireset_pins_clears_them(self):
        self.use_store(FakeStore(memories=0))
        add_pin(self.npc, "Her brother Tom is the miller.")
        self.fill(4)
        out = self.call(CmdAIReset(), "Marta")
        self.assertIn("Its 1 pins stay", out)
        out = self.said(CmdAIReset(), "/confirm Marta", "Reset Marta")
        self.assertIn("1 pins kept", out)
        self.assertEqual(self.script.history, [])  # the reset did happen
        self.assertEqual(pins_for(self.npc, {}), ["Her brother Tom is the miller."])
        self.assertIn("its 1 pins", self.call(CmdAIReset(), "/pins Marta"))
        self.assertEqual(len(get_pins(self.npc)), 1)  # no /confirm: nothing removed
        out = self.said(CmdAIReset(), "/confirm/pins Marta", "Reset Marta")
        self.assertIn("1 pins removed", out)
        self.assertEqual(pins_for(self.npc, {}), [])
        self.assertFalse(self.npc.attributes.has(PINS_ATTRIBUTE))


class TestCmdSet(NPCTestCase):
    def test_the_commands_are_in_the_cmdset_for_builders_with_help_that_fits(self):
        cmdset = AIContribCmdSet()
        cmdset.at_cmdset_creation()
        keys = {cmd.key for cmd in cmdset.commands}
        self.assertTrue({"ailore", "aipin"} <= keys)
        self.char2.account.permissions.remove("Developer")
        self.char2.account.permissions.add("Player")
        for cmd in (CmdAILore, CmdAIPin, CmdAIReset):
            self.assertFalse(cmd().access(self.char2, "cmd"), cmd.key)
            self.assertTrue(cmd().access(self.char1, "cmd"), cmd.key)
            for line in inspect.cleandoc(cmd.__doc__).splitlines():
                self.assertLessEqual(len(line), 78, f"{cmd.key}: {line}")

    def test_the_list_fits_80_columns(self):
        self.session.protocol_flags["SCREENWIDTH"] = {0: 80}
        self.addCleanup(self.session.protocol_flags.pop, "SCREENWIDTH", None)
        lore.add_entry("long text " * 50, keys=", ".join(f"key{i}" for i in range(20)),
                       condition=", ".join(f"npc:someone{i}" for i in range(10)))
        out = self.call(CmdAILore(), "")
        self.assertIn("Lore: 1 entries", out)
        self.assertEqual([line for line in out.splitlines() if len(line) > 80], [])
