"""
End to end in a real browser: the staff pages of AI NPCs on a real game's website, driven by
headless Chromium (Debian's ``chromium`` and ``chromium-driver``, through Selenium).

A game is made from ``game_template/`` on free loopback ports, its model an LLM double on
127.0.0.1 (replies in character, summaries for compaction, no tool calls). Bob tells Marta
where the cellar key is and chats on; the admin compacts her history (``compact/force``) so
Bob's first lines leave the context for the archive. Then, in the browser:

1. an anonymous visitor to ``/ai/`` is sent to the login page;
2. the superuser logs in on the website: ``/ai/`` lists Marta with her usage figure and bar;
   ``/ai/<id>/`` shows the compaction on the chart and in the events table, the runtime
   context with the summary, a reply receipt naming a retrieved memory, and the memory search
   box finds the compacted line about the cellar key with its score and archive source;
3. Bob, a plain player, logs in on the website and is refused both pages and the API.

Screenshots of both pages go to ``test-output/screenshots/`` (``ai-index.png``,
``ai-npc.png``, ``ai-npc-search.png``).

After the compaction Bob asks where the key was: retrieval brings the compacted line back, and
that reply's receipt names it as a retrieved memory from the archive.
"""

import asyncio
import json
import os
import re
import shutil
import time

import pytest

from ai_contrib.core.summary import DEFAULT_COMPACTION_PROMPT
from ai_contrib.web.chart import CHAR_WIDTH
from demo.telnet import TelnetPlayer, strip_ansi
from tests.support.e2e_util import fail_with_logs, started_game
from tests.support.llm_double import LLMDouble, tool_calls
from tests.support.paths import ROOT
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

#: set to 1 to make a missing browser fail this test instead of skipping it
#: (docs/development.md, "Testing")
REQUIRE_BROWSER = "AI_REQUIRE_BROWSER"

NPC = "Marta"
PLAYER = ("Bob", "bob-pw-3319")
FACT_LINE = "Remember this: the cellar key is hidden under the blue barrel."
LINES = [FACT_LINE, "The rain has not stopped for three days.",
         "A mug of your dark ale, please.", "Is the blacksmith still open?"]
SUMMARY = "## Who I Spoke With\n- Bob, a traveller, ordered dark ale."
SCREENSHOTS = ROOT / "test-output" / "screenshots"
ANSWER_RE = re.compile(rf'{NPC} says, "|{NPC} seems lost in thought')

ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_MAX_CONTEXT_TOKENS": "400",
    "AI_COMPACT_PRESERVE_WINDOW": "2",
    "AI_COMPACT_PRESERVE_FRACTION": "0",
    "AI_COMPACT_EMERGENCY_THRESHOLD": "5.0",  # the admin compacts: one event, at a known time
    "AI_SLEEP_AFTER_IDLE": "0",
    "AI_MEMORY_ENABLED": "0",  # the archive answers retrieval; no embedder to load
}


def _model(body):
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    if body.get("tools"):
        return tool_calls([("noop", {})])
    if system.startswith(DEFAULT_COMPACTION_PROMPT[:60]):
        return SUMMARY
    return "Aye, love, I hear you."


@pytest.fixture(scope="module", autouse=True)
def browser_installed():
    """Skip the module, saying why, when Debian's ``chromium`` or ``chromium-driver`` is not
    installed; fail it instead under ``AI_REQUIRE_BROWSER=1`` (CI installs both and sets it, so
    a browser that went missing cannot pass by skipping). Runs before the game is started."""
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        reason = (f"no {' or '.join(missing)} on PATH (Debian's chromium and chromium-driver "
                  "packages)")
        if os.environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(f"{REQUIRE_BROWSER}=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    double = LLMDouble(default=_model).start()
    try:
        yield from started_game(tmp_path_factory, "e2e-web",
                                {**ENV, "AI_LLM_BASE_URL": double.base_url})
    finally:
        double.stop()


async def _conversation(game):
    player = TelnetPlayer("bob", game.ports.telnet, transcript=game.transcript)
    admin = TelnetPlayer("admin", game.ports.telnet, transcript=game.transcript)
    try:
        await player.connect()
        await player.login(*PLAYER, create=True)
        await player.command("tavern")
        for line in LINES:
            await player.expect(f"talk {NPC} = {line}", ANSWER_RE, timeout=HANG_GUARD)
        await admin.connect()
        await admin.login(*game.superuser)
        await admin.command("tavern")
        _, done = await admin.expect(f"compact/force {NPC}",
                                     rf"Compacted {NPC}[^\n]*|Compaction of {NPC}[^\n]*",
                                     timeout=HANG_GUARD)
        # the key line left the context: retrieval brings it back, and the reply's receipt
        # names it (once the admin, who did not hear it, has left the room)
        await admin.command("ooc")
        await admin.close()
        await player.expect(f"talk {NPC} = Marta, where did I say the cellar key was hidden?",
                            ANSWER_RE, timeout=HANG_GUARD)
        return strip_ansi(done)
    finally:
        await player.close()
        await admin.close()


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1600"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _login(driver, base, name, password):
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/auth/login/")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form input[type=submit]").click()
    deadline = time.monotonic() + 20
    while "/auth/login" in driver.current_url and time.monotonic() < deadline:
        time.sleep(0.2)


