"""
The test suite is sorted by what its tests need (``docs/development.md``, "Where a test goes"),
read from the source with ``ast`` (nothing is imported):

- ``tests/unit/``: no Evennia harness or database, no game, no real model;
- ``tests/shell/``: Evennia's harness, but no real game and no real embedded model;
- ``tests/e2e/``: every module that starts a real game or carries the ``e2e`` marker, and every
  module there carries the marker (so ``-m "not e2e"`` leaves out every real game);
- ``tests/model/``: the real embedded model, no game;
- ``tests/bench/``: every module that runs a benchmark script (``benchmarks/``), in a
  subprocess or in the test's own process, and nothing else (so ``make test-fast`` runs none);
- ``tests/unit/`` and ``tests/shell/`` wait on events, never for a fixed number of seconds
  (``docs/development.md``, "Waiting in tests"): no wait is given a number of seconds, and no
  test reckons a deadline of its own; a wait's limit is the hang guard, ``HANG_GUARD``;
- no test module at ``tests/`` itself, and no test module imports another (what tests share
  lives in ``tests/support/``);
- few tests carry the ``slow`` marker, each on its own test function, and only ``make
  test-fast`` leaves them out.
"""

import ast
import re

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
KINDS = ("unit", "shell", "e2e", "model", "bench")
#: Evennia's test cases, and the support ones built on them
HARNESS_CLASSES = {"BaseEvenniaTest", "EvenniaTest", "BaseEvenniaCommandTest",
                   "EvenniaCommandTest", "NPCTestCase"}
#: pytest-django's database fixtures
DB_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences"}
#: what starts a real game (``tests/support/e2e_util.py``, ``demo/gamectl.py``)
GAME_STARTERS = {"started_game", "game_fixtures", "GameDir"}
EMBEDDED_MODEL = "ai_contrib.llm.embedded"


def _imports(tree):
    """Every module a source imports, anywhere in it: ``from a.b import c`` gives ``a.b`` and
    ``a.b.c`` (``c`` may be a module); relative imports are left out."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _names(tree):
    """Every name a source uses or imports, and every attribute it reads."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
    return found


def _test_arguments(tree):
    return {arg.arg for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for arg in node.args.args}


def _has_marker(tree, marker):
    """True if the source reads ``<...>.mark.<marker>``."""
    return any(isinstance(node, ast.Attribute) and node.attr == marker
               and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
               for node in ast.walk(tree))


def _marked_tests(tree, marker):
    """The test functions a source marks ``<...>.mark.<marker>`` by a decorator, and ``"*"``
    where a module or class marks all of its tests (``pytestmark``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if any(_has_marker(decorator, marker) for decorator in node.decorator_list):
                found.append(node.name if node.name.startswith("test") else "*")
        elif isinstance(node, ast.Assign) and _has_marker(node.value, marker) and any(
                isinstance(target, ast.Name) and target.id == "pytestmark"
                for target in node.targets):
            found.append("*")
    return sorted(found)


#: what runs a script: in a subprocess, or in this process (``runpy``)
SCRIPT_RUNNERS = {"subprocess", "runpy", "asyncio.create_subprocess_exec",
                  "asyncio.create_subprocess_shell"}


def _names_benchmarks(tree):
    """True if the source names the ``benchmarks`` folder in a string: a path built from it
    (``ROOT / "benchmarks"``, ``"benchmarks/locomo.py"``) or a module of it
    (``"benchmarks.locomo"``, as ``python -m`` or ``runpy.run_module`` take it)."""
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str)
               and (node.value == "benchmarks"
                    or node.value.startswith(("benchmarks/", "benchmarks.")))
               for node in ast.walk(tree))


def _calls_main(tree):
    """True if the source calls a ``main`` of a module (``script.main([...])``)."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
               and node.func.attr == "main" for node in ast.walk(tree))


def _runs_a_benchmark(tree, imports, names):
    """True if the source names the ``benchmarks`` folder and runs a script (a subprocess,
    ``runpy``) or calls a module's ``main``: a benchmark run, not a test of its pure parts."""
    runs = bool(imports & SCRIPT_RUNNERS or {"create_subprocess_exec",
                                             "create_subprocess_shell"} & names)
    return _names_benchmarks(tree) and (runs or _calls_main(tree))


