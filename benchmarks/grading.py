"""Grading at scale: the autograding pipeline against one worker and against the floor of a notebook.

- ``autograde_parallel_speedup``: the bundled sample class graded with the default workers against one worker;
- ``autograde_seconds_per_notebook_vs_floor`` and ``autograde_class_seconds``: a synthetic class of 30 learners
  over every graded lesson (:func:`class_run`, one grading shared by both), against the floor of each notebook
  (kernel start + its lesson's imports), measured in the same run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, Unavailable, goal_met, median, metric, unavailable
from benchmarks.notebooks import autograde_run, kernel_floor, load_chain, released_course
from tools import env_vars


def _grade_sample_class(course: Path, workers: int | None) -> dict:
    """Run `autograde/pipeline.py autograde --sample --force` on ``course``; wall-clock seconds + its summary."""
    pipeline = ROOT / "autograde" / "pipeline.py"
    command = [sys.executable, str(pipeline), "autograde", "--course", str(course), "--sample", "--force"]
    if workers is not None:
        command += ["--workers", str(workers)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), TQDM_DISABLE="1")
    return autograde_run(command, env, f"autograde pipeline (workers={workers})")


def bench_autograde(tiny: bool) -> list[dict]:
    name = "autograde_parallel_speedup"
    baseline = {"what": "the sample class graded with 1 worker (wall-clock seconds)", "unit": "s"}
    goal = ">= 1.8 on 2 cores"
    if not (ROOT / "autograde" / "pipeline.py").exists():
        return [unavailable(name, "x", baseline, "autograde/pipeline.py is not in this checkout", goal)]
    try:
        chain = load_chain()
    except Unavailable as error:
        return [unavailable(name, "x", baseline, str(error), goal)]
    if tiny:
        # tiny: the class run's one grading (1 learner, nb01) stands for both runs and its nb01 floor for the
        # `import torch` floor: the metric's code path only (tests/test_autograde_class.py grades the whole sample
        # class; tiny sizes claim nothing)
        try:
            run = class_run(tiny)
        except (Unavailable, RuntimeError, ImportError) as error:
            return [unavailable(name, "x", baseline, str(error), goal)]
        serial = parallel = {
            k: run[k]
            for k in (
                "wall_s",
                "pipeline_reported_s",
                "statuses",
                "grades",
                "learners",
                "notebooks",
                "workers",
                "returncode",
            )
        }
        floor = run["floors_s"][run["lessons"][0]]
    else:
        serial, parallel, floor = _serial_and_parallel(chain)
    differing = sorted(
        key
        for key in set(serial["grades"]) | set(parallel["grades"])
        if serial["grades"].get(key) != parallel["grades"].get(key)
    )
    speedup = serial["wall_s"] / parallel["wall_s"]
    per_notebook = serial["wall_s"] / serial["notebooks"]
    return [
        metric(
            name,
            speedup,
            "x",
            dict(baseline, value=serial["wall_s"]),
            {
                "goal": goal,
                "goal_met": None if tiny else goal_met(speedup, ">=", 1.8),
                "cores": os.cpu_count(),
                "serial": serial,
                "parallel": parallel,
                "same_grades_serial_and_parallel": not differing,
                "grades_differing": {
                    key: {"serial": serial["grades"].get(key), "parallel": parallel["grades"].get(key)}
                    for key in differing
                },
                "seconds_per_learner_notebook": per_notebook,
                "floor_s": floor,
                "floor": "kernel start + `import torch` (one-cell notebook, nbclient, median)",
                "per_notebook_vs_floor": per_notebook / floor,
                "formula": (
                    "value = wall time of `pipeline.py autograde --sample --force --workers 1` / wall time with "
                    "the default workers (one per core), each on a fresh copy of the same released course; "
                    "seconds per learner-notebook = 1-worker wall time / notebooks graded"
                ),
                "repeats": 1,
            },
        )
    ]


def _serial_and_parallel(chain) -> tuple[dict, dict, float]:
    """The sample class graded with 1 worker and with the default workers, each on a fresh copy of one
    released course, and the `import torch` floor (median of 3)."""
    with tempfile.TemporaryDirectory(prefix="grpo-bench-grade-") as tmp:
        first = released_course(chain, Path(tmp) / "course1")
        second = Path(tmp) / "course2"
        shutil.copytree(first, second)  # the same starting state for the second run
        serial = _grade_sample_class(first, 1)
        parallel = _grade_sample_class(second, None)
    return serial, parallel, median(kernel_floor(chain, "import torch", 3))


_CLASS_RUNS: dict = {}


def _lesson_imports(assignment: str) -> str:
    """The top-level import lines of a lesson's released code cells (what its floor notebook imports): the grading
    pre-flight's own list (autograde/grpo_grader/probe.py)."""
    from autograde.grpo_grader.probe import lesson_import_lines

    lines = lesson_import_lines(ROOT / "notebooks" / assignment / f"{assignment}.ipynb")
    return "\n".join(lines) or "pass"


