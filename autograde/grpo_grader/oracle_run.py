"""One oracle run: the job for the driver (setup cells of the release + the learner's answers + case inputs),
its sandboxed execution in a slot, and the verdicts per test cell."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .oracle import Oracle, TestVerdict, parse_results, verdicts
from .preprocessors import is_demo_cell
from .submission import answer_sources

DRIVER = Path(__file__).resolve().parent / "driver.py"


def job_cells(
    release: nbformat.NotebookNode,
    rebuilt: nbformat.NotebookNode,
    oracle: Oracle,
    demo_cells: list[str] | tuple[str, ...] = (),
) -> list[dict]:
    """The code cells the driver runs, in release order: the release's setup cells (never the learner's
    edits of them), the learner's answer cells in place of the stubs; test cells, the lesson's demonstration
    cells (``demo_cells``: the markers of ``SafeExecute.demo_cells``, which the grading kernel skips too) and the
    oracle's ``SKIP_SETUP`` cells are left out."""
    answers = answer_sources(rebuilt)
    cells = [{"id": "prelude", "source": oracle.prelude, "answer": False}] if oracle.prelude else []
    for index, cell in enumerate(release.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        if meta.get("solution"):
            cells.append({"id": gid, "source": answers.get(gid, cell.source), "answer": True})
        elif meta.get("grade") or is_demo_cell(cell, demo_cells):
            continue
        elif not oracle.skip_setup(cell.source, gid):
            cells.append({"id": gid or f"setup-{index}", "source": cell.source, "answer": False})
    return cells


@dataclass
class OracleOutcome:
    verdicts: dict[str, TestVerdict] = field(default_factory=dict)
    problem: str = ""  # why some cases did not run (timeout, the process died, ...)
    seconds: float = 0.0
    cells_failed: list[str] = field(default_factory=list)
    cases: int = 0


def run_oracle(
    slot,
    oracle: Oracle,
    cases,
    release: nbformat.NotebookNode,
    rebuilt: nbformat.NotebookNode,
    cell_timeout: int,
    timeout: float,
    demo_cells: list[str] | tuple[str, ...] = (),
) -> OracleOutcome:
    job_dir = slot.oracle_job_dir()
    shutil.copyfile(DRIVER, job_dir / "driver.py")
    job = {
        "cells": job_cells(release, rebuilt, oracle, demo_cells),
        "cases": [c.wire() for c in cases],
        "cell_timeout": cell_timeout,
        "case_timeout": min(cell_timeout, 15),
    }
    (job_dir / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    run = slot.run_oracle(job_dir, timeout)
    results, cells, problem = parse_results(run.results, run.dropped)
    finished = "__done__" in cells
    if run.timed_out:
        problem = f"评测进程运行超过 {timeout:.0f} 秒被终止（oracle timeout）"
    elif not finished:  # run.stderr: sanitised (printable, its last two lines, 200 characters)
        died = f"评测进程提前退出（exit {run.code}）{('：' + run.stderr) if run.stderr else ''}（oracle process died）"
        problem = "；".join(p for p in (died, problem) if p)
    outcome = OracleOutcome(problem=problem, seconds=round(run.seconds, 1), cases=len(cases))
    outcome.cells_failed = [cid for cid, record in cells.items() if cid != "__done__" and not record.get("ok")]
    outcome.verdicts = verdicts(oracle, cases, results, problem or "没有结果（no result）")
    slot.oracle_job_dir()  # emptied: the inputs and results do not outlive the notebook
    return outcome