#: the waits that take a limit in seconds, and where that limit goes among their positional
#: arguments (None: only as ``timeout=``)
WAITS = {"wait": 0, "join": 0, "wait_for": 1, "wait_for_requests": 1, "until": 2,
         "communicate": 1, "run": None, "check_output": None, "call": None}


def _is_number(node):
    return (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool))


def _fixed_wait(node):
    """True if ``node`` waits a number of seconds written in the test: a wait given a number
    (``event.wait(30)``, ``wait_for(d, 20)``, ``timeout=5``) or a deadline reckoned from the
    clock (``time.monotonic() + 20``)."""
    if isinstance(node, ast.Call):
        func = node.func
        name = (func.attr if isinstance(func, ast.Attribute)
                else func.id if isinstance(func, ast.Name) else None)
        if name not in WAITS:
            return False
        at = WAITS[name]
        return ((at is not None and len(node.args) > at and _is_number(node.args[at]))
                or any(k.arg == "timeout" and _is_number(k.value) for k in node.keywords))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return any(isinstance(clock, ast.Call) and isinstance(clock.func, ast.Attribute)
                   and clock.func.attr in ("monotonic", "time", "seconds") and _is_number(other)
                   for clock, other in ((node.left, node.right), (node.right, node.left)))
    return False


def _uses_evennia(imports):
    return any(name == "evennia" or name.startswith("evennia.") for name in imports)


def _support_with_harness():
    """The ``tests.support`` modules that bring in Evennia's harness, directly or through
    another support module."""
    trees = {f"tests.support.{path.stem}": ast.parse(path.read_text(encoding="utf-8"))
             for path in sorted((TESTS / "support").glob("*.py"))}
    harness = {name for name, tree in trees.items()
               if _uses_evennia(_imports(tree)) and HARNESS_CLASSES & _names(tree)}
    grew = True
    while grew:
        more = {name for name, tree in trees.items() if _imports(tree) & harness} - harness
        harness |= more
        grew = bool(more)
    return harness


SUPPORT_HARNESS = _support_with_harness()


def describe(source):
    """
    What a test module's source needs.

    Returns:
        dict: ``harness`` (Evennia's test cases, its database or modules, or a support module
        built on them), ``game`` (starts a real game), ``e2e`` (carries the marker), ``model``
        (the real embedded model), ``bench`` (runs a benchmark script in a subprocess),
        ``fixed_waits`` (the lines where it waits a fixed number of seconds),
        ``test_imports`` (other test modules it imports), ``slow`` (its tests marked ``slow``:
        :func:`_marked_tests`).
    """
    tree = ast.parse(source)
    imports, names = _imports(tree), _names(tree)
    return {
        "harness": bool(_uses_evennia(imports) or HARNESS_CLASSES & names
                        or imports & SUPPORT_HARNESS or _has_marker(tree, "django_db")
                        or DB_FIXTURES & _test_arguments(tree)),
        "game": bool(GAME_STARTERS & names),
        "e2e": _has_marker(tree, "e2e"),
        "model": any(name == EMBEDDED_MODEL or name.startswith(EMBEDDED_MODEL + ".")
                     for name in imports),
        "bench": _runs_a_benchmark(tree, imports, names),
        "fixed_waits": sorted(node.lineno for node in ast.walk(tree) if _fixed_wait(node)),
        "test_imports": sorted(name for name in imports
                               if name.startswith("tests.")
                               and name.rsplit(".", 1)[-1].startswith("test_")),
        "slow": _marked_tests(tree, "slow"),
    }


def _test_files():
    """``{path relative to tests/: description}`` of every ``test_*.py`` under ``tests/``."""
    return {path.relative_to(TESTS).as_posix(): describe(path.read_text(encoding="utf-8"))
            for path in sorted(TESTS.rglob("test_*.py"))}


FILES = _test_files()