def _json(driver, url):
    from selenium.webdriver.common.by import By

    driver.get(url)
    return json.loads(driver.find_element(By.TAG_NAME, "body").text)


def _shot(driver, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1280, min(max(900, height + 40), 6000))
    path = SCREENSHOTS / name
    driver.save_screenshot(str(path))
    return path


def test_staff_pages_in_a_real_browser(game):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    done = asyncio.run(_conversation(game))
    if f"Compacted {NPC}" not in done:
        fail_with_logs(game, f"the compaction did not succeed: {done}")
    base = f"http://127.0.0.1:{game.ports.web}"
    driver = _browser()
    try:
        driver.get(f"{base}/ai/")
        assert "/auth/login/" in driver.current_url, driver.current_url

        _login(driver, base, *game.superuser)
        npcs = _json(driver, f"{base}/ai/api/npcs/")["npcs"]
        marta = next(n for n in npcs if n["key"] == NPC)
        npc_api = f"{base}/ai/api/npcs/{marta['id']}/"
        detail = _json(driver, npc_api)
        named = [m for r in detail["receipts"] if r["receipt"]
                 for m in r["receipt"]["memories"] if "cellar key" in m["text"]]
        assert named and named[0]["source"] == "archive", detail["receipts"]
        tokens, budget = detail["tokens"], detail["budget"]

        driver.get(f"{base}/ai/")
        row = driver.find_element(By.CSS_SELECTOR, f"tr.npc[data-npc='{NPC}']")
        assert f"{tokens} / {budget} tokens" in row.text, row.text
        # the sleep threshold is on the bar; this game's emergency threshold (500 %) is beyond it
        assert "left: 70%" in row.find_element(By.CSS_SELECTOR, ".mark.sleep").get_attribute(
            "style")
        assert "sleep 70.0 %, emergency 500.0 %" in row.text, row.text
        index_shot = _shot(driver, "ai-index.png")

        driver.get(f"{base}/ai/{marta['id']}/")
        page = driver.find_element(By.TAG_NAME, "main").text
        assert NPC in driver.find_element(By.ID, "npc-name").text
        assert f"{tokens} / {budget} tokens" in page
        events = driver.find_elements(By.CSS_SELECTOR, "#events tr.event")
        assert events and "manual" in events[-1].text, page
        assert driver.find_elements(By.CSS_SELECTOR, "svg.usage-chart g.event")
        # the server places chart labels by their width at CHAR_WIDTH a character: the
        # browser's own measure of each drawn label is never wider
        measured = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg.usage-chart g.event text'))"
            ".map(t => [t.getComputedTextLength(), t.textContent.length]);")
        assert measured and all(0 < w <= n * CHAR_WIDTH for w, n in measured), measured
        # long sections start folded, the figures, the chart's key and the newest receipt not
        assert driver.find_element(By.ID, "events").is_displayed()
        assert not driver.find_element(By.CSS_SELECTOR, "ol.context").is_displayed()
        assert not driver.find_element(By.CSS_SELECTOR, "table.journal").is_displayed()
        assert driver.find_elements(By.CSS_SELECTOR, "ol.context li.msg.summary")
        memories = driver.find_elements(By.CSS_SELECTOR, "#receipts tr.memory")
        assert any("cellar key" in m.text for m in memories), page
        _shot(driver, "ai-npc.png")

        driver.find_element(By.ID, "search-q").send_keys("cellar key blue barrel")
        driver.find_element(By.ID, "search-go").click()
        WebDriverWait(driver, 30).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "tr.search-result")))
        results = driver.find_elements(By.CSS_SELECTOR, "tr.search-result")
        assert "archive" in results[0].text and "cellar key" in results[0].text, results[0].text
        driver.execute_script("document.getElementById('search').scrollIntoView()")
        search_shot = _shot(driver, "ai-npc-search.png")
        assert index_shot.stat().st_size > 0 and search_shot.stat().st_size > 0

        driver.delete_all_cookies()
        _login(driver, base, *PLAYER)
        for url in (f"{base}/ai/", f"{base}/ai/{marta['id']}/"):
            driver.get(url)
            assert "403 Forbidden" in driver.page_source, (url, driver.page_source[:300])
        refused = _json(driver, f"{base}/ai/api/npcs/")
        assert "Builder permission" in refused["detail"], refused
    finally:
        driver.quit()
