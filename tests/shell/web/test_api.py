"""
The staff pages and their JSON API in the Evennia test harness (Django's test client and DRF's
APIClient against the real views, a real NPC with a real archive and a real compaction through
the LLM double): who may see them, what they show.
"""

from django.test import override_settings
from rest_framework.test import APIClient

from ai_contrib import rag_memory
from ai_contrib.core.masking import MASK_PREFIX
from ai_contrib.memory.journal import add_entry, ensure_journal
from ai_contrib.npc.usage_log import USAGE_LOG_SIZE, record_usage

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.receipt_fixtures import add_reply
from tests.support.twisted_util import stored, wait_for

SUMMARY = "Who I Spoke With: Bob.\nConfirmed Facts: Bob rented the east room."
FACT = "Remember: the cellar key is hidden under the blue barrel."


@override_settings(ROOT_URLCONF="tests.support.web_urls", AI_MEMORY_ENABLED=False)
class WebTestCase(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.api = APIClient()
        self.base = f"/ai/api/npcs/{self.npc.id}/"

    def staff(self):
        self.client.force_login(self.account)  # Developer: above Builder
        self.api.force_login(self.account)

    def player(self):
        self.client.force_login(self.account2)
        self.api.force_login(self.account2)

    def compacted(self):
        """A fact, 50 lines, a real summary compaction (LLM double), one usage point."""
        self.fact = self.script.add_message("user", FACT, name="Bob",
                                            metadata={"speaker": self.char1.dbref,
                                                      "audience": [self.char1.dbref]})
        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply(SUMMARY))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc,
                                                                  trigger="manual")))
        self.assertTrue(result["success"], result)
        self.usage_point = record_usage(self.script)
        self.assertEqual(self.usage_point["tokens"], self.script.token_count())
        return result


class TestAccess(WebTestCase):
    def test_anonymous_visitors_are_sent_to_the_login_page(self):
        for url in ("/ai/", f"/ai/{self.npc.id}/"):
            response = self.client.get(url)
            self.assertEqual(response.status_code, 302, url)
            self.assertIn("/auth/login/?next=", response["Location"])
        self.assertEqual(self.api.get("/ai/api/npcs/").status_code, 403)

    def test_a_player_is_refused_the_pages_and_the_api(self):
        self.player()
        for url in ("/ai/", f"/ai/{self.npc.id}/"):
            self.assertEqual(self.client.get(url).status_code, 403, url)
        for url in ("/ai/api/npcs/", self.base, self.base + "archive/",
                    self.base + "search/?q=key"):
            self.assertEqual(self.api.get(url).status_code, 403, url)

    def test_builder_permission_or_is_staff_lets_an_account_in(self):
        self.account2.permissions.add("Builder")
        self.player()
        self.assertEqual(self.client.get("/ai/").status_code, 200)
        self.assertEqual(self.api.get("/ai/api/npcs/").status_code, 200)
        self.account2.permissions.remove("Builder")
        self.account2.is_staff = True
        self.account2.save()
        self.assertEqual(self.api.get(self.base).status_code, 200)

    def test_an_unknown_npc_is_404(self):
        self.staff()
        self.assertEqual(self.api.get("/ai/api/npcs/999999/").status_code, 404)
        self.assertEqual(self.client.get("/ai/999999/").status_code, 404)
        self.assertEqual(self.api.get(f"/ai/api/npcs/{self.char1.id}/").status_code, 404)


