"""The copy review's calibration and its measured precision and recall, both from the sample class.

Calibration (``grpo_grader/copy_calibration.json``): for each graded function (answer cell ``grade_id``), the
similarity to the course's reference reached by its independent honest versions - the calibration learners
``calibration/k*.py`` (written for this, never graded) and the honest sample learners ``HONEST`` (the answers they
wrote themselves: the ``cells`` of their case) - and the similarity any two of them (or one and the reference)
reach; the grader's thresholds follow ``copy_review.threshold_from``.

Precision and recall (the generated section of autograde/README.md): the sample class's submissions (``submitted/``)
reviewed as the grader reviews them. Positives: ``COPIES`` (a lesson copied from the reference, disguised);
negatives: ``HONEST`` (lessons the learner wrote alone). A positive is found when it gets ``copies-reference``; a
negative is a false positive when it gets any copy flag, judged with thresholds calibrated *without* that learner
(leave one learner out: with them, its own answers set the thresholds and it could never be flagged). The other
sample learners are built from the worked answers (stand-ins for a correct answer in grading tests) or attack the
grader without answers of their own: they are neither. ``python -m autograde.pipeline review --calibrate`` rewrites
the JSON and the README section; ``tests/test_copy_review.py`` recomputes both and fails when they are stale.
"""

from __future__ import annotations

import json
import runpy
import time
from collections.abc import Callable
from pathlib import Path

import nbformat

from autograde.grpo_grader.copy_review import (
    CALIBRATION,
    CAP,
    COMMON,
    MARGIN,
    MIN_PRINTS,
    calibrate,
    compare,
    copy_flags,
)
from autograde.grpo_grader.learner_code import Unit, notebook_units, released_prints
from autograde.grpo_grader.submission import read_notebook, rebuild_metadata

from .build import CASES, LESSONS, SAMPLE, SUBMITTED, _released, build_submission

CALIBRATION_LEARNERS = SAMPLE / "calibration"
HONEST = ("s02_independent_answers", "h01_writes_nb04_from_the_lesson")
COPIES = {  # learner: the lesson it copied from the reference (each a different disguise)
    "f03_copies_the_reference": "nb01_group_advantages",
    "c01_pastes_the_reference_above_the_stub": "nb02_grpo_objective",
    "c02_pastes_the_reference_below_the_stub": "nb05_logprobs_masks",
    "c03_execs_an_encoded_reference": "nb04_verifiable_rewards",
    "c04_restructures_the_reference": "nb03b_loss_family_trl",
    "c05_dead_statement_after_every_statement": "nb01_group_advantages",
    "c06_renames_and_reorders": "nb03a_cispo_trace_lab",
}
COPY_FLAGS = ("copies-reference", "similar")


def _default_reference(lesson: str) -> nbformat.NotebookNode:
    from tools.chain.notebooks import build_notebook

    return build_notebook(lesson)


def _units(nb: nbformat.NotebookNode, release: nbformat.NotebookNode, released: set[int]) -> dict[str, Unit]:
    rebuilt, _ = rebuild_metadata(nb, release)
    units, _ = notebook_units(rebuilt, release, released)
    return units


def calibration_learners() -> dict[str, dict]:
    """{calibration learner: its case} in the sample class's case format: the release with the learner's answers
    (each calibration module holds one dict per lesson, named after the lesson: {grade_id: source})."""
    out = {}
    for path in sorted(CALIBRATION_LEARNERS.glob("k*.py")):
        module = runpy.run_path(str(path))
        out[path.stem] = {
            lesson: {"base": "release", "cells": module[lesson]} for lesson in LESSONS if lesson in module
        }
    return out


