"""
The package's imports run one way (``docs/design.md``, "Overview"): the Evennia faces
(``commands``, ``typeclasses``, ``rag_memory``...) above ``admin/`` and ``npc/``, above
``memory/`` and ``llm/``, above ``core/``. Read from the source with
``ast`` (module-level and function-level imports alike, nothing is imported):

- no import circle among the modules of ``ai_contrib``;
- ``ai_contrib.core`` imports no other module of ``ai_contrib`` and no Evennia, Twisted or Django;
- ``ai_contrib.memory`` and ``ai_contrib.llm`` import only ``core``, ``memory``, ``llm`` and
  ``ai_contrib.settings`` of the package (no arrow up into the shell);
- ``ai_contrib.npc`` (the services acting on one NPC) imports ``core``, ``memory``, ``llm``,
  ``settings``, itself and, of the Evennia faces, only ``lore`` (the lore Script, whose
  typeclass path games store): never ``rag_memory`` (the memory work is ``npc/``'s own, the
  face re-exports it), ``admin``, ``web``, ``typeclasses``, ``commands`` or ``startup``;
- ``ai_contrib.admin`` (what admins see) imports anything below ``commands``: not ``commands``,
  ``web``, ``startup`` or ``rag_memory`` (a re-export of ``npc/``'s memory work: admin/ imports
  it where it lives); it reads the NPC classes of ``typeclasses`` to find and show NPCs.
"""

import ast

from tests.support.paths import ROOT as CHECKOUT

PACKAGE = "ai_contrib"
ROOT = CHECKOUT / PACKAGE
#: top-level packages the pure core must not import
FRAMEWORKS = ("evennia", "twisted", "django")
#: what memory/ and llm/ may import of the package
LOW_LAYERS = ("ai_contrib.core", "ai_contrib.memory", "ai_contrib.llm", "ai_contrib.settings")
#: what npc/ may import of the package
NPC_MAY_IMPORT = LOW_LAYERS + ("ai_contrib.npc", "ai_contrib.lore")
#: what admin/ must not import of the package
ADMIN_MUST_NOT_IMPORT = ("ai_contrib.commands", "ai_contrib.web", "ai_contrib.startup",
                         "ai_contrib.rag_memory")


def _modules():
    """``{dotted name: path}`` of every module of the package (``pkg/__init__.py`` is ``pkg``)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _within(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


def _imports(module):
    """
    Every import in ``module``'s source, wherever it stands.

    Returns:
        list[tuple[str, int]]: ``(dotted name, line)``; ``from a import b`` gives ``a.b`` where
        ``b`` is a module of the package, else ``a``. Relative imports are made absolute.
    """
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            submodules = [f"{source}.{alias.name}" for alias in node.names
                          if f"{source}.{alias.name}" in MODULES]
            if len(submodules) < len(node.names):
                found.append((source, node.lineno))
            found.extend((name, node.lineno) for name in submodules)
    return found


def _target(name):
    """The package module an imported name lands in (its longest known prefix), else None."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph():
    """``{module: {imported module: first line}}`` over the package's own modules."""
    graph = {}
    for module in MODULES:
        edges = graph.setdefault(module, {})
        for name, line in _imports(module):
            target = _target(name)
            if target and target != module:
                edges.setdefault(target, line)
    return graph


def import_circles(graph):
    """
    The import circles of ``graph``: its strongly connected components of more than one module
    (Tarjan's algorithm), each as a sorted list, the list sorted.
    """
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def _describe(graph, circle):
    members = set(circle)
    return "; ".join(f"{a} -> {b} (line {line})" for a in circle
                     for b, line in sorted(graph[a].items()) if b in members)


def test_the_walker_sees_the_package():
    graph = import_graph()
    assert "ai_contrib.core.tokens" in graph and "ai_contrib.typeclasses" in graph
    assert "ai_contrib.rag_memory" in graph["ai_contrib.typeclasses"]  # function-level import


def test_circles_are_found():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}}
    assert import_circles(graph) == [["a", "b", "c"]]


def test_no_import_circle():
    graph = import_graph()
    circles = import_circles(graph)
    assert not circles, "import circles:\n" + "\n".join(
        f"{' <-> '.join(c)}: {_describe(graph, c)}" for c in circles)


def test_the_core_imports_nothing_above_it():
    wrong = []
    for module in MODULES:
        if not _within(module, "ai_contrib.core"):
            continue
        for name, line in _imports(module):
            top = name.split(".")[0]
            if top in FRAMEWORKS or (
                    top == PACKAGE and not _within(_target(name) or name, "ai_contrib.core")):
                wrong.append(f"{module}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def _breaches(folders, allowed=None, forbidden=()):
    """
    The imports of the modules under ``folders`` that break a folder's rule: a package module
    outside ``allowed`` (when given) or inside ``forbidden``.

    Returns:
        list[str]: ``"module:line imports target"``, one per breach.
    """
    wrong = []
    for module in MODULES:
        if not any(_within(module, folder) for folder in folders):
            continue
        for name, line in _imports(module):
            target = _target(name)
            if not target:
                continue
            outside = allowed is not None and not any(_within(target, ok) for ok in allowed)
            if outside or any(_within(target, bad) for bad in forbidden):
                wrong.append(f"{module}:{line} imports {target}")
    return wrong


def test_memory_and_llm_import_nothing_of_the_shell():
    folders = ("ai_contrib.memory", "ai_contrib.llm")
    # positive control: with only core/ allowed, their imports of each other are seen
    assert _breaches(folders, allowed=("ai_contrib.core",))
    wrong = _breaches(folders, allowed=LOW_LAYERS)
    assert not wrong, "\n".join(wrong)


def test_npc_services_import_no_admin_web_or_face_above_them():
    folders = ("ai_contrib.npc",)
    # positive control: the rule sees npc/'s imports of memory/ and of the lore face
    assert any(b.endswith("imports ai_contrib.lore")
               for b in _breaches(folders, allowed=LOW_LAYERS + ("ai_contrib.npc",)))
    assert _breaches(folders, allowed=("ai_contrib.npc",))
    wrong = _breaches(folders, allowed=NPC_MAY_IMPORT)
    assert not wrong, "\n".join(wrong)


def test_admin_views_import_no_command_set_web_or_startup():
    folders = ("ai_contrib.admin",)
    # positive control: admin/'s own reads of npc/ and typeclasses are seen by the same walk
    assert _breaches(folders, forbidden=("ai_contrib.npc",))
    assert any(b.endswith("imports ai_contrib.typeclasses")
               for b in _breaches(folders, forbidden=("ai_contrib.typeclasses",)))
    wrong = _breaches(folders, forbidden=ADMIN_MUST_NOT_IMPORT)
    assert not wrong, "\n".join(wrong)


def test_the_command_set_is_what_the_admin_views_lie_below():
    # commands.py assembles admin/'s commands: the arrow runs from the face down, never back
    graph = import_graph()
    assert any(_within(target, "ai_contrib.admin") for target in graph["ai_contrib.commands"])
    assert not any(_within(target, "ai_contrib.commands")
                   for module, edges in graph.items() if _within(module, "ai_contrib.admin")
                   for target in edges)