class TestAPI(WebTestCase):
    def test_the_list_gives_mode_usage_thresholds_strategy_compaction_and_breaker(self):
        self.staff()
        self.compacted()
        self.script.sleep(reason="test")
        self.script.db.compact_failures = 99  # over any failure limit: the breaker is open
        npcs = self.api.get("/ai/api/npcs/").json()["npcs"]
        marta = next(n for n in npcs if n["key"] == "Marta")
        self.assertEqual(marta["mode"], "sleep")
        self.assertEqual(marta["tokens"], self.script.token_count())
        self.assertEqual(marta["budget"], self.script.budget())
        self.assertAlmostEqual(marta["usage"], self.script.token_usage())
        self.assertEqual(marta["sleep_threshold"], self.script.cfg("compact_sleep_threshold"))
        self.assertEqual(marta["emergency_threshold"],
                         self.script.cfg("compact_emergency_threshold"))
        self.assertEqual(marta["strategy"], "summary")
        self.assertEqual(marta["last_compaction"], self.script.db.last_compaction)
        self.assertEqual(marta["compactions"], 1)
        self.assertEqual(marta["breaker"]["state"], "open")

    def test_the_detail_shows_compaction_context_receipts_journal_and_usage(self):
        self.staff()
        result = self.compacted()
        tool = self.script.add_message("tool", f"{MASK_PREFIX}seq 3] look: ok", name="look",
                                       tool_call_id="call-1", metadata={"masked": True})
        add_reply(self.script, "Under the blue barrel.")
        add_reply(self.script, "An old reply.", receipt_dict=False)
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Bob rented the east room.", speaker="Bob", importance=7)
        self.npc.db.journal = journal
        detail = self.api.get(self.base).json()

        event = detail["events"][-1]
        self.assertEqual(event["trigger"], "manual")
        self.assertTrue(event["success"])
        self.assertEqual(event["messages"], result["compacted_messages"])
        # the point recorded after the compaction (a tick that answered meanwhile adds its own)
        self.assertIn(self.usage_point, detail["usage_series"])

        kinds = [m["kind"] for m in detail["context"]]
        self.assertEqual(kinds[0], "summary")
        self.assertIn("Bob rented the east room.", detail["context"][0]["content"])
        self.assertEqual(next(m for m in detail["context"] if m["seq"] == tool["seq"])["kind"],
                         "masked")

        newest, older = detail["receipts"][0], detail["receipts"][1]
        self.assertIsNone(newest["receipt"])  # written without one: shown as such
        self.assertEqual(older["content"], "Under the blue barrel.")
        memory = older["receipt"]["memories"][0]
        self.assertEqual(memory["where"], "mem0 1f2e3d4c")
        self.assertIn("Elena lives in Riverwood", memory["text"])
        self.assertEqual(older["figures"]["evaluated"], 42)
        self.assertEqual([p["part"] for p in older["receipt"]["parts"]],
                         ["system", "summary", "history", "memories", "turn"])
        self.assertEqual(older["receipt"]["parts"][2]["label"], "history #41-#60, 20 messages")

        entry = detail["journal"][-1]
        self.assertEqual((entry["content"], entry["importance"], entry["consolidated"]),
                         ("Bob rented the east room.", 7, False))
        self.assertEqual(detail["audiences"], [{"dbref": self.char1.dbref, "name": "Bob"}])

    def test_the_archive_pages_by_seq(self):
        self.staff()
        added = self.fill(30)
        last = self.api.get(self.base + "archive/?count=10").json()
        self.assertEqual([r["seq"] for r in last["records"]], list(range(20, 30)))
        self.assertEqual(last["last_seq"], 29)
        first = self.api.get(self.base + "archive/?start=0&count=5").json()
        self.assertEqual([r["content"] for r in first["records"]],
                         [m["content"] for m in added[:5]])
        self.assertTrue(all(r["in_context"] for r in first["records"]))
        self.assertEqual(self.api.get(self.base + "archive/?start=x").status_code, 400)

    def test_the_memory_search_returns_what_retrieval_returns_with_scores_and_sources(self):
        self.staff()
        self.compacted()
        found = self.api.get(self.base + "search/", {"q": "Where is the cellar key hidden?"})
        self.assertEqual(found.status_code, 200, found.content)
        results = found.json()["results"]
        self.assertTrue(results, found.json())
        best = results[0]
        self.assertEqual((best["source"], best["ref"]), ("archive", str(self.fact["seq"])))
        self.assertIn("blue barrel", best["text"])
        self.assertGreater(best["score"], 0)
        self.assertIn("RELATED MEMORIES", found.json()["text"])
        # a listener who never heard Bob's line gets nothing of it
        hidden = self.api.get(self.base + "search/", {"q": "cellar key blue barrel",
                                                      "audience": self.char2.dbref}).json()
        self.assertNotIn("blue barrel", " ".join(r["text"] for r in hidden["results"]))
        self.assertEqual(self.api.get(self.base + "search/").status_code, 400)


