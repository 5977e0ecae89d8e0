"""
The documentation holds together: every ``docs/design.md`` section the code and the docs cite
exists, every relative link in the Markdown files leads to a file that exists, README.md
stays a README (its two commands first, at most 250 lines; the manual lives in ``docs/``), the
package docstring lists every command, and the module map names every module and no other.
"""

import re
from pathlib import Path

from tests.support.paths import ROOT

DESIGN = ROOT / "docs" / "design.md"

#: ``docs/design.md``, "A", "B" or (docs/design.md, "A") -> the quoted titles
_CITATION = re.compile(r"docs/design\.md`{0,2}\)?,\s*((?:\"[^\"]{2,80}\"(?:,\s*|\s+and\s+)?)+)")
_TITLE = re.compile(r"\"([^\"]+)\"")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


#: a paragraph's bold lead, ``**Sleep phase.** In order: ...``, is a section of its own
_LEAD = re.compile(r"^\*\*([^*]+?)\.\*\*")


def _headings():
    """The titles of ``docs/design.md``: its Markdown headings and its paragraphs' bold leads."""
    titles = set()
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            titles.add(line.lstrip("#").strip())
        elif _LEAD.match(line):
            titles.add(_LEAD.match(line).group(1))
    return titles


def _cited_titles(text):
    flat = re.sub(r"\s+", " ", text.replace("#:", " ").replace("# ", " "))
    for match in _CITATION.finditer(flat):
        for title in _TITLE.findall(match.group(1)):
            yield title


def _sources():
    for folder in ("ai_contrib", "tests", "benchmarks", "docs", "scripts", "game_template"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md", ".sh", ".html") and path != Path(__file__):
                yield path
    yield ROOT / "README.md"


def test_every_cited_design_section_exists():
    headings = _headings()
    cited, missing = 0, []
    for path in _sources():
        for title in _cited_titles(path.read_text(encoding="utf-8", errors="replace")):
            cited += 1
            if title not in headings and title != "<section>":  # how to cite, in design.md
                missing.append(f"{path.relative_to(ROOT)}: {title!r}")
    assert cited > 100, cited  # the pattern finds the citations at all
    assert not missing, "\n".join(missing)


def test_a_missing_section_is_found():
    text = 'see (``docs/design.md``, "Summary compaction", "Sleep phase", "No Such Section")'
    assert list(_cited_titles(text)) == ["Summary compaction", "Sleep phase", "No Such Section"]
    headings = _headings()
    assert "Summary compaction" in headings and "Sleep phase" in headings  # heading, bold lead
    assert "No Such Section" not in headings


def test_relative_links_lead_somewhere():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "benchmarks" / "README.md"]
    links, broken = 0, []
    for page in pages:
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            links += 1
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert links > 10, links
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_readme():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    commands = [line.split("#")[0].strip() for line in lines[:12] if line.startswith("make ")]
    assert commands[:2] == ["make demo", "make test"], commands


_COMMAND_KEY = re.compile(r'^\s+key = "(\w+)"', re.M)


def _command_keys(text):
    """The ``key = "..."`` of every class in a module's source (a cmdset's key included)."""
    return set(_COMMAND_KEY.findall(text))


def test_package_docstring_lists_every_command():
    package = ROOT / "ai_contrib"
    sources = [package / "commands.py", *sorted((package / "admin").glob("*.py"))]
    keys = set().union(*(_command_keys(p.read_text()) for p in sources)) - {"ai_contrib"}
    keys.add("destroy")  # the admin destroy inherits Evennia's key
    doc = (package / "__init__.py").read_text().split('"""')[1]
    # positive control: the scan finds a planted key, and the list is not empty
    assert _command_keys('class C:\n    key = "planted"\n') == {"planted"}
    assert {"talk", "aiforget", "aigossip"} <= keys
    missing = sorted(k for k in keys if f"``{k}``" not in doc)
    assert not missing, f"ai_contrib/__init__.py does not list: {missing}"


#: a folder's paragraph of the module map: ``**`npc/`**, the services...`` (no folder: the
#: package's top level, "The Evennia faces")
_MAP_FOLDER = re.compile(r"`(\w+)/`")


def _module_map(text):
    """``{folder: set of module file names}`` named in ``docs/design.md``'s "Module map", one
    entry per bold-led paragraph (``""``: the package's top level)."""
    section = text.split("\n## Module map\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"\n\*\*(.+?)\*\*", section)
    named = {}
    for head, body in zip(parts[1::2], parts[2::2]):
        folder = _MAP_FOLDER.match(head)
        named[folder.group(1) if folder else ""] = set(re.findall(r"`(\w+\.py)`", head + body))
    return named


def test_the_module_map_names_every_module_and_no_other():
    package = ROOT / "ai_contrib"
    named = _module_map(DESIGN.read_text(encoding="utf-8"))
    modules = {folder: {p.name for p in (package / folder).glob("*.py") if p.name != "__init__.py"}
               for folder in named}
    everywhere = {p.name for p in package.rglob("*.py")}
    # positive controls: the parse finds the folders and their modules, and a map that leaves
    # a module out or names one that is gone is seen
    packages = {p.parent.name for p in package.glob("*/__init__.py")}
    assert {"npc", "admin", "core", "llm", "memory", "web"} <= packages
    # every sub-package has its paragraph (a new one with none would go unseen otherwise)
    assert packages | {""} == set(named), sorted((packages | {""}) ^ set(named))
    listed = set().union(*named.values())
    assert {"typeclasses.py", "ticking.py", "tick.py", "mem0_store.py"} <= listed
    planted = _module_map("\n## Module map\n\n**`core/`**, x:\n\n- `gone.py`: y\n\n## Next\n")
    assert planted == {"core": {"gone.py"}}
    missing = {folder: sorted(modules[folder] - names) for folder, names in named.items()
               if modules[folder] - names}
    assert not missing, f"docs/design.md's module map leaves out: {missing}"
    # a module named in another folder's line (the faces' rag_memory.py re-exports npc/'s
    # memory_work.py) must exist somewhere in the package
    stale = sorted(listed - everywhere)
    assert not stale, f"docs/design.md's module map names modules that do not exist: {stale}"
