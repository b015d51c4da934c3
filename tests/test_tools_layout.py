"""The layout of ``tools/``, checked on the sources (fast: nothing is imported or executed).

Import directions (one way only):

* the hand-written runtime (``tools/*.py`` and ``tools/chain/``) never imports the generated ``tools.lessons``:
  a lesson's function reaches the runtime as an argument (``run_online_experiment(train_fn, ..., verify=...)``).
  The generated lessons may import the runtime, and the entry points (``tools/cli/``, ``benchmarks/``) are the
  composition roots that import both and hand the lessons' functions to the runtime;
* the grader (``autograde/``) never imports the build chain ``tools.chain``.

The module map of ``tools/__init__.py`` names every module of ``tools/`` and nothing that is not there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"

# Known offenders, each with the reason it is still here. Empty these as the work lands; an entry that no longer
# offends fails the test too (so the list cannot go stale).
KNOWN_RUNTIME_IMPORTS_OF_LESSONS = {
    # nb06's update step scores with nb04's verifier and normalises with nb01's advantages; the notebook
    # (solutions/nb06_real_model_grpo.py) calls gx.build_candidate_set and gx.group_advantages without passing
    # them in.
    "tools/experiment/candidates.py",
}
KNOWN_GRADER_IMPORTS_OF_CHAIN: set[str] = set()  # the sample class's builder (fixtures) is not the grader


def imported_modules(path: Path, package: tuple[str, ...] | None = None) -> set[str]:
    """Every module ``path`` imports: ``import x.y``, ``from x.y import z`` (also as ``x.y.z``, since ``z`` may be
    a module), relative imports resolved against the file's package, and ``importlib.import_module("x.y")`` /
    ``__import__("x.y")`` with a literal name. Imports inside functions count as much as top-level ones."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if package is None:
        package = path.relative_to(ROOT).with_suffix("").parts[:-1] if path.is_relative_to(ROOT) else ()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def offenders(files, forbidden: str) -> set[str]:
    """The files (relative to the root) that import ``forbidden`` or a module inside it."""
    bad = set()
    for path in files:
        if any(m == forbidden or m.startswith(forbidden + ".") for m in imported_modules(path)):
            bad.add(path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path))
    return bad


def runtime_files() -> list[Path]:
    """The hand-written runtime: ``tools/**.py`` less the generated lessons and the command-line entry points."""
    return sorted(p for p in TOOLS.rglob("*.py") if p.relative_to(TOOLS).parts[0] not in ("lessons", "cli"))


def grader_files() -> list[Path]:
    return sorted(p for p in (ROOT / "autograde").rglob("*.py") if "sample_class" not in p.parts)


def test_the_runtime_never_imports_the_generated_lessons():
    files = runtime_files()
    assert len(files) >= 15 and TOOLS / "online_grpo.py" in files and TOOLS / "chain" / "saved.py" in files
    found = offenders(files, "tools.lessons")
    assert found - KNOWN_RUNTIME_IMPORTS_OF_LESSONS == set(), (
        "the runtime imports the generated tools.lessons (pass the lesson's function in as an argument instead): "
        f"{sorted(found - KNOWN_RUNTIME_IMPORTS_OF_LESSONS)}"
    )
    assert KNOWN_RUNTIME_IMPORTS_OF_LESSONS <= found, (
        f"no longer offending, remove from the allow-list: {sorted(KNOWN_RUNTIME_IMPORTS_OF_LESSONS - found)}"
    )


def test_the_grader_never_imports_the_build_chain():
    files = grader_files()
    assert len(files) >= 20
    found = offenders(files, "tools.chain")
    assert found - KNOWN_GRADER_IMPORTS_OF_CHAIN == set(), (
        f"the grader imports the build chain tools.chain: {sorted(found - KNOWN_GRADER_IMPORTS_OF_CHAIN)}"
    )
    assert KNOWN_GRADER_IMPORTS_OF_CHAIN <= found, (
        f"no longer offending, remove from the allow-list: {sorted(KNOWN_GRADER_IMPORTS_OF_CHAIN - found)}"
    )


def test_the_import_check_finds_every_form_of_import(tmp_path):
    """The checks above can fail: each way of importing a lesson is found, a docstring that names one is not."""
    forms = [
        "from tools.lessons.nb04_verifiable_rewards import verify_integer_response",
        "import tools.lessons.nb01_group_advantages as nb01",
        "from tools.lessons import nb01_group_advantages",
        "from tools import lessons",
        "def f():\n    import importlib\n    return importlib.import_module('tools.lessons.nb07_online_grpo')",
    ]
    for i, form in enumerate(forms):
        path = tmp_path / f"form{i}.py"
        path.write_text(form + "\n", encoding="utf-8")
        assert offenders([path], "tools.lessons") == {str(path)}, form
    clean = tmp_path / "clean.py"
    clean.write_text('"""Uses tools.lessons.nb01 (from tools.lessons import x)."""\nimport tools.online_grpo\n')
    assert offenders([clean], "tools.lessons") == set()
    # Relative imports resolve against the file's package (here: as if the file were in tools/chain/).
    relative = tmp_path / "relative.py"
    relative.write_text("from ..lessons import nb01_group_advantages\n", encoding="utf-8")
    assert "tools.lessons.nb01_group_advantages" in imported_modules(relative, package=("tools", "chain"))


# ------------------------------------------------------------------------------------------- the module map
MAP_ENTRY = re.compile(r"^``(tools\.[\w.<>]+)``", re.M)


def module_names() -> set[str]:
    """Every module and sub-package of ``tools/`` by dotted name; the generated lessons as one entry."""
    names = set()
    for path in TOOLS.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        if parts[1] == "lessons":
            names.add("tools.lessons.<assignment>")
            continue
        names.add(".".join(parts))
    if (TOOLS / "schemas").is_dir():
        names.add("tools.schemas")
    return names


def map_gaps(doc: str, modules: set[str]) -> tuple[set[str], set[str]]:
    """(modules the map omits, map entries that name no module)."""
    listed = set(MAP_ENTRY.findall(doc))
    return modules - listed, listed - modules


def test_the_module_map_of_tools_is_complete():
    import tools

    missing, stale = map_gaps(tools.__doc__, module_names())
    assert not missing, f"tools/__init__.py's module map omits {sorted(missing)}"
    assert not stale, f"tools/__init__.py's module map names modules that do not exist: {sorted(stale)}"


def test_the_module_map_check_finds_an_omission():
    import tools

    doc = tools.__doc__
    assert "``tools.online_grpo``" in doc
    without = "\n".join(line for line in doc.splitlines() if not line.startswith("``tools.online_grpo``"))
    assert map_gaps(without, module_names())[0] == {"tools.online_grpo"}
    assert map_gaps(doc + "\n``tools.gone``  a module that was removed\n", module_names())[1] == {"tools.gone"}


def format_exclusions(pyproject: str) -> list[str]:
    import tomllib

    return tomllib.loads(pyproject)["tool"]["ruff"]["format"].get("exclude", [])


def test_the_formatter_covers_the_whole_tree_but_the_lesson_sources_and_fixtures():
    """`make lint` runs `ruff format --check`: only the jupytext lesson sources, the chain's fixtures and Markdown
    stay out of it (pyproject.toml says why); any other exclusion fails here."""
    allowed = {"solutions/*", "tests/fixtures/*", "*.md"}
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert set(format_exclusions(text)) <= allowed
    widened = text.replace('exclude = ["solutions/*"', 'exclude = ["tools/grading.py", "solutions/*"')
    assert set(format_exclusions(widened)) - allowed == {"tools/grading.py"}  # the check can fail
