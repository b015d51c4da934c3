"""A codebase a maintainer can read in an afternoon, checked on the sources (nothing is imported or executed):
no hand-written module over ``MAX_MODULE_LINES``, no import cycle among the course's own modules, and no comment
or document that points outside the repository (an issue number, a branch, a "round"). Each check has a
meta-test that shows it can fail."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_tools_layout import imported_modules

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
PACKAGES = ("tools", "autograde", "benchmarks", "tests")


def hand_written_modules() -> list[Path]:
    """Every Python file a maintainer edits: ``tools/`` less the generated lessons, ``autograde/`` less the sample
    class's submissions and cases (learners' code), ``benchmarks/``, ``tests/``. The lesson sources ``solutions/``
    are notebooks in jupytext form, not modules."""
    files = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "lessons" in parts[:2] or "sample_class" in parts or "node_modules" in parts:
                continue
            files.append(path)
    return files


def too_long(files: list[Path], limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    out = {}
    for path in files:
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            out[path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)] = count
    return out


def test_no_hand_written_module_is_longer_than_the_limit():
    files = hand_written_modules()
    assert len(files) > 80 and ROOT / "tools" / "grading.py" in files
    assert not any("lessons" in p.relative_to(ROOT).parts[:2] for p in files)
    found = too_long(files)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them along their ideas): {found}"


def test_the_length_check_finds_a_long_module(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    assert too_long([long, short]) == {str(long): MAX_MODULE_LINES + 1}


# ------------------------------------------------------------------------------------------- import cycles
def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """{module: the course modules it imports}, every import counted (top level or inside a function: a lazy
    import is still a dependency). ``from package import name`` is an edge to ``package.name`` where that is a
    module, else to the package; the package a module lives in is not an edge of its own."""
    names = {module_name(p, root): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for imported in imported_modules(path, tuple(package)):
            if imported in names:
                edges.add(imported)
        # ``from a.b import c``: imported_modules gives both a.b and a.b.c; keep a.b only where c is not a module
        for imported in list(edges):
            children = {e for e in edges if e.startswith(imported + ".")}
            if children and all(c.rsplit(".", 1)[0] == imported for c in children) and imported in names:
                if names[imported].name == "__init__.py" and _only_submodules(path, imported, children):
                    edges.discard(imported)
        edges.discard(name)
        graph[name] = edges
    return graph


def _only_submodules(path: Path, package: str, children: set[str]) -> bool:
    """Whether every ``from package import ...`` in ``path`` names submodules only (then the edge to the package's
    ``__init__`` is implied by the submodule, not a dependency of its own)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package and node.level == 0:
            if any(f"{package}.{alias.name}" not in children for alias in node.names):
                return False
        if isinstance(node, ast.Import) and any(alias.name == package for alias in node.names):
            return False
    return True


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
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
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_course_modules():
    files = [p for p in hand_written_modules() if p.relative_to(ROOT).parts[0] != "tests"]
    graph = import_graph(files)
    assert len(graph) > 60 and graph.get("tools.cli.testrun")
    found = cycles(graph)
    assert not found, "import cycles (let the lower module not import the higher one): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_the_cycle_check_finds_a_lazy_cycle(tmp_path):
    """A cycle closed by an import inside a function (the lazy form) is found; a one-way chain is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("from pkg import b\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import thing\n    return thing\n", encoding="utf-8")
    (pkg / "c.py").write_text("import pkg.b\n", encoding="utf-8")
    files = sorted(pkg.rglob("*.py"))
    assert cycles(import_graph(files, tmp_path)) == [["pkg.a", "pkg.b"]]
    (pkg / "b.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    assert cycles(import_graph(files, tmp_path)) == []


# ------------------------------------------------------------------------------------------- pointers outside
OUTSIDE = re.compile(
    r"\bissues?\s*#?\d+|\bopen item \d+|\bthis round\b|\banother branch\b|\bon (?:the )?branch\b|\bbranch `[^`]+`",
    re.I,
)


def text_files() -> list[Path]:
    """The hand-written text a maintainer reads: the modules above, the lesson sources, Markdown, the Makefile, the
    CI and recipe scripts, the sample class's case descriptions and expectations."""
    files = hand_written_modules() + sorted(ROOT.glob("solutions/*.py"))
    files += [p for p in ROOT.rglob("*.md") if not {".venv", "node_modules", ".cache"} & set(p.parts)]
    files += [ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "course.toml"]
    files += sorted((ROOT / "autograde" / "sample_class" / "cases").glob("*.py"))
    files += [ROOT / "autograde" / "sample_class" / "expected.json"]
    files += sorted((ROOT / "autograde").rglob("*.sh")) + sorted((ROOT / "tools").rglob("*.sh"))
    return [p for p in files if p.is_file() and "submitted" not in p.parts]


def outside_pointers(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = OUTSIDE.search(line)
            if match:
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{shown}:{number}: {match.group(0)!r}")
    return found


def test_nothing_points_outside_the_repository():
    """A reader of the repository cannot open an issue tracker, a branch or a session: comments, docstrings and
    documents say what they mean instead of "issue 25" or "being reworked on another branch"."""
    files = text_files()
    assert ROOT / "README.md" in files and ROOT / "tests" / "test_codebase.py" in files
    found = [f for f in outside_pointers(files) if not f.startswith("tests/test_codebase.py")]
    assert not found, "pointers outside the repository:\n" + "\n".join(found)


def test_the_pointer_check_finds_each_form(tmp_path):
    for text in (
        "# see issue 27",
        "x = 1  # Issue #3",
        "(README open item 12)",
        "done this round",
        "being reworked on another branch",
        "measured on branch `sandbox`",
        "issues 25 and 26",
    ):
        path = tmp_path / "f.py"
        path.write_text(text + "\n", encoding="utf-8")
        assert outside_pointers([path]), text
    path = tmp_path / "g.py"
    path.write_text("# the issue is that NaN passes\n# a tissue 3\n", encoding="utf-8")
    assert outside_pointers([path]) == []
