"""One oracle run: the job for the driver (the learner's notebook as written, test cells as markers, case inputs),
its sandboxed execution in a slot, and the verdicts per test cell."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .judging import TestVerdict, parse_results, verdicts
from .oracle import Oracle
from .preprocessors import BOOTSTRAP_ID, is_demo_cell

DRIVER = Path(__file__).resolve().parent / "driver.py"


def job_cells(
    release: nbformat.NotebookNode,
    rebuilt: nbformat.NotebookNode,
    oracle: Oracle,
    demo_cells: list[str] | tuple[str, ...] = (),
) -> list[dict]:
    """What the driver runs: the learner's notebook as written, in the learner's order - every code cell the
    learner has (answers, setup cells they edited, cells they added) - except test cells, which become markers
    (``{"id": test grade_id, "test": True}``: the cases of that test run there, as the test cell would) and the
    instructor's cells left out by release grade_id: the lesson's demonstrations (``demo_cells``, which the
    grading kernel skips too) and the oracle's ``SKIP_SETUP``. Locked cells run as released (nbgrader restores
    them too); a missing or moved bootstrap cell runs first, as ``RestoreBootstrap`` puts it."""
    released = {}
    for cell in release.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid and gid not in released:
            released[gid] = cell
    cells = [{"id": "prelude", "source": oracle.prelude, "answer": False}] if oracle.prelude else []
    code = [c for c in rebuilt.cells if c.cell_type == "code"]
    first = code[0].get("metadata", {}).get("nbgrader", {}).get("grade_id") if code else None
    if BOOTSTRAP_ID in released and first != BOOTSTRAP_ID:
        cells.append({"id": BOOTSTRAP_ID, "source": released[BOOTSTRAP_ID].source, "answer": False})
    seen = set()
    for index, cell in enumerate(rebuilt.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id") if meta.get("grade_id") in released else None
        if gid in seen or (gid == BOOTSTRAP_ID and first != BOOTSTRAP_ID):
            continue
        if gid:
            seen.add(gid)
        if meta.get("grade") and not meta.get("solution"):
            cells.append({"id": gid, "test": True})
        elif meta.get("solution"):
            cells.append({"id": gid, "source": cell.source, "answer": True})
        elif is_demo_cell(cell, demo_cells) or oracle.skip_setup(gid):
            continue
        elif gid and meta.get("locked"):
            cells.append({"id": gid, "source": released[gid].source, "answer": False})
        else:
            cells.append({"id": gid or f"cell-{index}", "source": cell.source, "answer": False})
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
