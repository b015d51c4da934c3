"""One home per function, checked on the sources: no function body is written twice across the lessons'
solutions, ``tools/``, ``benchmarks/`` and the grader, no tuple of names (loss types, run modes, record keys) is
written out in two files, and the hidden tests of the lessons are calls of their oracle's cases
(``oracles.run_in_kernel``) instead of checks of their own: one specification per check.

Left out: ``tools/lessons/`` (generated from the solutions' ``#@save`` cells; ``make check-release`` keeps it
equal to them), ``autograde/sample_class/`` (learner submissions, broken on purpose) and the tests themselves."""

from __future__ import annotations

import ast
import collections
import re
import subprocess
import sys
from pathlib import Path

import tools.chain.notebooks as chain

ROOT = chain.ROOT
MIN_LINES = 3  # a body shorter than this (a one-line wrapper, a plain `return x`) is not counted as a copy
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


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
    ("approx_kl", "clip_ratio_high", "clip_ratio_low", "entropy", "grad_norm", "kl_ref", "loss", "losses"),  # nb07
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


def hidden_block_problems(path: Path) -> list[str]:
    """Where the lesson source ``path`` keeps a check outside its oracle: a hidden-test region that is not exactly
    the call of the oracle's case runner for its own test cell, a graded test cell without that region, or a line
    that imports the grader outside the hidden tests (a learner's notebook never imports it)."""
    import jupytext

    problems = []
    assignment = path.stem
    visible = HIDDEN.sub("", path.read_text(encoding="utf-8"))
    if re.search(r"^\s*(from|import) autograde\b", visible, re.M):
        problems.append(f"{path.name}: imports the grader outside the hidden tests")
    for cell in jupytext.read(path, fmt="py:percent").cells:
        meta = cell.metadata.get("nbgrader", {})
        regions = HIDDEN.findall(cell.source)
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            if regions:
                problems.append(f"{path.name}: hidden tests outside a test cell")
            continue
        want = (
            "from autograde.grpo_grader.oracles import run_in_kernel\n\n"
            f'run_in_kernel("{assignment}", "{meta["grade_id"]}", globals())\n'
        )
        if regions != [want]:
            problems.append(
                f"{path.name} {meta['grade_id']}: the hidden tests are not the oracle's call {regions!r}"[:300]
            )
    return problems


def test_hidden_tests_are_the_oracles_cases():
    """One specification per check: the hidden-test region of every graded test cell of every
    lesson is one call of ``run_in_kernel`` for that very test cell (plain nbgrader then grades with the oracle's
    cases and verdicts), and no lesson writes a check of its own there."""
    sources = sorted(ROOT.glob("solutions/*.py"))
    problems = [problem for path in sources for problem in hidden_block_problems(path)]
    assert not problems, problems
    assert sum(source.read_text(encoding="utf-8").count("run_in_kernel(") for source in sources) >= 20


def test_a_hidden_test_written_by_hand_is_reported(tmp_path):
    """The check fails where it should: a hidden assertion of its own, a call for another cell, and a test cell
    without hidden tests are each reported."""
    lesson = ROOT / "solutions" / "nb03a_cispo_trace_lab.py"
    text = lesson.read_text(encoding="utf-8")
    call = 'run_in_kernel("nb03a_cispo_trace_lab", "test_q2", globals())\n'
    assert call in text
    for edited in (
        text.replace(call, call + "assert q2_flat_index == 6\n"),
        text.replace(call, call.replace("test_q2", "test_q3")),
        HIDDEN.sub("", text, count=1),
    ):
        copy = tmp_path / lesson.name
        copy.write_text(edited, encoding="utf-8")
        assert hidden_block_problems(copy), edited[:80]
    assert hidden_block_problems(lesson) == []


def graded_lessons() -> list[str]:
    """The lessons whose source has autograded test cells."""
    return sorted(p.stem for p in ROOT.glob("solutions/*.py") if '"grade": true, "grade_id": "test_' in p.read_text())


