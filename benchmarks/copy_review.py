"""The copy review at class scale: a synthetic class of 200 learners over every graded lesson of the sample class.

Each learner's notebook is a sample learner's tracked submission or a calibration learner's answers, in rotation,
with the learner's local names renamed (a different text for every learner). Two metrics:

``copy_review_fingerprint_vs_read_200``: what grading adds per notebook - ``review.review_notebook`` (the learner's
units, their canonical fingerprints, the review flags) - divided by what the grader already does with the same
notebook before anything runs: parse the file (``submission.read_notebook``) and rebuild its metadata against the
release (``submission.rebuild_metadata``). ``copy_review_compare_200_s``: the class comparison at export
(``copy_review.compare`` of every learner with the reference and every pair of learners, all lessons), in seconds,
next to the fingerprinting of the same class.
"""

from __future__ import annotations

import random
import re
import time

from benchmarks.harness import goal_met, metric

LEARNERS = 200
RENAMES = ("mask", "valid", "ratio", "loss", "rewards_", "values", "out", "adv", "weights", "grouped")


def _variant(text: str, index: int) -> str:
    """The notebook text with a few local names renamed for learner ``index`` (JSON-safe: names only)."""
    for name in random.Random(index).sample(RENAMES, 4):
        text = re.sub(rf"\b{name}\b", f"{name}_{index}", text)
    return text


def synthetic_class(learners: int, lessons: list[str]) -> dict[str, list[str]]:
    """{lesson: [notebook text, ...]}: ``learners`` notebooks per lesson (sample submissions and calibration
    learners in rotation, each with its own renamed locals)."""
    from autograde.grpo_grader.submission import read_notebook
    from autograde.sample_class.build import SUBMITTED, build_submission
    from autograde.sample_class.copy_calibration import calibration_learners

    out = {}
    for lesson in lessons:
        texts = [p.read_text(encoding="utf-8") for p in sorted(SUBMITTED.glob(f"*/{lesson}/{lesson}.ipynb"))]
        texts = [t for t in texts if read_notebook(t)[0] is not None]  # the readable ones
        for case in calibration_learners().values():
            spec = case.get(lesson)
            if spec is not None:
                texts.append(build_submission(lesson, spec, {})[1].decode("utf-8"))
        out[lesson] = [_variant(texts[i % len(texts)], i) for i in range(learners)]
    return out


def bench_copy_review(tiny: bool) -> list[dict]:
    from autograde.grpo_grader.copy_review import calibration, compare
    from autograde.grpo_grader.learner_code import Unit, notebook_units
    from autograde.grpo_grader.review import review_notebook
    from autograde.grpo_grader.submission import read_notebook, rebuild_metadata
    from autograde.sample_class.build import LESSONS, _released

    learners = 3 if tiny else LEARNERS
    started = time.perf_counter()
    notebooks = synthetic_class(learners, LESSONS[:2] if tiny else LESSONS)
    build_s = time.perf_counter() - started
    read_s = review_s = compare_s = 0.0
    pairs = flagged = 0
    per_lesson = {}
    for lesson, texts in notebooks.items():
        release = _released(lesson)
        begun = time.perf_counter()
        rebuilt = []
        for text in texts:
            nb, _ = read_notebook(text)
            rebuilt.append(rebuild_metadata(nb, release)[0])
        lesson_read = time.perf_counter() - begun
        begun = time.perf_counter()
        units = {}
        for i, nb in enumerate(rebuilt):
            answers, _ = review_notebook(nb, release)
            units[f"learner{i:03d}"] = {gid: Unit.from_json(value) for gid, value in answers.items()}
        lesson_review = time.perf_counter() - begun
        reference, _ = notebook_units(rebuilt[0], release)  # any learner stands in for the reference here
        begun = time.perf_counter()
        matches = compare(lesson, units, reference, calibration().get(lesson, {}))
        lesson_compare = time.perf_counter() - begun
        read_s, review_s, compare_s = read_s + lesson_read, review_s + lesson_review, compare_s + lesson_compare
        pairs += len(matches)
        flagged += sum(m.flagged for m in matches)
        per_lesson[lesson] = {
            "read_s": round(lesson_read, 3),
            "review_s": round(lesson_review, 3),
            "compare_s": round(lesson_compare, 3),
            "comparisons": len(matches),
        }
    count = learners * len(notebooks)
    ratio = review_s / read_s
    detail = {
        "learners": learners,
        "notebooks": count,
        "review_ms_per_notebook": round(1000 * review_s / count, 2),
        "read_ms_per_notebook": round(1000 * read_s / count, 2),
        "build_synthetic_class_s": round(build_s, 2),
        "per_lesson": per_lesson,
        "goal": "review time <= 10 x the read time of the same notebooks",
        "goal_met": goal_met(ratio, "<=", 10.0),
        "method": "one pass over the synthetic class; times are wall seconds on this machine",
    }
    first = metric(
        "copy_review_fingerprint_vs_read_200",
        round(ratio, 3),
        "x",
        {"what": "read_notebook + rebuild_metadata of the same notebooks", "value": round(read_s, 3), "unit": "s"},
        detail,
    )
    second = metric(
        "copy_review_compare_200_s",
        round(compare_s, 3),
        "s",
        {"what": "review_notebook of the same class (fingerprinting)", "value": round(review_s, 3), "unit": "s"},
        {
            "comparisons": pairs,
            "flagged": flagged,
            "goal": "the class comparison <= the class fingerprinting",
            "goal_met": goal_met(compare_s, "<=", review_s),
        },
    )
    return [first, second]
