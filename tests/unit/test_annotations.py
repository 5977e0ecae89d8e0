"""
Every public function and method of ``ai_contrib.core``, ``ai_contrib.memory``,
``ai_contrib.llm``, ``ai_contrib.npc`` (the services acting on one NPC), ``ai_contrib.admin``
(what admins see) and ``ai_contrib.web`` (the staff pages and their JSON API) says what it
returns (``docs/development.md``, house rules): read from the source with ``ast``, nothing is
imported. Public: a name not starting with ``_``, at module level or in a public class;
``__init__`` and the other dunder methods are left out.
"""

import ast

from tests.support.paths import ROOT as REPO

ROOT = REPO / "ai_contrib"
PACKAGES = ("core", "memory", "llm", "npc", "admin", "web")


def _public_functions(tree, path):
    """``[(label, node)]`` of the public functions of a module's ``tree``, methods included."""
    found = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not child.name.startswith("_"):
                    found.append((f"{path}:{child.lineno} {prefix}{child.name}", child))
            elif isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
                walk(child, f"{prefix}{child.name}.")

    walk(tree, "")
    return found


def public_functions():
    """Every public function of ``PACKAGES``, as ``(label, node)``."""
    found = []
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found.extend(_public_functions(tree, path.relative_to(ROOT.parent)))
    return found


def test_every_public_function_has_a_return_annotation():
    functions = public_functions()
    names = {label.split(" ", 1)[1] for label, _node in functions}
    # positive control: the walk finds the packages' functions, methods of public classes too
    assert len(functions) > 700
    assert {"count_tokens", "CompactionResult.as_dict", "LLMClient.chat",
            "MessageArchive.records", "run_pre_compaction_extraction", "reset_memory",
            "TickHandler.run", "HearingHandler.observe", "CmdAIHistory.func", "find_npc",
            "NPCDetailAPI.get", "usage_chart_svg"} <= names
    assert not any(name.rsplit(".", 1)[-1].startswith("_") for name in names)
    missing = [label for label, node in functions if node.returns is None]
    assert not missing, "public functions without a return annotation:\n" + "\n".join(missing)


def test_the_walk_reports_a_function_without_one():
    tree = ast.parse("def shown(x) -> str:\n    return x\n\ndef bare(x):\n    return x\n\n"
                     "class Box:\n    def open(self):\n        pass\n    def _hidden(self):\n"
                     "        pass\n\nclass _Private:\n    def open(self):\n        pass\n")
    found = _public_functions(tree, "m.py")
    assert [label for label, _node in found] == ["m.py:1 shown", "m.py:4 bare", "m.py:8 Box.open"]
    assert [label for label, node in found if node.returns is None] == ["m.py:4 bare",
                                                                       "m.py:8 Box.open"]


#: The public functions outside ``web/`` whose return holds an open ``dict[str, Any]``, each for
#: its reason: a record's stored form (the record's class declares its fields; the compaction
#: log's events, a fidelity verdict), a request body or JSON schema in the OpenAI chat format,
#: or a dict in Mem0's own format. Every other function returns a declared record (a dataclass
#: or a ``TypedDict``), a ``Message`` or ``ChatMessage``, or a mapping whose keys and values are
#: typed (``dict[str, int]``), and so do the lists, tuples and iterators it returns.
OPEN_DICTS = {
    # stored forms
    "CompactionResult.as_dict", "failure_event", "recovered_event", "Fidelity.as_dict",
    "ExtractionResult.as_dict", "ConsolidationResult.as_dict", "StepResult.as_dict",
    "SleepResults.as_dict", "appended_log", "guard_summary", "extract_instead",
    # the OpenAI chat format
    "tool_schemas", "LLMClient.explicit_sampling", "LLMClient.request_fields", "LLMClient.build_payload",
    "structured_schema", "structured_response_format", "sampling_fields", "standard_only",
    # Mem0's formats
    "memory_config", "build_mem0_config", "entry_metadata", "scope_filters",
}


def _dict_kinds(annotation):
    """``(bare, open)`` of a return annotation's AST, nested types included: whether a bare
    ``dict`` (``dict``, ``Dict``, ``typing.Dict``, unsubscripted, anywhere: ``list[dict]``,
    ``tuple[dict, int]``) or an open ``dict[str, Any]`` occurs in it."""
    subscripted = {id(node.value) for node in ast.walk(annotation)
                   if isinstance(node, ast.Subscript)}
    bare = is_open = False
    for node in ast.walk(annotation):
        name = ast.unparse(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if name in {"dict", "Dict", "typing.Dict"} and id(node) not in subscripted:
            bare = True
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) in {"dict", "Dict"}:
            key_value = ast.unparse(node.slice).replace(" ", "").strip("()")
            is_open = is_open or key_value.endswith(",Any")
    return bare, is_open


def bare_dicts(functions, open_dicts=frozenset()):
    """The labels of ``functions`` (``(label, node)``) whose return annotation holds a bare
    ``dict`` anywhere (``dict``, ``dict | None``, ``Optional[dict]``, ``Dict``,
    ``list[dict]``), or an open ``dict[str, Any]`` (``dict[str, dict[str, Any]]``,
    ``list[dict[str, Any]]`` too) not named in ``open_dicts``."""
    found = []
    for label, node in functions:
        if node.returns is None:
            continue
        bare, is_open = _dict_kinds(node.returns)
        if bare or (is_open and label.split(" ", 1)[1] not in open_dicts):
            found.append(label)
    return found


def test_no_public_function_outside_the_web_views_returns_a_bare_dict():
    functions = [(label, node) for label, node in public_functions()
                 if not label.startswith("ai_contrib/web/")]
    names = {label.split(" ", 1)[1] for label, _node in functions}
    stale = sorted(OPEN_DICTS - names)
    assert not stale, f"OPEN_DICTS names functions that are gone: {stale}"
    # positive control: the web views, JSON at the boundary, are still bare dicts and are seen
    web = [(label, node) for label, node in public_functions()
           if label.startswith("ai_contrib/web/")]
    assert any("npc_detail" in label for label in bare_dicts(web))
    found = bare_dicts(functions, OPEN_DICTS)
    assert not found, "public functions returning a bare dict:\n" + "\n".join(found)


def test_the_bare_dict_check_sees_each_spelling():
    tree = ast.parse("def a() -> dict:\n    pass\n\ndef b() -> dict | None:\n    pass\n\n"
                     "def c() -> Optional[dict]:\n    pass\n\ndef d() -> dict[str, Any]:\n"
                     "    pass\n\ndef e() -> dict[str, int]:\n    pass\n\n"
                     "def f() -> Message | None:\n    pass\n\ndef g() -> dict[str, Any]:\n"
                     "    pass\n\ndef h() -> list[dict]:\n    pass\n\n"
                     "def i() -> tuple[int, dict[str, Any]]:\n    pass\n\n"
                     "def j() -> list[Message]:\n    pass\n\n"
                     "def k() -> dict[str, list[Pin]]:\n    pass\n")
    found = _public_functions(tree, "m.py")
    assert bare_dicts(found, {"g"}) == ["m.py:1 a", "m.py:4 b", "m.py:7 c", "m.py:10 d",
                                        "m.py:22 h", "m.py:25 i"]
