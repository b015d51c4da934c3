"""The oracle's side of grading one notebook: its driver run beside nbgrader's execution (``OracleRun``) and its
verdicts in place of the in-kernel scores (``apply_oracle``). Importing this module imports no oracle and no torch:
they are loaded when a notebook is graded."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import nbformat

from .course import GradingPipeline
from .outcomes import NotebookResult
from .slots import Slot

if TYPE_CHECKING:  # the oracles (and torch) are imported when a notebook is graded, not by the other commands
    from .oracle_job import OracleOutcome


_CASES_LOCK = threading.Lock()


def oracle_cases(oracle, settings: GradingPipeline, learner: str, seed: str):
    """The cases of an assignment for one learner: drawn from a key derived from this run's ``seed``, the learner and
    the assignment (``oracle.case_generator``). One slot at a time: an oracle's first draw may load a model (lesson
    7), and two threads importing transformers at once can fail."""
    with _CASES_LOCK:
        return oracle.cases(seed, settings.oracle_flags.get(oracle.assignment, {}), learner=learner)


class OracleRun:
    """The oracle's driver for one notebook. Where the slot allows it (``Slot.concurrent_oracle``), it starts at
    once and runs beside nbgrader's execution, in a sandbox of its own (its own uid as root): both
    mostly wait on their interpreters and torch's import, so the notebook takes about as long as the slower of
    the two. Otherwise it runs when ``outcome()`` is first asked for, after nbgrader, as before. Either way it
    is the same driver on the same job (inputs drawn from the grading seed); a notebook that nbgrader could not
    grade discards its result."""

    def __init__(
        self,
        slot: Slot,
        settings: GradingPipeline,
        assignment: str,
        release: nbformat.NotebookNode,
        rebuilt: nbformat.NotebookNode,
        learner: str,
        seed: str,
    ) -> None:
        self._slot, self._settings, self._release, self._rebuilt = slot, settings, release, rebuilt
        self._result: OracleOutcome | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.oracle = self.cases = None
        self.concurrent = False
        try:
            from .oracle import load_oracle

            self.oracle = load_oracle(assignment)
            if self.oracle is not None:
                self.cases = oracle_cases(self.oracle, settings, learner, seed)
        except Exception as error:  # reported as the grader's fault by outcome(), for this notebook only
            self._error = error
            return
        self.concurrent = self.oracle is not None and slot.concurrent_oracle
        if self.concurrent:
            self._thread = threading.Thread(target=self._run, name=f"oracle-{slot.dir.name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            from .oracle_job import run_oracle

            self._result = run_oracle(
                self._slot,
                self.oracle,
                self.cases,
                self._release,
                self._rebuilt,
                self._settings.cell_timeout,
                self._settings.notebook_timeout,
                self._settings.demo_cells.get(self.oracle.assignment, ()),
            )
        except BaseException as error:  # noqa: BLE001 - handed to outcome()
            self._error = error

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def cancel(self) -> None:
        """Kill a driver that runs beside nbgrader (its result is not needed)."""
        if self._thread is not None and self._thread.is_alive():
            self._slot.stop_oracle()
        self.wait()

    def outcome(self) -> OracleOutcome | None:
        """The driver's outcome (None: this notebook has no oracle); raises what went wrong on the grader's side."""
        if self._error is None and self._result is None and self.oracle is not None:
            if self._thread is None:
                self._run()
            else:
                self.wait()
        if self._error is not None:
            raise self._error
        return self._result


def stripped_tests(executed: nbformat.NotebookNode | None) -> set[str]:
    """The test cells whose hidden tests did not run in the kernel (``StripHiddenTests``)."""
    from .preprocessors import STRIPPED_NOTE

    return {
        c.metadata["nbgrader"]["grade_id"]
        for c in (executed.cells if executed is not None else [])
        if c.cell_type == "code"
        and STRIPPED_NOTE in c.source
        and c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


def apply_oracle(run: OracleRun, cells: dict, nres: NotebookResult, stripped: set[str] = frozenset()) -> dict[str, str]:
    """Replace the in-kernel scores of the oracle's test cells by the oracle's verdicts; {grade_id: message}.
    ``stripped``: test cells that ran without their hidden tests in the kernel (their in-kernel pass says little)."""
    outcome = run.outcome()
    oracle = run.oracle
    if outcome is None:
        nres.flags = sorted({*nres.flags, "no-oracle"})
        return {}
    if not run.concurrent:  # ran after nbgrader: its time adds up
        nres.seconds = round(nres.seconds + outcome.seconds, 1)
    nres.phases["oracle"] = outcome.seconds
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
        answer = oracle.tests[gid]
        line = f"{gid}：{'通过' if verdict.passed else '未通过'}（{verdict.cases - verdict.failed}/{verdict.cases} 个用例）"
        comments.setdefault(answer, []).append(line + (f"：{verdict.message}" if verdict.message else ""))
    for gid, info in cells.items():
        if info["kind"] == "test" and gid not in outcome.verdicts:
            nres.flags = sorted({*nres.flags, "in-kernel-test"})
    # tests that passed in the learner's kernel but not in the oracle: worth a look (a trick, or flaky code)
    if any(in_kernel[gid] > nres.grades[gid]["auto_score"] for gid in in_kernel if gid not in stripped):
        nres.flags = sorted({*nres.flags, "kernel-disagrees"})
    nres.phases["in_kernel_score"] = sum(in_kernel.values())
    for answer, lines in comments.items():
        nres.comments[answer] = "评分器（在学员内核之外、用评分时抽取的输入）的判定：\n" + "\n".join(lines)
    return messages