class TestPages(WebTestCase):
    def test_the_index_lists_the_npc_with_its_usage_bar(self):
        self.staff()
        self.fill(4)
        page = self.client.get("/ai/").content.decode()
        self.assertIn(f'href="/ai/{self.npc.id}/"', page)
        self.assertIn(f"{self.script.token_count()} / {self.script.budget()} tokens", page)
        self.assertIn('class="mark sleep" style="left: 70.0%"', page)
        self.assertIn('class="mark emergency" style="left: 80.0%"', page)

    def test_the_npc_page_shows_chart_events_receipts_and_escapes_stored_text(self):
        self.staff()
        self.compacted()
        self.script.add_message("user", "<script>alert('x')</script>", name="Bob")
        add_reply(self.script, "Under the blue barrel.")
        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        self.assertIn('<svg class="usage-chart"', page)
        self.assertIn("C1 manual:", page)  # the compaction on the chart
        self.assertIn("mem0 1f2e3d4c", page)
        self.assertIn("Elena lives in Riverwood", page)
        self.assertIn('class="msg summary', page)
        self.assertNotIn("<script>alert", page)
        self.assertIn("&lt;script&gt;alert", page)

    def test_the_npc_page_shows_who_may_hear_each_summary(self):
        self.staff()
        self.compacted()
        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        # Bob's private line is among the summarised ones: the summary is his alone
        # (docs/design.md, "Summaries by audience")
        self.assertIn(f"&middot; heard by {self.char1.dbref}", page)
        self.assertNotIn("heard by everyone", page)

    def test_the_npc_page_lists_the_people_met_with_names_escaped(self):
        self.staff()
        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        self.assertIn("Nobody yet.", page)  # before anyone spoke
        self.char1.key = "<b>Wren</b>"
        self.script.receive_speech(self.char1, "Marta, a room please.", to=self.npc)
        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        self.assertIn('<section id="people">', page)
        self.assertNotIn("Nobody yet.", page)
        self.assertIn("&lt;b&gt;Wren&lt;/b&gt;", page)
        self.assertNotIn("<b>Wren</b>", page)

    def test_the_static_files_are_served_by_the_game(self):
        for name in ("ai.css", "ai.js"):
            response = self.client.get(f"/ai/static/{name}")
            self.assertEqual(response.status_code, 200, name)


class TestUsageLog(WebTestCase):
    def test_the_series_is_bounded(self):
        for _ in range(USAGE_LOG_SIZE + 5):
            record_usage(self.script)
        self.assertEqual(len(self.script.db.usage_log), USAGE_LOG_SIZE)

    def test_an_answered_turn_records_a_point(self):
        self.llm.enqueue(reply("Welcome, traveller."))
        self.script.receive_speech(self.char1, "Hello Marta!")
        wait_for(self.script.run_tick())
        points = self.script.db.usage_log
        self.assertEqual(len(points), 1)
        self.assertEqual(points[0]["tokens"], self.script.token_count())


class TestOneReadModel(WebTestCase):
    """The commands and the page read one model: the same figures for the same NPC."""

    def test_ailist_aihistory_aiconfig_and_the_page_show_the_same_figures(self):
        from ai_contrib.admin.admin_commands import CmdAIConfig, CmdAIList
        from ai_contrib.commands import CmdAIHistory

        self.staff()
        self.compacted()
        journal = ensure_journal(self.npc.db.journal)
        for i in range(3):
            add_entry(journal, f"Bob said thing {i}.", speaker="Bob", entry_id=f"fact_{i}")
        self.npc.db.journal = journal
        # a wide client: each table row on one line, so figures can be read across cells
        self.session.protocol_flags["SCREENWIDTH"] = {0: 250}
        self.addCleanup(self.session.protocol_flags.pop, "SCREENWIDTH", None)
        with override_settings(AI_LLM_CONTEXT_WINDOW=1200):  # the window cuts the budget
            detail = self.api.get(self.base).json()
            page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
            listed = self.call(CmdAIList(), "")
            overview = self.call(CmdAIHistory(), "Marta")
            config = self.call(CmdAIConfig(), "Marta")
        tokens, budget = detail["tokens"], detail["budget"]
        self.assertLess(budget, 1500)  # cut below max_context_tokens: a figure that can differ
        self.assertEqual(detail["budget_source"], "model window")
        self.assertIn(f"{tokens} / {budget} tokens", page)
        self.assertIn(f"{tokens}/{budget} {detail['usage']:.0%}", listed)
        self.assertIn(f"{tokens} / {budget} ({detail['usage']:.1%})", overview)
        self.assertIn(f"history budget: {budget} tokens, from model window: "
                      f"{detail['budget_why']}", " ".join(config.split()))
        self.assertIn(f"{detail['compactions']} (last: {detail['last_compaction']})", overview)
        event = detail["events"][-1]
        self.assertIn(f"| {event['before']} -> {event['after']} ", overview)
        self.assertIn(f"C{len(detail['events'])} manual:", page)  # numbered alike on the chart
        self.assertIn(f"C{len(detail['events'])} ", overview)
        journal_out = self.call(CmdAIHistory(), "Marta/journal")
        self.assertIn(f"{detail['journal_page']['total']} entries", journal_out)
        self.assertIn(f"({detail['journal_page']['total']} entries,", page)


