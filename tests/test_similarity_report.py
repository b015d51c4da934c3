"""The instructor's similarity report and the copy review's calibration.

The report page runs no learner text: everything a learner wrote is escaped, the page has no script and a
Content-Security-Policy that forbids scripts and every load (``page_problems``, with the mutations it catches);
pairs are ranked flagged first with the matched lines of both sides in the same colour; the CSV and JSON say the
same. The calibration file and the generated README section are what ``review --calibrate`` computes now from the
sample class (their figures are never pasted), every comparable graded function has at least 3 independent versions,
and every calibration version is a correct answer (the oracle passes it).
"""

from __future__ import annotations

import csv
import io
import json
import re

import nbformat
import pytest

from autograde.grpo_grader import similarity_report
from autograde.grpo_grader.copy_review import CALIBRATION, REFERENCE, AssignmentReview, compare
from autograde.grpo_grader.learner_code import Unit
from autograde.grpo_grader.similarity_report import CSP, html_page, ranked, report_data, write_report

HOSTILE = '</pre></span><script>alert("x")</script><img src=x onerror="alert(1)"><a href="http://evil/">'


def page_problems(page: str) -> list[str]:
    """What would let a page run or load something: a script element, an event-handler attribute, a URL to load or
    leave to, an embedded frame or object, a missing or weaker Content-Security-Policy."""
    problems = []
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    if csp is None or "default-src 'none'" not in csp.group(1) or "script-src" in csp.group(1):
        problems.append("no CSP forbidding scripts")
    for pattern, what in (
        (r"<\s*script", "script element"),
        (r"<[^>]*\son\w+\s*=", "event handler"),
        (r"<[^>]*\s(?:src|href|action)\s*=\s*(?![\"']?#)", "a URL"),
        (r"<\s*(?:iframe|object|embed|link|base|form)\b", "embedded or linked element"),
    ):
        if re.search(pattern, page, re.I):
            problems.append(what)
    return problems


def _unit(text: str, prints: dict[int, list[int]]) -> Unit:
    return Unit(text=text, prints=prints)


@pytest.fixture
def review() -> dict[str, AssignmentReview]:
    """Three learners and the reference on one function: x copies the reference (a hostile text), y is half like x,
    z shares one fingerprint with the others."""
    ref = _unit("def f(a):\n    b = a + 1\n    return b * 2", {1: [1], 2: [2], 3: [2, 3], 4: [3], 5: [3]})
    units = {
        "x": {"f": _unit(f"def f(a):  # {HOSTILE}\n    b = a + 1\n    return b * 2", dict(ref.prints))},
        "y": {"f": _unit("def f(q):\n    return q", {1: [1], 2: [1], 9: [2], 10: [2], 11: [2]})},
        "z": {"f": _unit("pass", {1: [1], 20: [1], 21: [1], 22: [1], 23: [1]})},
    }
    thresholds = {"f": {"versions": 3, "reference_threshold": 0.8, "pair_threshold": 0.8, "common": []}}
    matches = compare("nb_test", units, {"f": ref}, thresholds)
    return {"nb_test": AssignmentReview("nb_test", units, {"f": ref}, thresholds, matches)}


def test_the_page_escapes_learner_text_and_runs_nothing(review):
    page = html_page(review)
    assert page_problems(page) == []
    assert html_page(review).count(f'content="{CSP}"') == 1
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page, "the learner's text is shown, escaped"


def test_the_page_check_catches_each_way_to_run_or_load(review, monkeypatch):
    """The mutations ``page_problems`` must catch: the learner text unescaped, the CSP removed or weakened, an
    event handler, a frame."""
    page = html_page(review)
    for mutated in (
        page.replace(f'<meta http-equiv="Content-Security-Policy" content="{CSP}">', ""),
        page.replace("default-src 'none'", "default-src 'none'; script-src 'unsafe-inline'"),
        page.replace("<body>", '<body onload="x()">'),
        page.replace("<body>", '<body><iframe srcdoc="x"></iframe>'),
    ):
        assert page_problems(mutated), mutated[:200]
    monkeypatch.setattr(similarity_report, "_e", str)
    assert page_problems(html_page(review)), "an unescaped learner text is caught"


def test_pairs_are_ranked_and_matches_marked_alike_on_both_sides(review):
    pairs = ranked(review["nb_test"])
    assert [(p.a, p.b, p.flagged) for p in pairs[:3]] == [
        ("x", REFERENCE, True),
        ("x", "y", False),
        ("y", REFERENCE, False),
    ]
    side = similarity_report._side_by_side(review["nb_test"], pairs[0].functions[0])
    left, right = side.split("</pre>", 1)
    for colour in re.findall(r'class="l (m\d)"', left):
        assert colour in right, "a match has the same colour on both sides"
    data = report_data(review)
    rows = list(csv.DictReader(io.StringIO(similarity_report.csv_text(data))))
    assert len(rows) == sum(len(p["functions"]) for p in data["assignments"]["nb_test"]["pairs"])
    assert data["assignments"]["nb_test"]["flagged_reference"] == 1 and rows[0]["flagged"] == "True"


def test_the_report_files_and_summary(review, tmp_path):
    paths, lines = write_report(tmp_path, review)
    assert [p.name for p in paths] == ["similarity.html", "similarity.csv", "similarity.json"]
    assert json.loads(paths[2].read_text(encoding="utf-8"))["assignments"]["nb_test"]["learners"] == 3
    assert page_problems(paths[0].read_text(encoding="utf-8")) == []
    assert "1 learner(s) like the reference" in lines[0] and str(paths[0]) in lines[-1]