def lesson_places(lesson: str, lessons: list[str], cases: dict, expected: dict) -> list[str]:
    """Each place a graded lesson must appear in, and is missing from: its oracle module (``TESTS`` == the release's
    autograded test cells, ``CASE_SOURCES``), hidden tests that are the oracle's calls, the sample class's
    ``LESSONS`` (derived from the oracle modules), the cases s01-s04 and their rows in ``expected.json``."""
    import nbformat

    from autograde.grpo_grader import oracle as oracle_lib

    missing = []
    oracle = oracle_lib.load_oracle(lesson)
    if oracle is None:
        return [f"{lesson}: no oracle module autograde/grpo_grader/oracles/{lesson}.py"]
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    tests = {
        c.metadata["nbgrader"]["grade_id"]
        for c in release.cells
        if c.cell_type == "code"
        and c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
    }
    if set(oracle.tests) != tests:
        missing.append(f"{lesson}: oracle TESTS {sorted(oracle.tests)} != the release's test cells {sorted(tests)}")
    if not getattr(oracle.module, "CASE_SOURCES", None):
        missing.append(f"{lesson}: the oracle has no CASE_SOURCES")
    missing += hidden_block_problems(ROOT / "solutions" / f"{lesson}.py")
    if lesson not in lessons:
        missing.append(f"{lesson}: not in the sample class's LESSONS")
    for learner in (
        "s01_worked_answers",
        "s02_independent_answers",
        "s03_untouched",
        "s04_bug_only_hidden_tests_catch",
    ):
        if lesson not in cases.get(learner, {}):
            missing.append(f"{lesson}: no entry in the sample case {learner}")
        if lesson not in expected.get(learner, {}):
            missing.append(f"{lesson}: no row of {learner} in expected.json")
    return missing


def test_every_graded_lesson_is_in_each_of_its_places():
    """Adding a lesson touches its source, its oracle module and its sample-class rows: every lesson with
    autograded test cells has an oracle whose TESTS are the release's test cells, CASE_SOURCES, hidden tests that
    call the oracle, and rows in the sample class (whose LESSONS are the oracle modules)."""
    import json

    from autograde.sample_class import build as sample

    expected = json.loads(sample.EXPECTED.read_text(encoding="utf-8"))
    cases = sample.load_cases()
    lessons = graded_lessons()
    assert len(lessons) >= 7 and sample.LESSONS == lessons
    problems = [p for lesson in lessons for p in lesson_places(lesson, sample.LESSONS, cases, expected)]
    assert not problems, problems


def test_a_lesson_missing_from_a_place_is_reported():
    """The check fails where it should: a lesson left out of LESSONS, of a sample case and of expected.json, and
    a name without an oracle module, are each reported."""
    import json

    from autograde.sample_class import build as sample

    expected = json.loads(sample.EXPECTED.read_text(encoding="utf-8"))
    cases = sample.load_cases()
    lesson = "nb05_logprobs_masks"
    assert lesson_places(lesson, sample.LESSONS, cases, expected) == []
    others = [name for name in sample.LESSONS if name != lesson]
    assert any("LESSONS" in p for p in lesson_places(lesson, others, cases, expected))
    cases = {
        **cases,
        "s02_independent_answers": {k: v for k, v in cases["s02_independent_answers"].items() if k != lesson},
    }
    assert any("s02_independent_answers" in p for p in lesson_places(lesson, sample.LESSONS, cases, expected))
    expected = {**expected, "s04_bug_only_hidden_tests_catch": {}}
    assert any("expected.json" in p for p in lesson_places(lesson, sample.LESSONS, cases, expected))
    assert lesson_places("nb99_new_lesson", sample.LESSONS, cases, expected) == [
        "nb99_new_lesson: no oracle module autograde/grpo_grader/oracles/nb99_new_lesson.py"
    ]