def _kind(relative):
    return relative.split("/", 1)[0] if "/" in relative else None


def _in(kind):
    return {path: what for path, what in FILES.items() if _kind(path) == kind}


def test_the_scan_tells_the_kinds_apart():
    unit = describe("from ai_contrib.core.cuts import safe_cut\n"
                    "def test_cut():\n    assert safe_cut([], 0) == 0\n")
    assert not any(unit[key] for key in ("harness", "game", "e2e", "model")), unit
    assert describe("from tests.support.npc_fixtures import NPCTestCase\n")["harness"]
    assert describe("from tests.support.admin_fixtures import AdminCase\n")["harness"]
    assert describe("def test_it(db):\n    pass\n")["harness"]
    assert describe("import pytest\n@pytest.mark.django_db\ndef test_it():\n    pass\n")["harness"]
    game = describe("import pytest\nfrom tests.support.e2e_util import game_fixtures\n"
                    "pytestmark = [pytest.mark.e2e]\n"
                    "llm, game = game_fixtures('e2e-x', {}, object)\n")
    assert game["game"] and game["e2e"] and not game["harness"], game
    assert describe("from ai_contrib.llm import embedded\n")["model"]
    assert describe("from ai_contrib.llm.embedded import EmbeddedServerProcess\n")["model"]
    assert describe("from tests.shell.test_lore import X\n")["test_imports"] == [
        "tests.shell.test_lore"]
    assert describe("from tests.support.llm_double import reply\n")["test_imports"] == []
    bench = describe("import subprocess, sys\nfrom tests.support.paths import ROOT\n"
                     "def test_it():\n    subprocess.run([sys.executable,"
                     " str(ROOT / 'benchmarks' / 'locomo.py')])\n")
    assert bench["bench"] and not bench["harness"], bench
    assert not describe("import subprocess\nsubprocess.run(['python', '-c', 'pass'])\n")["bench"]
    assert not describe("from benchmarks import locomo_metrics\n")["bench"]
    # a benchmark run as a module, by runpy, or through its main() in the test's process
    assert describe("import subprocess, sys\n"
                    "subprocess.run([sys.executable, '-m', 'benchmarks.locomo'])\n")["bench"]
    assert describe("import runpy\nrunpy.run_path('benchmarks/tavern.py')\n")["bench"]
    loaded = ("import importlib.util\nfrom tests.support.paths import ROOT\n"
              "spec = importlib.util.spec_from_file_location('d', ROOT / 'benchmarks' / 'd.py')\n"
              "d = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(d)\n")
    assert not describe(loaded + "assert d.parse_log('') == []\n")["bench"]  # its pure parts
    assert describe(loaded + "d.main(['--quick'])\n")["bench"]


def test_the_scan_finds_fixed_waits():
    waits = describe("import threading, time\nfrom tests.support.twisted_util import wait_for\n"
                     "gate = threading.Event()\n"
                     "gate.wait(30)\n"  # line 4
                     "wait_for(d, 20)\n"
                     "llm.wait_for_requests(2, timeout=5.0)\n"
                     "deadline = time.monotonic() + 20\n"
                     "subprocess.run(['x'], timeout=120)\n")
    assert waits["fixed_waits"] == [4, 5, 6, 7, 8], waits
    # waits on the event under the hang guard, and a count that is not a limit, are not
    events = describe("from tests.support.waiting import HANG_GUARD\n"
                      "gate.wait(HANG_GUARD)\nwait_for(d)\nllm.wait_for_requests(3)\n"
                      "deadline = time.monotonic() + HANG_GUARD\n"
                      "subprocess.run(['x'], timeout=HANG_GUARD)\nspin(0.05)\n")
    assert events["fixed_waits"] == [], events


def test_every_test_file_is_in_a_folder_of_its_kind():
    assert len(FILES) > 80, len(FILES)  # the scan finds the suite at all
    assert {_kind(path) for path in FILES} == set(KINDS), sorted(FILES)
    assert "support" in {p.name for p in TESTS.iterdir()}
    assert not sorted(path for path in FILES if _kind(path) is None)


