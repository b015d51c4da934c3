"""The oracles (the trusted side, fast): every test cell has one whose cases come from the seed, masks stay ragged,
the results are parsed as plain data and judged, plain nbgrader grades the worked answers of lesson 3, and nb01's
non-float-rewards contract passes honest spellings and fails a converting answer. The fairness of each oracle:
tests/test_oracle_fairness.py; the rest of the pipeline: tests/test_autograde.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from autograde_helpers import ROOT, nb01_answers, pipeline_env  # tests/autograde_helpers.py

from autograde.grpo_grader import judging, wire
from autograde.grpo_grader import oracle as oracle_lib
from autograde.grpo_grader.course import load_settings
from autograde.grpo_grader.oracles import oracle_assignments
from autograde.sample_class import build as sample_class

ORACLES = oracle_assignments()


def _test_cells(assignment: str) -> set[str]:
    nb = nbformat.read(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.cell_type == "code"
        and c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
    }


def test_every_test_cell_has_an_oracle_and_cases_come_from_the_seed():
    """Each oracle covers exactly its notebook's test cells, draws its
    inputs from the seed (two seeds differ, one seed repeats) and keeps every flag off by default."""
    covered: dict[str, set[str]] = {}
    for name in ORACLES:
        oracle = oracle_lib.load_oracle(name)
        assert oracle is not None, name
        covered.setdefault(name, set()).update(oracle.tests)
        one, again, other = (oracle.cases(seed) for seed in ("seed-a", "seed-a", "seed-b"))
        for index in range(8):  # every seed must give well-formed cases
            oracle.cases(f"seed-{index}", {k: True for k in getattr(oracle.module, "FLAGS", {})})
        wire = lambda cases: json.dumps([c.wire() for c in cases], sort_keys=True)  # noqa: E731
        assert wire(one) == wire(again), f"{name}: cases must be a function of the seed"
        assert wire(one) != wire(other), f"{name}: cases must change with the seed"
        assert {c.test for c in one} == set(oracle.tests), f"{name}: every test cell has cases"
        assert not any(getattr(oracle.module, "FLAGS", {}).values()), f"{name}: flags are off by default"
        flagged = oracle.cases("seed-a", {k: True for k in getattr(oracle.module, "FLAGS", {})})
        assert len(flagged) >= len(one)
        for case in one:  # the expectations never travel to the kernel
            assert "expect" not in case.wire() and "grads" not in case.wire()
    for notebook, tests in covered.items():
        assert tests == _test_cells(notebook), f"{notebook}: oracle tests != the notebook's test cells"
    assert oracle_lib.load_oracle("nb99_no_such_lesson") is None


def test_ragged_masks_are_ragged_for_every_seed():
    """The oracles' masks always have two row lengths (where the shape allows it): with equal lengths a token
    mean equals the per-candidate mean, and s10's score moved with the seed (6 instead of 4 in ~5 % of seeds)."""
    from autograde.grpo_grader.oracles._common import ragged_mask

    for index in range(3000):
        gen = torch.Generator().manual_seed(index)
        rows, cols, min_valid = 2 + index % 6, 1 + index % 4, 1 + index % 2
        prefix = index % 3 == 0
        mask = ragged_mask(gen, rows, cols, prefix=prefix, min_valid=min(min_valid, cols))
        counts = mask.sum(dim=1)
        assert mask.shape == (rows, cols) and mask.dtype == torch.bool
        assert int(counts.min()) >= min(min_valid, cols)
        if prefix:  # a prefix mask: valid tokens first
            assert torch.equal(mask, torch.arange(cols).unsqueeze(0) < counts.unsqueeze(1))
        if cols > min(min_valid, cols):
            assert len(set(counts.tolist())) >= 2, (rows, cols, prefix, mask)