# ------------------------------------------------------------------------------------------- literals, regexes, env
ENV_NAME = re.compile(r"^GRPO_[A-Z0-9_]*[A-Z0-9]$")
# A module-level constant whose value looks like an identifier with punctuation (a file name, a verifier id, a model
# id, a version, a token) is that value's home: typing the value again anywhere else is a second home. Plain words
# ("default", "tiny_cpu") are too common to be a constant's own.
KEY_LITERAL = re.compile(r"^(?=.*[./\-<>|:@])[\w./\-<>|:@+]{4,}$")
REGEX_FUNCTIONS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are not docstrings (prose may name anything)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def answer_lines(path: Path) -> set[int]:
    """The lines of a lesson source's answer and test cells (``"solution": true`` / ``"grade": true``): a learner's
    answer stands alone by design (it may define a constant the runtime also holds, e.g. nb04's ``VERIFIER_ID``) and
    a visible test states the specification to the learner in plain values, so neither is a home nor a copy. Empty
    for every other file."""
    if path.parent.name != "solutions":
        return set()
    lines, inside = set(), False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("# %%"):
            inside = '"solution": true' in line or '"grade": true' in line
        if inside:
            lines.add(number)
    return lines


def literal_homes(files: list[Path]) -> list[str]:
    """Where a key literal has a second home: defined as a module constant in two files, or a constant's value typed
    as a literal in another file. ``path:line value (home: path)``."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for path in files}
    answers = {path: answer_lines(path) for path in files}
    homes: dict[str, set[Path]] = collections.defaultdict(set)
    for path, tree in trees.items():
        for node in tree.body:
            if (
                node.lineno not in answers[path]
                and isinstance(node, ast.Assign)
                and all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and KEY_LITERAL.fullmatch(node.value.value)
            ):
                homes[node.value.value].add(path)
    found = []
    for value, where in homes.items():
        if len(where) > 1:
            found.append(f"{value!r} defined in {sorted(_shown(p) for p in where)}")
    for path, tree in trees.items():
        for node in _string_constants(tree):
            where = homes.get(node.value)
            if where and path not in where and node.lineno not in answers[path]:
                found.append(f"{_shown(path)}:{node.lineno} {node.value!r} (home: {_shown(sorted(where)[0])})")
    return found


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def test_no_key_literal_has_a_second_home():
    """A file name, a verifier id, a model id, a version or a token is defined once (a module constant) and imported
    elsewhere, never typed again: the second copy is what goes stale when the first changes. The stated sandbox-side
    files (``tools.env_vars.SANDBOX_SIDE_COPIES``: standard library only) may mirror one, saying so."""
    from tools.env_vars import SANDBOX_SIDE_COPIES

    found = [f for f in literal_homes(_sources()) if f.split(":", 1)[0] not in SANDBOX_SIDE_COPIES]
    assert not found, "literals typed again (import the constant instead):\n" + "\n".join(found)


def test_the_literal_check_finds_a_second_home(tmp_path):
    home = tmp_path / "home.py"
    home.write_text('VERIFIER = "integer-answer-v1"\nWORD = "default"\n', encoding="utf-8")
    copy = tmp_path / "copy.py"
    copy.write_text('def f():\n    """Uses integer-answer-v1."""\n    return "integer-answer-v1", "default"\n')
    twice = tmp_path / "twice.py"
    twice.write_text('ID = "integer-answer-v1"\n', encoding="utf-8")
    assert [f.split(" ", 1)[1] for f in literal_homes([home, copy])] == [f"'integer-answer-v1' (home: {home})"]
    assert any("defined in" in f for f in literal_homes([home, twice]))
    assert literal_homes([home]) == []


def regex_homes(files: list[Path]) -> dict[str, list[str]]:
    """{pattern: [path:line, ...]} for every regex literal (the pattern argument of a ``re`` function) written in
    more than one file."""
    places = collections.defaultdict(list)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in REGEX_FUNCTIONS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                places[node.args[0].value].append(f"{_shown(path)}:{node.lineno}")
    return {p: w for p, w in places.items() if len({x.rsplit(":", 1)[0] for x in w}) > 1}


def test_no_regex_is_written_in_two_files():
    found = regex_homes(_sources())
    assert not found, "the same regex in several files (define it once):\n" + "\n".join(
        f"{p!r}: {' == '.join(w)}" for p, w in found.items()
    )


def test_the_regex_check_finds_a_copied_pattern(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text('import re\nNORMAL = re.compile(r"[-_.]+")\n', encoding="utf-8")
    b.write_text('import re\n\ndef norm(x):\n    return re.sub(r"[-_.]+", "-", x)\n', encoding="utf-8")
    assert list(regex_homes([a, b])) == ["[-_.]+"]
    assert regex_homes([a]) == {}


def env_name_problems(files: list[Path], registry: set[str], allowed: dict[str, str]) -> list[str]:
    """Where a ``GRPO_*`` environment variable's name is typed outside its home ``tools/env_vars.py`` (a string
    constant or a keyword argument such as ``dict(os.environ, GRPO_X=...)``), or named but not registered."""
    found = []
    for path in files:
        shown = _shown(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = [(n.lineno, n.value) for n in _string_constants(tree) if ENV_NAME.fullmatch(n.value)]
        names += [(k.value.lineno, k.arg) for k in ast.walk(tree) if isinstance(k, ast.keyword) and k.arg]
        for line, name in names:
            if not ENV_NAME.fullmatch(name):
                continue
            if name not in registry:
                found.append(f"{shown}:{line} {name} is not in tools/env_vars.py")
            elif shown != "tools/env_vars.py" and shown not in allowed:
                found.append(f"{shown}:{line} types {name} (use tools.env_vars)")
    return found


def test_every_environment_variable_has_one_home_and_a_meaning():
    """Every ``GRPO_*`` variable is registered once in ``tools/env_vars.py`` with its meaning (the generated table of
    docs/CONVENTIONS.md lists them all), code reads it through that module, and the only files that write a name
    again are the stated sandbox-side ones; every name a file of the course mentions (code, scripts, docs, the
    tests' opt-in switches) is registered."""
    from tools import env_vars

    registry = [v.name for v in env_vars.VARIABLES]
    assert len(registry) == len(set(registry)) >= 20
    constants = {v for k, v in vars(env_vars).items() if k.isupper() and isinstance(v, str) and ENV_NAME.match(v)}
    assert constants == set(registry), "a constant without a meaning, or a meaning without a constant"
    found = env_name_problems(_sources(), set(registry), env_vars.SANDBOX_SIDE_COPIES)
    assert not found, "\n".join(found)
    for allowed in env_vars.SANDBOX_SIDE_COPIES:
        assert "mirrors tools." in (ROOT / allowed).read_text(encoding="utf-8"), f"{allowed}: say which home it mirrors"
    mentioned = set()
    texts = [*ROOT.glob("*.md"), *ROOT.glob("*/*.md"), *ROOT.glob("*/*/*.md"), ROOT / "Makefile"]
    texts += [*ROOT.glob("autograde/**/*.sh"), *ROOT.glob("autograde/**/*.sbatch"), *ROOT.glob("tools/**/*.sh")]
    texts += [*ROOT.glob("benchmarks/*.sh"), *ROOT.glob("autograde/recipes/*")]
    for path in texts + _sources():
        mentioned |= set(env_vars.NAME.findall(path.read_text(encoding="utf-8")))
    for path in ROOT.glob("tests/*.py"):  # the tests' own switches: what they read from the environment
        mentioned |= set(re.findall(r"environ(?:\.get\(|\[)\s*\"(GRPO_[A-Z0-9_]+)\"", path.read_text("utf-8")))
    mentioned -= {"GRPO_"}
    assert mentioned <= set(registry), f"named but not registered: {sorted(mentioned - set(registry))}"
    assert subprocess.run([sys.executable, "-m", "tools.env_vars", "--check"], cwd=ROOT).returncode == 0


def test_the_environment_check_finds_a_typed_name_and_an_unregistered_one(tmp_path):
    typed = tmp_path / "typed.py"
    typed.write_text(
        'import os\nSEED = os.environ.get("GRPO_GRADING_SEED")\nenv = dict(os.environ, GRPO_BENCH_THREADS="1")\n'
    )
    found = env_name_problems([typed], {"GRPO_GRADING_SEED", "GRPO_BENCH_THREADS"}, {})
    assert len(found) == 2 and all("use tools.env_vars" in f for f in found)
    assert "not in tools/env_vars.py" in env_name_problems([typed], {"GRPO_BENCH_THREADS"}, {})[0]
    assert env_name_problems([typed], {"GRPO_GRADING_SEED", "GRPO_BENCH_THREADS"}, {_shown(typed): "why"}) == []