def test_unit_tests_use_no_harness_game_or_model():
    unit = _in("unit")
    assert len(unit) > 30, len(unit)
    wrong = {path: what for path, what in unit.items()
             if what["harness"] or what["game"] or what["e2e"] or what["model"]}
    assert not wrong, wrong


def test_shell_tests_use_the_harness_and_no_real_game_or_model():
    shell = _in("shell")
    assert len(shell) > 30, len(shell)
    # positive control: the scan sees the harness in every one of them
    assert not [path for path, what in shell.items() if not what["harness"]]
    wrong = {path: what for path, what in shell.items()
             if what["game"] or what["e2e"] or what["model"]}
    assert not wrong, wrong


def test_real_games_and_the_e2e_marker_are_in_e2e_only():
    starting = sorted(path for path, what in FILES.items() if what["game"])
    marked = sorted(path for path, what in FILES.items() if what["e2e"])
    e2e = sorted(_in("e2e"))
    assert "e2e/test_tavern.py" in starting and "e2e/test_village.py" in starting
    assert len(e2e) >= 10, e2e
    assert starting == e2e, (starting, e2e)
    assert marked == e2e, (marked, e2e)  # so -m "not e2e" leaves out every real game


def test_the_real_model_is_in_model_or_e2e_only():
    users = sorted(path for path, what in FILES.items() if what["model"])
    assert "model/test_embedded.py" in users and "model/test_extraction.py" in users
    assert {_kind(path) for path in users} <= {"model", "e2e"}, users
    assert not [path for path, what in _in("model").items() if what["game"]]


def test_benchmark_runs_are_in_bench_only():
    runs = sorted(path for path, what in FILES.items() if what["bench"])
    assert "bench/test_locomo.py" in runs
    assert runs == sorted(_in("bench")), (runs, sorted(_in("bench")))


def test_unit_and_shell_tests_wait_on_events_not_for_fixed_seconds():
    fast = {path: what for path, what in FILES.items() if _kind(path) in ("unit", "shell")}
    assert len(fast) > 60, len(fast)  # the scan reads the fast lane at all
    fixed = {path: what["fixed_waits"] for path, what in fast.items() if what["fixed_waits"]}
    assert not fixed, fixed


def test_no_test_module_imports_another():
    imports = {path: what["test_imports"] for path, what in FILES.items() if what["test_imports"]}
    assert not imports, imports


#: the most tests the ``slow`` marker may leave out of ``make test-fast``
MOST_SLOW = 4


def test_the_scan_finds_tests_marked_slow():
    marked = describe("import pytest\nclass TestIt:\n    @pytest.mark.slow\n"
                      "    def test_long(self):\n        pass\n"
                      "    def test_short(self):\n        pass\n")
    assert marked["slow"] == ["test_long"], marked
    assert describe("import pytest\npytestmark = pytest.mark.slow\n")["slow"] == ["*"]
    assert describe("import pytest\n@pytest.mark.slow\nclass TestAll:\n    pass\n")["slow"] == [
        "*"]
    assert describe("import pytest\n@pytest.mark.e2e\ndef test_it():\n    pass\n")["slow"] == []


def test_few_tests_are_marked_slow_and_only_the_fast_lane_leaves_them_out():
    slow = {path: what["slow"] for path, what in FILES.items() if what["slow"]}
    assert all(_kind(path) in ("unit", "shell") for path in slow), slow
    assert not [path for path, names in slow.items() if "*" in names], slow  # one by one
    assert 0 < sum(len(names) for names in slow.values()) <= MOST_SLOW, slow
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipes = {target: recipe for target, recipe in re.findall(
        r"^([\w-]+):[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)}
    assert '-m "not slow"' in recipes["test-fast"], recipes["test-fast"]
    for target in ("test", "postgres-lanes"):  # CI's two runs: no marker expression
        assert not re.search(r"-m\s*[\"']|slow", recipes[target]), recipes[target]
    pytest_config = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split(
        "[tool.pytest.ini_options]", 1)[1]
    assert "not slow" not in pytest_config.split("markers", 1)[0]  # addopts runs them