def class_run(tiny: bool) -> dict:
    """One synthetic class graded by `python -m autograde.pipeline autograde` (default workers), shared by
    both class-scale metrics: 30 learners over every graded lesson of the sample class, each notebook a copy
    of a sample learner's worked (s01), wrong (s04) or untouched (s03) submission in rotation; tiny: 1
    learner, nb01 only. The floors (kernel start + each lesson's imports) are measured in the same run."""
    if tiny in _CLASS_RUNS:
        return _CLASS_RUNS[tiny]
    from autograde.sample_class import build as sample_class

    chain = load_chain()
    lessons = sample_class.LESSONS[:1] if tiny else list(sample_class.LESSONS)
    kinds = ["s01_worked_answers", "s04_bug_only_hidden_tests_catch", "s03_untouched"]
    learners = 1 if tiny else 30
    with tempfile.TemporaryDirectory(prefix="grpo-bench-class-") as tmp:
        course = released_course(chain, Path(tmp) / "autograde", lessons)
        for i in range(learners):
            for j, lesson in enumerate(lessons):
                source = sample_class.SUBMITTED / kinds[(i + j) % len(kinds)] / lesson
                shutil.copytree(source, course / "submitted" / f"learner{i:03d}" / lesson)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            TQDM_DISABLE="1",
            **{env_vars.GRADING_SEED: "bench-" + str(time.time_ns())},
        )
        graded = autograde_run(
            [sys.executable, "-m", "autograde.pipeline", "autograde", "--course", str(course)],
            env,
            "class run",
            course,
            check=True,
        )
    floors = {lesson: median(kernel_floor(chain, _lesson_imports(lesson), 1 if tiny else 2)) for lesson in lessons}
    run = {
        **graded,
        "lessons": lessons,
        "floors_s": floors,
        "phases": {lesson: graded["phases"].get(lesson, []) for lesson in lessons},
    }
    _CLASS_RUNS[tiny] = run
    return run


FLOOR_BASELINE = {
    "what": "floor: a one-cell notebook with the lesson's imports, kernel start included (nbclient)",
    "unit": "s",
}
CLASS_BASELINE = {
    "what": "the same notebooks at the floor (kernel start + imports), one after another, per worker",
    "unit": "s",
}


def class_metrics(tiny: bool) -> list[dict]:
    """``autograde_seconds_per_notebook_vs_floor`` and ``autograde_class_seconds``: the two metrics of one grading
    of the synthetic class (:func:`class_run`); both ``unavailable`` when the class could not be graded."""
    floor_name, floor_goal = "autograde_seconds_per_notebook_vs_floor", "<= 0.6"
    class_name, class_goal = "autograde_class_seconds", "<= 0.6 x the floor per notebook"
    try:
        run = class_run(tiny)
    except (Unavailable, RuntimeError, ImportError) as error:
        return [
            unavailable(floor_name, "x floor", FLOOR_BASELINE, str(error), floor_goal),
            unavailable(class_name, "s", CLASS_BASELINE, str(error), class_goal),
        ]
    per_lesson = {}
    for lesson, rows in run["phases"].items():
        mean = statistics.fmean(r["seconds"] for r in rows)
        per_lesson[lesson] = {
            "notebooks": len(rows),
            "mean_in_slot_s": mean,
            "floor_s": run["floors_s"][lesson],
            "in_slot_vs_floor": mean / run["floors_s"][lesson],
            "mean_nbgrader_s": statistics.fmean(r.get("nbgrader", 0.0) for r in rows),
            "mean_cases": statistics.fmean(r.get("cases", 0) for r in rows),
        }
    floors = [run["floors_s"][lesson] for lesson, rows in run["phases"].items() for _ in rows]  # one per notebook
    per_notebook = run["pipeline_reported_s"] * run["workers"] / run["notebooks"]
    vs_floor = per_notebook / statistics.fmean(floors)
    per_notebook_vs_floor = (run["pipeline_reported_s"] * run["workers"]) / sum(floors)
    return [
        metric(
            floor_name,
            vs_floor,
            "x floor",
            dict(FLOOR_BASELINE, value=statistics.fmean(floors)),
            {
                "goal": floor_goal,
                "goal_met": None if tiny else goal_met(vs_floor, "<=", 0.6),
                "seconds_per_notebook_per_worker": per_notebook,
                "per_lesson": per_lesson,
                "workers": run["workers"],
                "notebooks": run["notebooks"],
                "formula": (
                    "value = (pipeline seconds x workers / graded notebooks) / mean floor over those notebooks; "
                    "a notebook's floor = kernel start + its lesson's imports, measured in the same run; "
                    "per_lesson gives the in-slot time, nbgrader's part of it (one execution per notebook: the "
                    "oracle's cases run in that kernel) and the cases sent back"
                ),
                "repeats": 1,
            },
        ),
        metric(
            class_name,
            run["wall_s"],
            "s",
            dict(CLASS_BASELINE, value=sum(floors) / run["workers"]),
            {
                "goal": class_goal,
                "goal_met": None if tiny else goal_met(per_notebook_vs_floor, "<=", 0.6),
                "learners": run["learners"],
                "notebooks": run["notebooks"],
                "workers": run["workers"],
                "statuses": run["statuses"],
                "lessons": run["lessons"],
                "notebooks_per_minute": 60.0 * run["notebooks"] / run["wall_s"],
                "seconds_per_notebook_vs_floor": per_notebook_vs_floor,
                "pipeline_reported_s": run["pipeline_reported_s"],
                "floors_s": run["floors_s"],
                "formula": (
                    "value = wall seconds of `python -m autograde.pipeline autograde` on the synthetic class "
                    "(release excluded); notebooks per minute = notebooks / wall; vs floor = pipeline seconds x "
                    "workers / sum of the notebooks' floors"
                ),
                "repeats": 1,
            },
        ),
    ]


def bench_autograde_vs_floor(tiny: bool) -> list[dict]:
    """autograde_seconds_per_notebook_vs_floor: worker-seconds per graded notebook / the floor."""
    return class_metrics(tiny)[:1]


def bench_autograde_class(tiny: bool) -> list[dict]:
    """autograde_class_seconds: wall time of grading a synthetic class of 30 learners over every lesson."""
    return class_metrics(tiny)[1:]
