"""
What the end-to-end tests share: a real game made from ``game_template/`` on free loopback
ports (``demo.gamectl.GameDir``), started once per test module and always stopped (or killed)
afterwards, and a failure message that carries the transcript and server log tails.
"""

import asyncio
import functools
import json

import pytest

from demo.gamectl import GameDir
from demo.replay import npc_archives
from demo.telnet import TelnetError, TelnetPlayer
from tests.support.llm_double import LLMDouble
from demo.telnet import Transcript
from tests.support.waiting import HANG_GUARD


#: the line of ``compact/force``'s own answer, whatever it did. It opens a line: the report of an
#: automatic compaction the forced one waited for ("Marta's emergency compaction ended.
#: Compacted Marta (hybrid): ...") comes before it and must not be read as it, or the test goes
#: on while the forced compaction still runs and its answer is read as the next command's
FORCED_COMPACT_RE = r"(?m)^(?:Compacted|Masked|Cascade cycle|Replaced|Compaction of)[^\n]*"


def started_game(tmp_path_factory, name, env, timeout=240, prepare=None):
    """
    Generator for a module-scoped fixture: make a game in a fresh temporary directory, start
    it, yield it, stop it (kill it if it will not stop).

    Args:
        tmp_path_factory: pytest's factory; the game lives in ``<tmp>/<name>N/game`` and its
            telnet transcript (``game.transcript``) beside it, kept by pytest's tmp dirs.
        name (str): the temporary directory's prefix.
        env (dict): ``AI_*`` and other settings for the game (see ``game_template``).
        timeout (float): seconds the first start may take (Evennia's migrations, the model).
        prepare (callable, optional): ``prepare(game)`` after the start (accounts, ...); a
            failure there stops the game too.

    Yields:
        GameDir: the running game.
    """
    path = tmp_path_factory.mktemp(name) / "game"
    game = GameDir.create(path, env=env)
    game.transcript = Transcript(path.parent / "transcript.txt")
    try:
        game.start(timeout=timeout)
        if prepare is not None:
            prepare(game)
    except Exception:
        game.retire()
        game.transcript.close()
        raise
    try:
        yield game
    finally:
        game.retire()
        game.transcript.close()


def game_fixtures(name, env, model, players=(), then=None, prepare=None, timeout=240,
                  attribute="model", release=None, double=None):
    """
    The module-scoped ``llm`` and ``game`` fixtures of an end-to-end module whose game talks to
    an LLM double: ``llm, game = game_fixtures(...)`` at the module's top level.

    Args:
        name (str): the game's temporary directory prefix (:func:`started_game`).
        env (dict): the game's settings; ``AI_LLM_BASE_URL`` is set to the double's.
        model (callable): makes the double's model (a callable of the request body), which the
            tests reach as ``llm.<attribute>``.
        players (iterable): ``(name, password)`` accounts made once the game runs.
        then (str, optional): a command each new player runs (``"tavern"``).
        prepare (callable, optional): ``async prepare(game)``, run after the accounts are made.
        timeout (float): seconds the first start may take.
        attribute (str): the name of the model on the double.
        release (callable, optional): ``release(model)`` before the double stops, to let go of
            answers a test still holds.
        double (dict, optional): keyword arguments of :class:`LLMDouble` (``{"strict": True}``:
            a server that refuses fields outside OpenAI's API, as OpenAI's API does).

    Returns:
        tuple: the ``llm`` and ``game`` fixture functions.
    """
    players = list(players)

    @pytest.fixture(scope="module", name="llm")
    def llm_fixture():
        made = model()
        stop = (lambda: release(made)) if release is not None else None
        yield from serve_model(made, attribute=attribute, before_stop=stop, options=double)

    async def ready(game):
        await create_players(game, players, then=then)
        if prepare is not None:
            await prepare(game)

    @pytest.fixture(scope="module", name="game")
    def game_fixture(tmp_path_factory, llm):
        yield from started_game(tmp_path_factory, name, {**env, "AI_LLM_BASE_URL": llm.base_url},
                                timeout=timeout, prepare=lambda game: asyncio.run(ready(game)))

    return llm_fixture, game_fixture


