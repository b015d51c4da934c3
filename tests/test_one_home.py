"""One home per function, checked on the sources: no function body is written twice across the lessons'
solutions, ``tools/``, ``benchmarks/`` and the grader, no tuple of names (loss types, run modes, record keys) is
written out in two files, and the hidden tests take their references and random
batches from the grader's oracle modules (a trusted place: a grading kernel cannot import them) instead of
carrying copies of their own.

Left out: ``tools/lessons/`` (generated from the solutions' ``#@save`` cells; ``make check-release`` keeps it
equal to them), ``autograde/sample_class/`` (learner submissions, broken on purpose) and the tests themselves."""

from __future__ import annotations

import ast
import collections
import importlib
import re
from pathlib import Path

import tools.chain.notebooks as chain

ROOT = chain.ROOT
MIN_LINES = 3  # a body shorter than this (a one-line wrapper, a plain `return x`) is not counted as a copy
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)
ORACLE_IMPORT = re.compile(r"^from (autograde\.grpo_grader\.oracles\.\w+) import (.+)$", re.M)


def _sources() -> list[Path]:
    files = sorted(ROOT.glob("solutions/*.py")) + sorted(ROOT.glob("benchmarks/*.py"))
    files += sorted(p for p in ROOT.glob("tools/**/*.py") if "lessons" not in p.relative_to(ROOT / "tools").parts)
    files += sorted(p for p in ROOT.glob("autograde/**/*.py") if "sample_class" not in p.parts)
    return files


def _bodies(path: Path):
    """(normalised body, function name, line) of every function in ``path``, its docstring left out."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]
        if sum(len(ast.unparse(statement).splitlines()) for statement in body) >= MIN_LINES:
            yield ast.dump(ast.Module(body=body, type_ignores=[])), node.name, node.lineno


def duplicated_bodies(files: list[Path]) -> list[list[str]]:
    """Groups of places (``path:line name``) whose function bodies are the same statements (names of the
    functions and their docstrings aside)."""
    places = collections.defaultdict(list)
    for path in files:
        for body, name, line in _bodies(path):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            places[body].append(f"{shown}:{line} {name}")
    return [where for where in places.values() if len(where) > 1]


def test_no_function_body_is_written_twice():
    files = _sources()
    assert len(files) > 40 and any(p.parent.name == "solutions" for p in files)
    copies = duplicated_bodies(files)
    assert not copies, "the same function body in several places (keep one, import it):\n" + "\n".join(
        " == ".join(group) for group in copies
    )


def test_the_duplicate_check_finds_a_copied_body(tmp_path):
    """The check above can fail: the grader's reference pasted into another file, renamed, is found."""
    oracle = (ROOT / "autograde/grpo_grader/oracles/nb01_group_advantages.py").read_text(encoding="utf-8")
    start = oracle.index("def course_advantages(")
    copy = oracle[start : oracle.index("\n\n\n", start)].replace("def course_advantages(", "def _h_reference(")
    pasted = tmp_path / "pasted.py"
    pasted.write_text("import math\n\nimport torch\n\n\n" + copy + "\n", encoding="utf-8")
    copies = duplicated_bodies(_sources() + [pasted])
    assert any(
        any("pasted.py" in place and "_h_reference" in place for place in group)
        and any("course_advantages" in place for place in group)
        for group in copies
    ), copies


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")  # an identifier, a key, a file name: not prose, not test data
MIN_NAMES = 3  # a pair ("x", "y") is too common to mean a shared constant
# Known copies of a tuple of names, each with the reason it is still here. The coordinator empties this as the
# grader work lands (the grader may import a runtime constant from tools/, it may not import tools.lessons); an
# entry that is no longer copied fails the test, so the list cannot go stale.
KNOWN_REPEATED_NAMES = {
    # The grader's oracles restate what the lessons' visible tests check (grader package, rewritten elsewhere):
    ("A", "B", "C", "D"),  # nb03a's multiple-choice letters
    ("correctness", "format_pass", "parsed_answer", "status", "total_reward", "verifier_id"),  # nb04 record keys
    ("correctness", "format_pass", "total_reward"),  # nb04 record keys
    ("holes", "left", "none", "right"),  # nb05's padding cases
    ("approx_kl", "clip_ratio_high", "clip_ratio_low", "entropy", "grad_norm", "kl_ref", "loss", "losses"),  # nb07
    ("approx_kl", "clip_ratio_high", "clip_ratio_low", "entropy", "grad_norm", "kl_ref", "loss"),  # grpo_step metrics
}


