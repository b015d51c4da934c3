"""The oracle's side of grading one notebook: its cases drawn for the learner, the job the notebook's kernel gets
(``OracleRun.job``: the case runner and the inputs, never an expectation), and afterwards the verdicts judged from what
the kernel sent (``OracleRun.outcome``) in place of the in-kernel scores (``apply_oracle``). Importing this module
imports no oracle and no torch: they are loaded when a notebook is graded."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from .course import GradingPipeline
from .outcomes import NotebookResult, learner_words
from .transport import MAX_LINE_BYTES

if TYPE_CHECKING:  # the oracles (and torch) are imported when a notebook is graded, not by the other commands
    from .judging import TestVerdict
    from .results_channel import GradedRun

CASE_RUNNER = Path(__file__).resolve().parent / "case_runner.py"
_CASES_LOCK = threading.Lock()


def oracle_cases(oracle, settings: GradingPipeline, learner: str, seed: str):
    """The cases of an assignment for one learner: drawn from a key derived from this run's ``seed``, the learner and
    the assignment (``oracle.case_generator``). One slot at a time: an oracle's first draw may load a model (lesson
    7), and two threads importing transformers at once can fail."""
    with _CASES_LOCK:
        return oracle.cases(seed, settings.oracle_flags.get(oracle.assignment, {}), learner=learner)


@dataclass
class OracleOutcome:
    verdicts: dict[str, TestVerdict] = field(default_factory=dict)
    problem: str = ""  # why some results did not come back (the channel's reasons)
    cases: int = 0
    received: int = 0  # cases with a result


def answer_errors(executed: nbformat.NotebookNode | None, answers: set[str]) -> dict[str, str]:
    """{answer cell grade_id: its first error, as the learner's words} of the executed notebook, for the answer cells
    ``answers``: why a function a case calls may be missing."""
    errors = {}
    for cell in executed.cells if executed is not None else []:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    errors[gid] = learner_words(f"{out.get('ename', '')}: {out.get('evalue', '')}", 200)
                    break
    return errors


class OracleRun:
    """The oracle of one notebook: loaded, its cases drawn from the grading seed (None and no cases: the lesson has no
    oracle). A failure on the grader's side is kept and raised by ``outcome`` (that notebook only)."""

    def __init__(self, settings: GradingPipeline, assignment: str, learner: str, seed: str) -> None:
        self._settings = settings
        self._error: BaseException | None = None
        self.oracle = self.cases = None
        try:
            from .oracle import load_oracle

            self.oracle = load_oracle(assignment)
            if self.oracle is not None:
                self.cases = oracle_cases(self.oracle, settings, learner, seed)
        except Exception as error:  # reported as the grader's fault by outcome(), for this notebook only
            self._error = error

    @property
    def tests(self) -> list[str]:
        """The test cells whose cases the kernel runs (none where the oracle failed to load: nothing is stripped)."""
        return sorted(self.oracle.tests) if self.oracle is not None and self._error is None else []

    @property
    def case_timeout(self) -> int:
        return min(int(self._settings.cell_timeout), 15)

    def job(self) -> dict | None:
        """What the kernel gets (``case_runner.make_runner``): the runner's text, the oracle's harness and the cases'
        inputs; None without cases."""
        if not self.tests:
            return None
        return {
            "runner": CASE_RUNNER.read_text(encoding="utf-8"),
            "prelude": self.oracle.prelude,
            "cases": [case.wire() for case in self.cases],
            "case_timeout": self.case_timeout,
            "max_line": MAX_LINE_BYTES,
        }

    def case_seconds(self) -> int:
        """Time a test cell gets beyond the cell limit for its cases: each case's limit, for the test with the most
        cases (capped by the notebook's limit)."""
        per_test: dict[str, int] = {}
        for case in self.cases or []:
            per_test[case.test] = per_test.get(case.test, 0) + 1
        return min(int(self._settings.notebook_timeout), max(per_test.values(), default=0) * self.case_timeout)

    def outcome(self, run: GradedRun, executed: nbformat.NotebookNode | None) -> OracleOutcome | None:
        """The verdicts from what the kernel sent (None: this notebook has no oracle); raises what went wrong on the
        grader's side. ``executed``: nbgrader's executed notebook, for why a function is missing."""
        from .judging import parse_results, verdicts

        if self._error is not None:
            raise self._error
        if self.oracle is None:
            return None
        results, _cells, problem = parse_results(run.results, run.dropped)
        not_run = problem or "这个测试单元没有运行到这些用例，例如内核在此前退出（not run）"
        answers = answer_errors(executed, set(self.oracle.tests.values()))
        outcome = OracleOutcome(problem=problem, cases=len(self.cases), received=len(results))
        outcome.verdicts = verdicts(self.oracle, self.cases, results, not_run, answers)
        return outcome


def apply_oracle(run: OracleRun, outcome: OracleOutcome | None, cells: dict, nres: NotebookResult) -> dict[str, str]:
    """Replace the in-kernel scores of the oracle's test cells by the oracle's verdicts; {grade_id: message}."""
    if outcome is None:
        nres.flags = sorted({*nres.flags, "no-oracle"})
        return {}
    nres.phases["cases"] = outcome.received
    if outcome.problem:
        nres.notes.append(outcome.problem)
    messages, comments = {}, {}
    in_kernel = {gid: (nres.grades.get(gid) or {}).get("auto_score") or 0.0 for gid in outcome.verdicts if gid in cells}
    for gid, verdict in outcome.verdicts.items():
        if gid not in cells:
            continue
        nres.grades[gid] = {
            "auto_score": cells[gid]["max_score"] if verdict.passed else 0.0,
            "needs_manual_grade": False,
        }
        messages[gid] = verdict.message
        answer = run.oracle.tests[gid]
        line = f"{gid}：{'通过' if verdict.passed else '未通过'}（{verdict.cases - verdict.failed}/{verdict.cases} 个用例）"
        comments.setdefault(answer, []).append(line + (f"：{verdict.message}" if verdict.message else ""))
    for gid, info in cells.items():
        if info["kind"] == "test" and gid not in outcome.verdicts:
            nres.flags = sorted({*nres.flags, "in-kernel-test"})
    nres.phases["in_kernel_score"] = sum(in_kernel.values())
    for answer, lines in comments.items():
        nres.comments[answer] = "评分器（在学员内核之外、用评分时抽取的输入）的判定：\n" + "\n".join(lines)
    return messages