def fail_with_logs(game, message, transcript=None, lines=30):
    """Fail the test with ``message``, the tail of ``transcript`` (default the game's) and the
    server log tail, which together say what went wrong."""
    transcript = transcript or game.transcript
    pytest.fail(
        f"{message}\n--- transcript tail ---\n"
        + "\n".join(transcript.lines[-lines:])
        + "\n--- server log tail ---\n"
        + game.log_tail("server", 40)
    )


def run_scenario(game, scenario):
    """
    Run the coroutine ``scenario`` (``asyncio.run``) and return its result; a game that does not
    answer as expected (:class:`demo.telnet.TelnetError`) fails the test with the transcript and
    server log tails.
    """
    try:
        return asyncio.run(scenario)
    except TelnetError as err:
        fail_with_logs(game, f"the game did not answer as expected: {err}")


def scenario_test(scenario):
    """
    A pytest test made of the coroutine function ``async def test_...(game, ...)``: pytest gives
    it its fixtures by name, and it runs under :func:`run_scenario`, so a game that stops
    answering fails the test with the transcript and server log tails. The test module needs a
    ``game`` fixture.
    """

    @functools.wraps(scenario)  # pytest reads the fixtures' names from the coroutine's signature
    def test(**fixtures):
        run_scenario(fixtures["game"], scenario(**fixtures))

    return test


async def close_all(*conns):
    """Close each telnet connection of ``conns`` that is not None."""
    for conn in conns:
        if conn is not None:
            await conn.close()


async def logged_in(game, label, name, password):
    """A telnet connection to ``game``, logged in as ``name`` (transcript: the game's)."""
    from demo.telnet import TelnetPlayer

    player = TelnetPlayer(label, game.ports.telnet, transcript=game.transcript)
    await player.connect()
    await player.login(name, password)
    return player


async def logged_in_admin(game):
    """A telnet connection to ``game``, logged in as its superuser."""
    return await logged_in(game, "admin", *game.superuser)


def archive_records(game):
    """Every record of Marta's archive (``[{"seq", "kind", ...}]``), or ``[]`` before it exists."""
    files = npc_archives(game)
    if not files:
        return []
    with open(files[0], encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def table_rows(text):
    """
    The rows of the EvTables in ``text`` as lists of cell strings, with cells that wrapped
    over several lines joined by spaces (``border="cells"`` draws a ``+---+`` line under
    every row).
    """
    rows, current = [], None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("+"):
            if current:
                rows.append(current)
            current = None
            continue
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [cell.strip() for cell in line[1:-1].split("|")]
        if current is not None and len(current) == len(cells):
            current = [f"{a} {b}".strip() for a, b in zip(current, cells)]
        else:
            if current:
                rows.append(current)
            current = cells
    if current:
        rows.append(current)
    return rows


def rows_with(text, word):
    """The rows of :func:`table_rows` with a cell containing ``word``."""
    return [row for row in table_rows(text) if any(word in cell for cell in row)]


async def ask(admin, command, first_line, timeout=HANG_GUARD):
    """Send ``command``, wait for ``first_line`` of its answer, then take the rest of it."""
    from demo.telnet import strip_ansi

    _, head = await admin.expect(command, first_line, timeout=timeout)
    # stripped again as a whole: the player strips each chunk it reads, and a long table can
    # arrive with a colour code cut in two between chunks
    return strip_ansi(head + await admin.read_quiet(quiet=0.5, timeout=10))


def serve_model(model, attribute="model", before_stop=None, options=None):
    """
    The body of a test module's ``llm`` fixture (``yield from serve_model(MyModel())``): an
    LLM double on 127.0.0.1 answering with ``model`` (a callable of the request body), which
    the tests reach as ``llm.<attribute>``; ``before_stop`` runs before the double stops (to
    release answers a test still holds); ``options``: more keyword arguments of
    :class:`LLMDouble` (``strict``...).
    """
    double = LLMDouble(default=model, **(options or {})).start()
    setattr(double, attribute, model)
    try:
        yield double
    finally:
        if before_stop is not None:
            before_stop()
        double.stop()


async def create_players(game, players, then=None):
    """Create each ``(name, password)`` account over telnet; ``then``: a command each runs."""
    for name, password in players:
        async with TelnetPlayer(name, game.ports.telnet, transcript=game.transcript) as player:
            await player.login(name, password, create=True)
            if then:
                await player.command(then)