# ----------------------------------------------------------------------------------------------- calibration
@pytest.fixture(scope="module")
def sample_review(released_course):
    from autograde.sample_class.copy_calibration import review_sample_class

    course = released_course["course"]
    return review_sample_class(
        lambda lesson: nbformat.read(course / "source" / lesson / f"{lesson}.ipynb", as_version=4)
    )


@pytest.mark.slow  # fingerprints the sample class and the calibration learners (about 6 s of CPU)
def test_the_calibration_and_the_readme_figures_are_computed_now(sample_review):
    """``grpo_grader/copy_calibration.json`` and the README's copy-review section are what the sample class gives
    now (a changed case, threshold rule or fingerprint makes this fail until `review --calibrate`), and every
    graded function with a comparable reference has at least 3 independent versions."""
    from autograde.commands.settings import README, _with_generated
    from autograde.sample_class.copy_calibration import calibration_json, readme_section

    assert CALIBRATION.read_text(encoding="utf-8") == calibration_json(sample_review), "run `review --calibrate`"
    readme = README.read_text(encoding="utf-8")
    wanted = _with_generated(readme, "copy-review", lambda language: readme_section(sample_review, language))
    assert readme == wanted, "run `python -m autograde.pipeline review --calibrate`"
    changed = {**sample_review, "found": sample_review["found"] - 1}
    assert _with_generated(readme, "copy-review", lambda language: readme_section(changed, language)) != readme
    few = [
        f"{lesson}/{gid}: {f['versions']}"
        for lesson, functions in sample_review["functions"].items()
        for gid, f in functions.items()
        if f["reference_max"] is not None and f["versions"] < 3
    ]
    assert not few, f"fewer than 3 independent versions: {few}"


def _calibration_namespaces(lesson: str):
    """(author, namespace) for each calibration learner's answers of ``lesson`` over the lesson's module and its
    released definition-only statements (what the notebook defines before the answers)."""
    import ast
    import importlib
    import math
    import numbers
    import re as re_module

    import torch

    from autograde.sample_class.build import _released
    from autograde.sample_class.copy_calibration import calibration_learners

    base = {"torch": torch, "math": math, "numbers": numbers, "re": re_module}
    base.update(vars(importlib.import_module(f"tools.lessons.{lesson}")))
    for cell in _released(lesson).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("solution") or meta.get("grade"):
            continue
        try:
            body = ast.parse(cell.source).body
        except SyntaxError:  # an IPython magic
            continue
        for node in body:
            plain = isinstance(node, ast.Assign) and isinstance(node.value, (ast.Dict, ast.Constant, ast.Tuple))
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) or plain:
                try:
                    exec(compile(ast.Module(body=[node], type_ignores=[]), lesson, "exec"), base)  # noqa: S102
                except Exception:  # noqa: BLE001 (a demo value built from the cells before it: not needed)
                    continue
    for author, case in calibration_learners().items():
        namespace = dict(base)
        for source in case[lesson]["cells"].values():
            exec(source, namespace)  # noqa: S102
        yield author, namespace


def _oracle_failures(lesson: str) -> list[str]:
    from autograde.grpo_grader import oracle as oracle_lib
    from autograde.grpo_grader.oracles import run_in_kernel

    failures = []
    for author, namespace in _calibration_namespaces(lesson):
        for test in oracle_lib.load_oracle(lesson).tests:
            try:
                run_in_kernel(lesson, test, namespace, seed="calibration-versions")
            except AssertionError as error:
                failures.append(f"{author} {lesson} {test}: {str(error)[:200]}")
    return failures


CHEAP_LESSONS = [
    "nb01_group_advantages",
    "nb02_grpo_objective",
    "nb03a_cispo_trace_lab",
    "nb03b_loss_family_trl",
    "nb04_verifiable_rewards",
    "nb05_logprobs_masks",
]


@pytest.mark.slow  # runs the oracle's cases on 3 learners x 6 lessons in this process (about 4 s of CPU)
@pytest.mark.parametrize("lesson", CHEAP_LESSONS)
def test_every_calibration_version_is_a_correct_answer(lesson):
    """The calibration learners are honest learners who did the work: every test cell of the lesson passes the
    oracle's cases with their answers (a wrong version would calibrate on code no learner hands in)."""
    assert not _oracle_failures(lesson)


@pytest.mark.integration  # lesson 7's cases load the tiny policy and train it (about 15 s of CPU)
def test_every_calibration_version_of_lesson_7_is_a_correct_answer():
    assert not _oracle_failures("nb07_online_grpo")


@pytest.mark.slow  # the oracle's cases of lesson 1 for 3 learners (about 1 s of CPU)
@pytest.mark.filterwarnings("ignore::UserWarning")  # the broken version takes a sample std of one value
def test_the_oracle_check_fails_a_wrong_version(monkeypatch):
    """The check above can fail: a calibration version with the population std swapped for the sample std."""
    from autograde.sample_class import copy_calibration

    real = copy_calibration.calibration_learners

    def broken():
        learners = real()
        cells = learners["k1_compact"]["nb01_group_advantages"]["cells"]
        cells["group_relative_advantages"] = cells["group_relative_advantages"].replace(
            "unbiased=False", "unbiased=True"
        )
        return learners

    monkeypatch.setattr(copy_calibration, "calibration_learners", broken)
    failures = _oracle_failures("nb01_group_advantages")
    assert failures and all("k1_compact" in f and "group_relative" in f for f in failures), failures
