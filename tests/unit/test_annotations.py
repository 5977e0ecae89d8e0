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