class TestLongPages(WebTestCase):
    """The NPC page fits a screen: long sections fold, long lists come in pages."""

    def test_sections_fold_and_replies_journal_and_context_are_paged(self):
        self.staff()
        self.fill(70)
        from ai_contrib.npc.replies import keep_receipt

        from tests.support.receipt_fixtures import receipt

        for i in range(12):
            line = self.script.add_message("user", f"Question number {i}?", name="Bob")
            # the reply records the line it answers, as the reply writer does
            said = self.script.add_message("assistant", f"Answer number {i}.", name="Marta",
                                           metadata={"reply_to": [line["id"]]})
            keep_receipt(self.script, said, receipt(), None)
        journal = ensure_journal(self.npc.db.journal)
        for i in range(45):
            add_entry(journal, f"Journal fact {i}.", speaker="Bob", entry_id=f"fact_{i:02d}")
        self.npc.db.journal = journal

        def section(html, name):
            return html.split(f'<section id="{name}">')[1].split("</section>")[0]

        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        replies = section(page, "receipts")
        # folded: the context, the journal and the archive; unfolded: the newest reply
        self.assertIn('<section id="context"><details class="fold">', page)
        self.assertIn('<section id="journal"><details class="fold">', page)
        self.assertIn('<section id="archive" ', page)
        self.assertIn('<details class="fold"><summary><h2>Raw archive', page)
        self.assertEqual(replies.count('<details class="receipt fold"'), 5)  # 5 a page
        self.assertEqual(replies.count('class="receipt fold" data-seq'), 5)
        self.assertEqual(replies.count(" open>"), 1)  # the newest
        self.assertIn("Answer number 11.", replies)
        self.assertIn("Answer number 7.", replies)
        self.assertNotIn("Answer number 6.", replies)  # on the next page
        self.assertIn('href="?receipts=2#receipts"', replies)
        self.assertIn("&ldquo;Question number 11?&rdquo;", replies)  # the line it answered
        journal_html = section(page, "journal")
        self.assertIn("Journal fact 44.", journal_html)
        self.assertIn("Journal fact 25.", journal_html)
        self.assertNotIn("Journal fact 24.", journal_html)  # 20 a page, newest first
        self.assertIn("Page 1 of 3", journal_html)
        self.assertIn('href="?journal=2#journal"', journal_html)

        older = self.client.get(f"/ai/{self.npc.id}/?receipts=2&journal=3").content.decode()
        self.assertIn("Answer number 6.", section(older, "receipts"))
        self.assertNotIn("Answer number 11.", section(older, "receipts"))
        self.assertIn("Journal fact 4.", section(older, "journal"))
        self.assertNotIn("Journal fact 44.", section(older, "journal"))
        # the section paged through stays unfolded
        self.assertIn('<section id="journal"><details class="fold" open>', older)
        context = self.client.get(f"/ai/{self.npc.id}/?context=2").content.decode()
        self.assertIn('<section id="context"><details class="fold" open>', context)
        self.assertIn("Messages ", context)

        api = self.api.get(self.base + "?receipts=2&journal=2").json()
        self.assertEqual([r["content"] for r in api["receipts"]][0], "Answer number 6.")
        self.assertEqual(api["receipts"][0]["answered"][0]["content"], "Question number 6?")
        self.assertEqual(api["journal_page"], {"page": 2, "pages": 3, "total": 45,
                                               "consolidated": 0})


class TestActionsShown(WebTestCase):
    """An action's call and result read on the page and in the API as ``aihistory``'s
    ``/raw`` shows them (``docs/design.md``, "Actions"), the game's text escaped."""

    def test_the_page_and_the_archive_show_a_call_and_its_result_escaped(self):
        from tests.support.llm_double import tool_calls

        self.staff()
        self.room1.db.desc = "<script>alert('x')</script> A quiet taproom."
        self.script.db.actions = ["look"]
        self.llm.enqueue(tool_calls([("look", {"args": ""})]), reply("A quiet night."))
        self.script.receive_speech(self.char1, "Marta, what do you see?")
        wait_for(self.script.run_tick())
        page = self.client.get(f"/ai/{self.npc.id}/").content.decode()
        self.assertIn('class="msg action role-assistant"', page)
        self.assertIn("ACTION &middot; Marta (action)", page)
        self.assertIn("<pre>calls look()</pre>", page)
        self.assertIn("ACTION &middot; look (result)", page)
        seen = f"(seen by {self.char1.dbref}, {self.char2.dbref}) look: done."
        self.assertIn(seen, page)
        self.assertIn("&lt;script&gt;alert", page)
        self.assertNotIn("<script>alert", page)
        # the raw archive, on the page and through the API, names them alike
        records = self.api.get(self.base + "archive/").json()["records"]
        actions = [(r["name"], r["content"][:len(seen)]) for r in records
                   if r["kind"] == "action"]
        self.assertEqual(actions, [("Marta (action)", "calls look()"),
                                   ("look (result)", seen)])
        # positive control: the player's line and the reply are plain messages, as before
        said = [r for r in records if r["kind"] == "message"]
        self.assertEqual([r["content"] for r in said][-2:],
                         ["Marta, what do you see?", "A quiet night."])
        self.assertIn('class="msg message role-user"', page)