def test_results_are_parsed_as_plain_data_and_checked():
    """What the learner side sends is data: wrong kinds, broken tensors, deep nesting and missing results fail with a
    reason; a tensor subclass arrives as an object and fails; a ValueError is the interpreter's own class (a learner's
    class that claims the name does not pass); an input sent back changed, or not sent back, fails a case that must
    leave its inputs alone; the first line of a case counts."""
    from autograde.grpo_grader.judging import judge
    from autograde.grpo_grader.vocabulary import Case, Close, Raises

    x = torch.tensor([1.0, float("nan")])
    case = Case("t", "f", (x,), {}, Close(torch.tensor([1.0, 2.0])))
    same = {"args": {"0": wire.encode(x)}, "kwargs": {}}
    good = {"status": "returned", "value": wire.encode(torch.tensor([1.0, 2.0])), "inputs": same}
    assert judge(case, good, "x") == (True, "")
    for record, reason in [
        ({**good, "value": {"__object__": "__main__._Mirror"}}, "_Mirror"),
        ({**good, "value": {"__tensor__": "float32", "shape": [3], "data": [1.0, 2.0]}}, "不符"),
        ({**good, "value": {"__tensor__": "float64", "shape": [2], "data": [1.0, 2.0]}}, "dtype"),
        ({**good, "value": {"__tensor__": "float32", "shape": [2], "data": ["1", 2.0]}}, "只能是数"),
        ({**good, "value": {"__tensor__": "object", "shape": [2], "data": [1, 2]}}, "格式不对"),
        ({**good, "value": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, "嵌套过深"),
        ({**good, "inputs": {"args": {"0": wire.encode(torch.tensor([0.0, float("nan")]))}}}, "原地修改"),
        ({**good, "inputs": {"args": {"0": wire.encode(torch.tensor([1.0, 0.0]))}}}, "原地修改"),
        ({**good, "inputs": {}}, "原地修改"),
        (
            {"status": "raised", "mro": [["builtins", "NotImplementedError"]], "message": "请先完成这个 TODO"},
            "NotImplementedError: 请先完成这个 TODO",
        ),
        ({"status": "missing"}, "找不到函数"),
        (None, "未运行"),
    ]:
        ok, message = judge(case, record, "未运行的原因")
        assert not ok and reason in message, (record, message)
    raises = Case("t", "f", (), {}, Raises("ValueError"))
    sub = [["__main__", "E"], ["builtins", "ValueError"], ["builtins", "Exception"], ["builtins", "BaseException"]]
    assert judge(raises, {"status": "raised", "mro": sub, "message": ""}, "")[0]
    forged = [["(learner) builtins", "ValueError"], ["builtins", "TypeError"], ["builtins", "Exception"]]
    ok, message = judge(raises, {"status": "raised", "mro": forged, "message": "评分器：通过"}, "")
    assert not ok and "学员程序输出" in message, message
    for wrong in (["ValueError"], "ValueError", [["builtins"]], [[1, 2]]):
        assert not judge(raises, {"status": "raised", "mro": wrong}, "")[0], wrong
    assert not judge(raises, {"status": "returned", "value": None}, "")[0]
    cases, _, problem = judging.parse_results(
        b'{"case": "a", "status": "returned", "value": 1}\nnot json\n'
        b'{"case": "a", "status": "returned", "value": 2}\n' + b"[" * 100000 + b"\n"
    )
    assert cases["a"]["value"] == 1 and "malformed" in problem


def _plain_nbgrader_autograde(lesson: str, released: Path, tmp_path: Path) -> tuple[float, Path]:
    """``nbgrader autograde`` itself (no pipeline, no sandbox: the hidden tests run in the kernel through
    ``run_in_kernel``) of s01's worked answers to ``lesson`` in a copy of the released course: (the submission's
    score in ``gradebook.db``, the autograded notebook)."""
    from nbgrader.api import Gradebook

    course = tmp_path / "autograde"
    shutil.copytree(released, course)
    target = course / "submitted" / "s01" / lesson
    shutil.copytree(sample_class.SUBMITTED / "s01_worked_answers" / lesson, target)
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", lesson, "--student=s01", "--force"],
        cwd=course,
        env={**pipeline_env(), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", load_settings(course).course_id) as gb:
        score = gb.find_submission(lesson, "s01").score
    return score, course / "autograded" / "s01" / lesson / f"{lesson}.ipynb"


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ["nb03a_cispo_trace_lab", "nb03b_loss_family_trl"])
def test_plain_nbgrader_autograde_grades_the_worked_answers(lesson, released_course, tmp_path):
    """Plain ``nbgrader autograde`` (what autograde/README.md says grades without the pipeline): the worked answers
    of a lesson with hidden tests get every automatic point in ``gradebook.db`` (sample_class/expected.json), and
    nbgrader keeps the autograded notebook. Each hidden region ends with ``run_in_kernel(...)``, whose value nbgrader
    reads as partial credit: a count of cases above the cell's points used to fail the whole notebook."""
    score, autograded = _plain_nbgrader_autograde(lesson, released_course["course"], tmp_path)
    assert score == sample_class.expected()["s01_worked_answers"][lesson]["score"]
    executed = nbformat.read(autograded, as_version=4)
    errors = [
        o.get("evalue", "")[:200] for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors, errors


def test_nb01_non_float_rewards_are_a_stated_contract():
    """nb01's TODO 1 lists non-float rewards among its ValueError contracts, and the hidden cell checks it: honest
    spellings of the check pass (s02's ``is_floating_point``, a dtype whitelist), an answer that converts integer or
    bool rewards to float instead fails that case only, with its Chinese message."""
    from autograde.grpo_grader.oracles import run_in_kernel

    lesson, test = "nb01_group_advantages", "test_compute_group_advantages_hidden"
    namespace = nb01_answers()
    assert run_in_kernel(lesson, test, namespace, seed="in-kernel-test") is None
    honest = namespace["compute_group_advantages"]
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

    def whitelist(rewards, group_ids, eps=1e-6):
        if torch.is_tensor(rewards) and rewards.dtype not in floats:
            raise ValueError("rewards 必须是浮点张量")
        return honest(rewards, group_ids, eps)

    def converts(rewards, group_ids, eps=1e-6):
        if torch.is_tensor(rewards) and not rewards.is_floating_point():
            rewards = rewards.double()
        return honest(rewards, group_ids, eps)

    namespace["compute_group_advantages"] = whitelist
    assert run_in_kernel(lesson, test, namespace, seed="in-kernel-test") is None
    namespace["compute_group_advantages"] = converts
    with pytest.raises(AssertionError, match="rewards 不是浮点张量"):
        run_in_kernel(lesson, test, namespace, seed="in-kernel-test")