def independent_versions(lesson: str, release, released) -> dict[str, dict[str, Unit]]:
    """{grade_id: {author: unit}} of the lesson's independent honest answers: every calibration learner's and the
    answers the honest sample learners wrote themselves."""
    authors = calibration_learners()
    authors.update({name: runpy.run_path(str(CASES / f"{name}.py"))["CASE"] for name in HONEST})
    out: dict[str, dict[str, Unit]] = {}
    cache: dict = {}
    for author, case in authors.items():
        spec = case.get(lesson)
        if spec is None:
            continue
        _, data = build_submission(lesson, spec, cache)
        units = _units(nbformat.reads(data.decode("utf-8"), as_version=4), release, released)
        for gid in spec.get("cells", {}):
            if gid in units:
                out.setdefault(gid, {})[author] = units[gid]
    return out


def calibrate_function(
    versions: dict[str, Unit], reference: Unit | None, leave_out: str | None = None, margin: float = MARGIN
) -> dict:
    """``copy_review.calibrate`` of one graded function from its independent versions (``leave_out``'s left out)."""
    prints = {author: set(unit.prints) for author, unit in versions.items() if author != leave_out}
    return calibrate(prints, set(reference.prints) if reference is not None else None, margin)


def _submitted_units(lesson: str, release, released) -> dict[str, dict[str, Unit]]:
    """{learner: {grade_id: unit}} of the sample class's tracked submissions of ``lesson`` (the one notebook in
    each learner's folder, as the grader picks it), the unreadable ones left out."""
    out = {}
    for folder in sorted(p for p in SUBMITTED.iterdir() if (p / lesson).is_dir()):
        files = sorted((folder / lesson).glob("*.ipynb"))
        if len(files) != 1:
            continue
        nb, _ = read_notebook(files[0].read_text(encoding="utf-8"))
        if nb is not None:
            out[folder.name] = _units(nb, release, released)
    return out


def _written_alone(learner: str, lesson: str, reference: dict[str, Unit]) -> bool:
    """Every code answer of ``lesson`` is the honest learner's own (none kept from the worked answers)."""
    spec = runpy.run_path(str(CASES / f"{learner}.py"))["CASE"].get(lesson)
    return spec is not None and (spec.get("base") == "release" or set(reference) <= set(spec.get("cells", {})))


def collect(reference_of: Callable[[str], nbformat.NotebookNode] = _default_reference) -> dict:
    """What the review of the sample class is computed from, per lesson: the reference's units, the independent
    versions', the sample learners' (``reference_of(lesson)``: the lesson's source notebook, worked answers)."""
    lessons = {}
    started = time.process_time()
    for lesson in LESSONS:
        release = _released(lesson)
        released = released_prints(release)
        reference, _ = notebook_units(reference_of(lesson), release, released)
        lessons[lesson] = {
            "reference": reference,
            "versions": independent_versions(lesson, release, released),
            "learners": _submitted_units(lesson, release, released),
            "honest": [h for h in HONEST if _written_alone(h, lesson, reference)],
        }
    return {"lessons": lessons, "seconds": round(time.process_time() - started, 1)}


def evaluate(data: dict, margin: float = MARGIN) -> dict:
    """The calibration and the precision and recall of the copy flags for one ``margin`` (module docstring)."""
    functions: dict[str, dict] = {}
    held_out: list[bool] = []  # each independent version, flagged with its author left out of the calibration
    positives, negatives = {}, {}
    for lesson, d in data["lessons"].items():
        reference, versions, learners = d["reference"], d["versions"], d["learners"]
        functions[lesson] = {
            gid: calibrate_function(versions.get(gid, {}), reference.get(gid), margin=margin)
            for gid in sorted(reference)
        }
        for gid, by_author in versions.items():
            for author, unit in by_author.items():
                limits = calibrate_function(by_author, reference.get(gid), leave_out=author, margin=margin)
                if len(set(unit.prints) - set(limits["common"])) < MIN_PRINTS or limits["reference_max"] is None:
                    continue  # too short to compare, or nothing to compare it with
                kept = {gid: reference[gid]} if gid in reference else {}
                held_out.append(any(m.flagged for m in compare(lesson, {author: {gid: unit}}, kept, {gid: limits})))
        flags = copy_flags(compare(lesson, learners, reference, functions[lesson]))
        for learner, copied in COPIES.items():
            if copied == lesson:
                positives[learner] = sorted(flags.get((learner, lesson), []))
        for learner in d["honest"]:
            if learner not in learners:
                continue
            loo = {
                gid: calibrate_function(versions.get(gid, {}), reference.get(gid), leave_out=learner, margin=margin)
                for gid in reference
            }
            mine = copy_flags(compare(lesson, learners, reference, loo)).get((learner, lesson), [])
            negatives[f"{learner}/{lesson}"] = sorted(mine)
    found = sum(any(f.startswith("copies-reference") for f in v) for v in positives.values())
    false = sum(any(f.split(":")[0] in COPY_FLAGS for f in v) for v in negatives.values())
    return {
        "rule": {"margin": margin, "cap": CAP, "min_prints": MIN_PRINTS},
        "functions": functions,
        "positives": positives,
        "negatives": negatives,
        "found": found,
        "false_positives": false,
        "recall": found / len(positives) if positives else 0.0,
        "precision": found / (found + false) if found + false else 1.0,
        "held_out_flagged": sum(held_out),
        "held_out_versions": len(held_out),
    }


