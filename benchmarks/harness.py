"""What every benchmark group shares: timing, the metric record, and the "not available" rule.

A metric is ``{"name", "value", "unit", "baseline", "detail"}``; a benchmark whose dependency is missing from the
checkout reports ``value: None`` and ``detail.status: "not available: <reason>"`` (:func:`unavailable`), never an
invented number.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.course_code import CourseCodeUnavailable, load_answers

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
EPS = 1e-6


class Unavailable(RuntimeError):
    """A dependency of a benchmark is not in this checkout: the metric reports value null."""


def timed(fn, repeats: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` (after ``warmup`` untimed calls)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def metric(name: str, value, unit: str, baseline: dict, detail: dict) -> dict:
    if value is not None:
        value = float(value)
    return {"name": name, "value": value, "unit": unit, "baseline": baseline, "detail": detail}


def unavailable(name: str, unit: str, baseline: dict, reason: str, goal: str | None = None) -> dict:
    detail = {"status": f"not available: {reason}"}
    if goal:
        detail["goal"] = goal
    return metric(name, None, unit, baseline, detail)


def goal_met(value: float, op: str, target: float) -> bool:
    return bool(value >= target) if op == ">=" else bool(value <= target)


def load(assignment: str, grade_ids: list[str]) -> dict:
    """``benchmarks.course_code.load_answers``, with a missing source or cell raised as :class:`Unavailable`."""
    try:
        return load_answers(assignment, grade_ids)
    except CourseCodeUnavailable as error:
        raise Unavailable(str(error)) from error
