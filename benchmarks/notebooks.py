"""Executing and grading notebooks: what the notebook benchmarks share, and the notebook series.

``series_execution_s``: every solution notebook executed once by ``tools.chain.notebooks.execute_solution``,
against the kernel start (a one-cell ``pass`` notebook through the same harness). The shared pieces: the build
chain (:func:`load_chain`), the floor of a notebook (:func:`kernel_floor`), a released course to grade
(:func:`released_course`) and one run of the grading pipeline (:func:`autograde_run`).

``run.py --released-course`` / ``--series-from`` (:func:`configure`) reuse what a test run already made: its
released course, its executions of the solutions.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, Unavailable, median, metric, unavailable

_RELEASED_COURSE: Path | None = None  # --released-course: reuse a released course instead of releasing one
_SERIES_FROM: Path | None = None  # --series-from: solution executions made in this test run, not repeated


def configure(released_course: Path | None, series_from: Path | None) -> None:
    """This run's ``--released-course`` and ``--series-from`` (None: release, and execute the solutions)."""
    global _RELEASED_COURSE, _SERIES_FROM
    _RELEASED_COURSE, _SERIES_FROM = released_course, series_from


def load_chain():
    try:
        import tools.chain.notebooks as chain
    except ImportError as error:
        raise Unavailable(f"tools.chain.notebooks cannot be imported ({error})") from error
    return chain


def kernel_floor(chain, source: str, repeats: int) -> list[float]:
    """Seconds to execute a one-cell notebook with the chain's nbclient harness (kernel start and
    shutdown included): ``pass`` measures the kernel alone, ``import torch`` the floor of any course
    notebook."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    times = []
    with tempfile.TemporaryDirectory(prefix="grpo-bench-floor-") as tmp:
        for _ in range(repeats):
            started = time.perf_counter()
            done = chain.execute(nb, Path(tmp))
            times.append(time.perf_counter() - started)
            if chain.cell_errors(done):
                raise RuntimeError(f"floor notebook `{source}` failed: {chain.cell_errors(done)}")
    return times


def released_course(chain, course: Path, lessons: list[str] | None = None) -> Path:
    """``course``: a copy of the tests' one release (--released-course, not modified), or else a release of
    ``lessons`` (all by default) of this checkout: source, release and gradebook (learner versions beside it)."""
    if _RELEASED_COURSE is not None:
        shutil.copytree(_RELEASED_COURSE, course)
    else:
        course.mkdir()
        shutil.copy2(ROOT / "autograde" / "nbgrader_config.py", course / "nbgrader_config.py")
        chain.release_into(course, course.parent / "notebooks", lessons)
    return course


def autograde_run(
    command: list[str], env: dict[str, str], what: str, course: Path | None = None, check: bool = False
) -> dict:
    """Run one `autograde` command of the grading pipeline: its wall-clock seconds, plan, summary and grades
    (from its output) and, given ``course``, each graded notebook's in-slot seconds and phases (its reports).
    ``check``: a non-zero exit is an error too."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - started
    plan = re.search(r"\[autograde\] (\d+) learner\(s\), (\d+) notebook\(s\), (\d+) worker\(s\)", done.stdout)
    summary = re.search(r"\[autograde\] done in ([\d.]+) s: (.*?);", done.stdout)
    if plan is None or summary is None or (check and done.returncode != 0):
        raise RuntimeError(f"{what} failed (rc {done.returncode}):\n{done.stdout[-3000:]}")
    grades = {
        f"{m.group(1)}/{m.group(2)}": f"{m.group(3)} {m.group(4) or 'graded'}"
        for m in re.finditer(r"^\s+(\S+)\s+(nb\w+)\s+(\S+/\S+?)(?: \[(\w+)\])?\s*$", done.stdout, re.MULTILINE)
    }
    run = {
        "wall_s": seconds,
        "pipeline_reported_s": float(summary.group(1)),
        "statuses": summary.group(2),
        "grades": grades,
        "learners": int(plan.group(1)),
        "notebooks": int(plan.group(2)),
        "workers": int(plan.group(3)),
        "returncode": done.returncode,
    }
    if course is not None:
        phases = run["phases"] = {}
        for report in course.glob("autograded/*/*/grading_report.json"):
            data = json.loads(report.read_text())
            for nb in data["notebooks"]:
                phases.setdefault(data["assignment"], []).append({"seconds": nb["seconds"], **nb.get("phases", {})})
    return run


def bench_series(tiny: bool) -> list[dict]:
    name = "series_execution_s"
    baseline = {"what": "kernel start: a one-cell `pass` notebook run by the same harness (median)", "unit": "s"}
    goal = "<= 20 s each (kernel start excluded)"
    try:
        chain = load_chain()
        assignments = chain.assignments()
    except (Unavailable, SystemExit, FileNotFoundError) as error:
        return [unavailable(name, "s", baseline, str(error), goal)]
    if not assignments:
        return [unavailable(name, "s", baseline, "solutions/ holds no notebook source", goal)]
    if tiny:
        assignments = assignments[:1]
    kernel = median(kernel_floor(chain, "pass", 1 if tiny else 3))
    notebooks = {}
    for assignment in assignments:
        if _SERIES_FROM is not None:  # executed in this test run already (tests/conftest.py notebook_runs)
            import nbformat

            saved = json.loads((_SERIES_FROM / f"{assignment}.json").read_text(encoding="utf-8"))
            nb, seconds = nbformat.from_dict(saved["notebook"]), float(saved["seconds"])
        else:
            nb, seconds = chain.execute_solution(assignment)
        errors = chain.cell_errors(nb)
        notebooks[assignment] = {
            "seconds_with_kernel_start": seconds,
            "seconds_excluding_kernel_start": seconds - kernel,
            "errors": [f"cell {i} ({gid}): {ename}: {evalue[:200]}" for i, gid, ename, evalue in errors],
        }
        notebooks[assignment]["goal_met"] = bool(not errors and seconds - kernel <= 20.0)
        print(f"[bench] series {assignment}: {seconds:.1f} s", file=sys.stderr, flush=True)
    total = sum(n["seconds_with_kernel_start"] for n in notebooks.values())
    slowest = max(n["seconds_excluding_kernel_start"] for n in notebooks.values())
    return [
        metric(
            name,
            total,
            "s",
            dict(baseline, value=kernel),
            {
                "goal": goal,
                "goal_met": all(n["goal_met"] for n in notebooks.values()),
                "notebooks": notebooks,
                "count": len(notebooks),
                "executions_reused_from_tests": _SERIES_FROM is not None,
                "slowest_excluding_kernel_start_s": slowest,
                "total_excluding_kernel_start_s": sum(n["seconds_excluding_kernel_start"] for n in notebooks.values()),
                "formula": (
                    "value = sum over solution notebooks of tools.chain.notebooks.execute_solution seconds "
                    "(nbclient, kernel start included, one execution each); per notebook the kernel start "
                    "(median of the `pass` notebook) is subtracted for the goal"
                ),
            },
        )
    ]