SWEEP = (0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40)  # the margins the README compares


def review_sample_class(reference_of: Callable[[str], nbformat.NotebookNode] = _default_reference) -> dict:
    """``evaluate`` at the grader's margin, with the same figures for every margin of ``SWEEP``."""
    data = collect(reference_of)
    review = evaluate(data)
    review["sweep"] = [
        {k: v for k, v in evaluate(data, m).items() if k not in ("functions", "positives", "negatives")} for m in SWEEP
    ]
    review["seconds"] = data["seconds"]
    return review


def calibration_json(review: dict) -> str:
    """The text of ``copy_calibration.json`` (the thresholds the grader reads)."""
    data = {
        "_comment": "Generated by `python -m autograde.pipeline review --calibrate` (autograde/sample_class/"
        "copy_calibration.py): per graded function, the similarity its independent honest versions reach to the "
        f"reference and to each other, and the thresholds (max + {MARGIN}; none above {CAP}).",
        "rule": review["rule"],
        "functions": review["functions"],
    }
    return json.dumps(data, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _sweep_table(review: dict, language: str) -> str:
    head = (
        "| 余量 | 召回率 | 精确率 | 留一检验误标 |\n| --- | --- | --- | --- |"
        if language == "zh"
        else "| margin | recall | precision | flagged in leave-one-out |\n| --- | --- | --- | --- |"
    )
    rows = [
        f"| {row['rule']['margin']:.2f}{' ←' if row['rule']['margin'] == review['rule']['margin'] else ''} "
        f"| {row['found']}/{len(review['positives'])} | {_percent(row['precision'])} "
        f"| {row['held_out_flagged']}/{row['held_out_versions']} |"
        for row in review["sweep"]
    ]
    return "\n".join([head, *rows])


def readme_section(review: dict, language: str) -> str:
    """The generated README section (Chinese or English) on the calibration, precision and recall."""
    rule = review["rule"]
    positives, negatives = len(review["positives"]), len(review["negatives"])
    found, false = review["found"], review["false_positives"]
    held, held_total = review["held_out_flagged"], review["held_out_versions"]
    never = sorted(
        f"`{gid}`"
        for functions in review["functions"].values()
        for gid, f in functions.items()
        if f["versions"] and f["reference_max"] is not None and f["reference_threshold"] is None
    )
    wrong = "; ".join(
        f"{key.split('/')[0][:3]}/{key.split('/')[1][:5]} " + " ".join(f"`{f}`" for f in flags)
        for key, flags in review["negatives"].items()
        if flags
    )
    missed = ", ".join(k[:3] for k, v in review["positives"].items() if not any(f.startswith("copies") for f in v))
    if language == "zh":
        return (
            f"- 阈值（每个评分函数一个，`grpo_grader/copy_calibration.json`）：该函数的独立诚实实现（三个校准学员 "
            f"`sample_class/calibration/k*.py` 与诚实的示例学员自己写的答案，每个函数至少 3 个）与参考答案的最高相似度"
            f" + {rule['margin']:g}；它们两两之间（含参考答案）的最高相似度 + {rule['margin']:g} 是学员之间的阈值；"
            f"至少 {COMMON} 个独立实现共有的指纹是规格决定的惯用写法，比较时不计；"
            f"阈值超过 {rule['cap']:g} 的不标记（规格几乎只允许一种写法）：{', '.join(never) or '无'}；"
            f"少于 {rule['min_prints']} 个指纹的单元（选择题、一行的答案）太短，不比较。\n"
            f"- 示例班级上：{positives} 个抄袭（f03 与六种伪装 c01–c06）找到 {found} 个"
            f"{'（漏掉 ' + missed + '）' if missed else ''}，召回率 {_percent(review['recall'])}；"
            f"{negatives} 份诚实作业（s02 自己写完的各课、h01 的第 4 课；每份都用不含该学员的校准判定）误标 {false} 份"
            f"{'（' + wrong + '）' if wrong else ''}，精确率 {_percent(review['precision'])}。\n"
            f"- 留一检验：{held_total} 个独立实现各自用不含其作者的校准判定，{held} 个会被标出"
            f"（{_percent(held / held_total if held_total else 0)}），约是一份新的诚实答案被标出的机会；标记只提示人工复核。\n"
            f"- 余量的选择（同一批数据）：\n\n{_sweep_table(review, language)}\n\n"
            f"- 以上由 `python -m autograde.pipeline review --calibrate` 计算并写入本节与校准文件，"
            f"`tests/test_copy_review.py` 重新计算并核对。"
        )
    return (
        f"- Thresholds (one per graded function, `grpo_grader/copy_calibration.json`): the highest similarity to the "
        f"reference reached by the function's independent honest versions (the three calibration learners "
        f"`sample_class/calibration/k*.py` and the answers the honest sample learners wrote themselves, at least 3 per "
        f"function) + {rule['margin']:g}; the highest similarity between any two of them (the reference included) + "
        f"{rule['margin']:g} is the threshold between learners; fingerprints shared by at least {COMMON} independent "
        f"versions are the contract's idiom and left out of every comparison; where a threshold passes {rule['cap']:g} "
        f"the function is "
        f"not flagged (its contract leaves about one way to write it): {', '.join(never) or 'none'}; units with fewer "
        f"than {rule['min_prints']} fingerprints (multiple-choice and one-line answers) are too short to compare.\n"
        f"- On the sample class: {found} of the {positives} copies (f03 and the six disguises c01–c06) found"
        f"{' (missed: ' + missed + ')' if missed else ''}, recall {_percent(review['recall'])}; {false} of the "
        f"{negatives} honest submissions (the lessons s02 wrote alone, h01's lesson 4; each judged by a calibration "
        f"without that learner) flagged{' (' + wrong + ')' if wrong else ''}, precision "
        f"{_percent(review['precision'])}.\n"
        f"- Leave-one-out: each of the {held_total} independent versions judged by a calibration without its author: "
        f"{held} would be flagged ({_percent(held / held_total if held_total else 0)}), about the chance that a new "
        f"honest answer is flagged; a flag only asks for a human look.\n"
        f"- The choice of the margin (same data):\n\n{_sweep_table(review, language)}\n\n"
        f"- Computed by `python -m autograde.pipeline review --calibrate`, which writes this section and the "
        f"calibration file; `tests/test_copy_review.py` recomputes and compares them."
    )


def write(review: dict, readme: Path) -> list[Path]:
    """Write the calibration JSON and the README section; the paths that changed."""
    from autograde.commands.settings import _with_generated

    changed = []
    text = calibration_json(review)
    if not CALIBRATION.exists() or CALIBRATION.read_text(encoding="utf-8") != text:
        CALIBRATION.write_text(text, encoding="utf-8")
        changed.append(CALIBRATION)
    current = readme.read_text(encoding="utf-8")
    wanted = _with_generated(current, "copy-review", lambda language: readme_section(review, language))
    if wanted != current:
        readme.write_text(wanted, encoding="utf-8")
        changed.append(readme)
    return changed