def repeated_names(files: list[Path]) -> dict[tuple[str, ...], list[str]]:
    """Tuples, lists and sets of at least MIN_NAMES string literals that all look like names, written in more than
    one file: {the names, sorted (another order is the same constant): [path:line, ...]}."""
    places = collections.defaultdict(list)
    for path in files:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < MIN_NAMES:
                continue
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if all(isinstance(v, str) and NAME.fullmatch(v) for v in values):
                places[tuple(sorted(set(values)))].append(f"{shown}:{node.lineno}")
    return {names: where for names, where in places.items() if len({w.rsplit(":", 1)[0] for w in where}) > 1}


def test_no_tuple_of_names_is_written_in_two_files():
    repeated = repeated_names(_sources())
    new = {names: where for names, where in repeated.items() if names not in KNOWN_REPEATED_NAMES}
    assert not new, "the same names written out in several files (define them once, import them):\n" + "\n".join(
        f"{names}: {' == '.join(where)}" for names, where in new.items()
    )
    gone = KNOWN_REPEATED_NAMES - set(repeated)
    assert not gone, f"no longer repeated, remove from KNOWN_REPEATED_NAMES: {sorted(gone)}"


def test_the_repeated_names_check_finds_a_copied_tuple(tmp_path):
    """The check above can fail: the loss types written out again, in another order, are found; prose and a
    tuple built from the home are not."""
    copied = tmp_path / "copied.py"
    copied.write_text('MY_LOSSES = ["dapo", "grpo", "cispo", "dr_grpo", "bnpo"]\n', encoding="utf-8")
    clean = tmp_path / "clean.py"
    clean.write_text(
        "from tools.loss_types import LOSS_TYPES\nOURS = (*LOSS_TYPES,)\nWORDS = ('I do not know.', '4', 'x y')\n",
        encoding="utf-8",
    )
    home = ROOT / "tools" / "loss_types.py"
    found = repeated_names([home, copied, clean])
    assert list(found) == [("bnpo", "cispo", "dapo", "dr_grpo", "grpo")], found
    assert any("copied.py" in place for place in found[("bnpo", "cispo", "dapo", "dr_grpo", "grpo")])
    assert repeated_names([home, clean]) == {}


def test_hidden_tests_import_the_graders_references_and_define_no_copies():
    """Every name a lesson's hidden tests import from an oracle module is defined there and used by the grader
    itself (so the notebook's hidden test and the oracle check against one reference), such imports stand only
    inside hidden tests (a learner's notebook never imports the grader), and no lesson defines its own copy."""
    imported = 0
    for path in sorted(ROOT.glob("solutions/*.py")):
        source = path.read_text(encoding="utf-8")
        hidden = "\n".join(HIDDEN.findall(source))
        visible = HIDDEN.sub("", source)
        assert not ORACLE_IMPORT.search(visible), f"{path.name}: an oracle import outside the hidden tests"
        assert not re.search(r"^\s*(from|import) autograde\b", visible, re.M), f"{path.name}: imports the grader"
        for module_name, names in ORACLE_IMPORT.findall(hidden):
            module = importlib.import_module(module_name)
            package = Path(module.__file__).parent
            grader = "\n".join(p.read_text(encoding="utf-8") for p in sorted(package.glob("*.py")))
            for item in names.split(","):
                name, _, alias = item.strip().partition(" as ")
                assert callable(getattr(module, name, None)), f"{path.name}: {module_name}.{name} is not a function"
                assert len(re.findall(rf"\b{name}\(", grader)) >= 2, f"{path.name}: the grader never calls {name}"
                alias = alias or name
                assert f"def {alias}(" not in source, f"{path.name}: defines {alias} besides importing it"
                imported += 1
    assert imported >= 6, "the hidden tests of lessons 1, 2, 3a, 3b and 7 take their references from the grader"
