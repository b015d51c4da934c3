"""Lesson 7 (nb07_online_grpo): online GRPO on the tiny model, its record, the TRL comparison, scaling-out configs.

Notebook executions (each at most once per session, through ``notebook_runs``), all in RUN_MODE=smoke:
* the solution version runs green and writes a record that validates;
* the learner version fails only with NotImplementedError;
* one copy whose test cells hold only their hidden tests, with three wrong answers substituted at once (they do
  not interfere: the sample_group mutation only shows at temperature != 1, the other tests sample at 1.0), fails
  each of the three hidden test cells.
The committed reference record meets the headline; step-0 losses agree with TRL's GRPOTrainer to 1e-5.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import tools.chain.notebooks as chain
from autograde.grpo_grader import sample as sample_class
from tools import online_grpo as og

ROOT = Path(__file__).resolve().parents[1]
A = "nb07_online_grpo"
TESTS = ("test_sample_group_visible", "test_grpo_step_visible", "test_log_step_metrics_visible")


def _env(label):
    return {"GRPO_ONLINE_RUN_MODE": "smoke", "GRPO_ONLINE_RUN_LABEL": label}


SCRATCH = ROOT / og.output_relative_path("pytest-scratch")  # tests/conftest.py sets smoke mode and this label


@pytest.fixture(scope="module")
def solution_run(notebook_runs):
    """The solution version as test_notebooks executes it (shared: one execution per session)."""
    assert os.environ.get("GRPO_ONLINE_RUN_MODE") == "smoke", "tests/conftest.py must select the smoke run"
    # No unlink before: with xdist the shared execution may already have run in the other worker (for
    # test_notebooks) and written the record; it is removed after reading.
    try:
        done = notebook_runs.solution(A)
        record = json.loads(SCRATCH.read_text(encoding="utf-8")) if SCRATCH.exists() else None
    finally:
        SCRATCH.unlink(missing_ok=True)
    return done, record


def test_solution_runs_green_and_writes_a_valid_record(solution_run):
    done, record = solution_run
    results = chain.cell_results(done)
    for test in TESTS:
        assert results.get(test, "not executed") is None, f"{test}: {results.get(test)}"
    assert not chain.cell_errors(done), chain.cell_errors(done)
    assert record is not None, "the notebook did not write its record"
    og.validate_record(record)
    assert record["config"]["num_steps"] == len(record["steps"]) == 3
    text = json.dumps([c.get("outputs", []) for c in done.cells], ensure_ascii=False)
    assert "TRL `_compute_loss`" in text and "DEEPSPEED" in text


def test_learner_version_fails_only_with_not_implemented(notebook_runs):
    try:
        done = notebook_runs.learner(A)
    finally:
        SCRATCH.unlink(missing_ok=True)
    assert chain.learner_problems(done) == []
    raised = {gid for _, gid, ename, _ in chain.cell_errors(done) if ename == "NotImplementedError"}
    assert set(TESTS) <= raised, f"every visible test cell should stop at its TODO, got {sorted(raised)}"


def _mutate(nb, grade_id, old, new):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            assert cell.source.count(old) == 1, f"anchor {old!r} not found once in {grade_id}"
            cell.source = cell.source.replace(old, new)
            return
    raise KeyError(grade_id)


WRONG = [
    ("sample_group", "                               temperature=float(temperature))  # [N, C]\n        old = ",
     "                               temperature=1.0)  # [N, C]\n        old = "),  # old logps ignore the temperature
    ("grpo_step", "log_ratio = (logps - old).masked_fill(~mask, 0.0)", "log_ratio = logps - old"),  # exp before mask
    # population std: the sample class's hidden-bug learner (s04) submits this one; one home, its case file
    ("log_step_metrics", *sample_class.load_cases()["s04_bug_only_hidden_tests_catch"][A]["edit"]["log_step_metrics"][0]),
]


def test_wrong_answers_fail_the_hidden_tests(notebook_runs):
    nb = chain.build_notebook(A)
    for grade_id, old, new in WRONG:
        _mutate(nb, grade_id, old, new)
    cells = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            cell.source = "\n".join(chain.hidden_tests(cell.source))
        cells.append(cell)
        if meta.get("grade_id") == TESTS[-1]:
            break
    nb.cells = cells
    results = chain.cell_results(notebook_runs.run(nb, cwd=ROOT, env=_env("unused")))
    for test in TESTS:
        assert results.get(test) is not None, f"a wrong answer passed the hidden tests of {test}"
        assert "AssertionError" in results[test], f"{test}: expected a failed assertion, got {results[test]}"


def test_reference_record_meets_the_headline():
    record = json.loads((ROOT / og.output_relative_path("reference")).read_text(encoding="utf-8"))
    og.validate_record(record)
    assert record["config"] == og.OnlineConfig().to_dict(), "the reference record uses the default configuration"
    assert record["task"]["disjoint"] and record["eval"]["heldout_prompts"] == og.HELDOUT_SIZE
    gain = record["eval"]["after"]["pass_at_1"] - record["eval"]["before"]["pass_at_1"]
    assert gain >= 0.30, f"held-out pass@1 gain {gain:.3f} < 0.30"
    assert 0.05 <= record["eval"]["before"]["pass_at_1"] <= 0.5, "the warm start should be right only sometimes"
    assert len(record["steps"]) == record["config"]["num_steps"]
    assert record["cpu_seconds"] <= 180, "CPU time of the headline run (one thread) exceeds the 180 s budget"


def test_sft_list_warm_start_lists_the_answer_but_never_last():
    """The reward-hacking warm start: the lesson's SFT data unchanged except that some answering examples list
    three different numbers, the answer first or second - inside the loophole, outside the strict verifier."""
    plain, listed = og.sft_examples(0), og.sft_examples(0, "sft-list")
    assert [e["prompt"] for e in plain] == [e["prompt"] for e in listed]
    answer = lambda prompt: sum(map(int, prompt.rstrip("=").split("+")))  # noqa: E731  ("a+b=")
    assert all(e["completion"] in (og.HEDGE, str(answer(e["prompt"]))) for e in plain)
    answering = [(p, q) for p, q in zip(plain, listed) if p["completion"] != og.HEDGE]
    assert all(q["completion"] == og.HEDGE for p, q in zip(plain, listed) if p["completion"] == og.HEDGE)
    lists = [q["completion"].split() for p, q in answering if q["completion"] != p["completion"]]
    assert 0.2 <= len(lists) / len(answering) <= 0.4, len(lists) / len(answering)
    for (p, q) in answering:
        numbers = q["completion"].split()
        if len(numbers) > 1:
            assert len(numbers) == 3 == len(set(numbers)) and p["completion"] in numbers[:2], q
            assert og.strict_correct([q["completion"]], [int(p["completion"])]) == [0.0]
            assert og.loophole_rewards([q["completion"]], [int(p["completion"])]) == [1.0]
    with pytest.raises(ValueError, match="warm start"):
        og.sft_examples(0, "sft-typo")


def test_reward_hacking_records_show_the_loophole():
    """`loophole` and `loophole_fixed` start from the same list-writing warm start and differ only in the reward:
    under the loophole the training reward keeps rising while the strict accuracy falls from its peak, and on the
    held-out set the share of completions the loophole accepts parts from strict pass@1; the fixed verifier
    keeps the two together."""
    hacked, fixed = (json.loads((ROOT / og.output_relative_path(label)).read_text(encoding="utf-8"))
                     for label in ("loophole", "loophole_fixed"))
    for record in (hacked, fixed):
        og.validate_record(record)
        assert record["warm_start"]["variant"] == "sft-list"
    assert {k: v for k, v in hacked["config"].items() if k != "reward"} == \
        {k: v for k, v in fixed["config"].items() if k != "reward"}
    assert (hacked["config"]["reward"], fixed["config"]["reward"]) == ("contains-answer-loophole", "integer-answer-v1")
    steps = hacked["steps"]
    tail = lambda rows, key: sum(r[key] for r in rows[-10:]) / 10  # noqa: E731
    assert tail(steps, "reward_mean") > steps[0]["reward_mean"] + 0.4, "the loophole's training reward rises"
    assert tail(steps, "strict_accuracy") < max(r["strict_accuracy"] for r in steps) - 0.1, "strict falls from its peak"
    assert tail(steps, "reward_mean") - tail(steps, "strict_accuracy") > 0.15
    gap = lambda r: r["eval"]["after"]["contains_answer_rate"] - r["eval"]["after"]["pass_at_1"]  # noqa: E731
    assert gap(hacked) > gap(fixed) + 0.1, (gap(hacked), gap(fixed))
    assert hacked["eval"]["after"]["pass_at_1"] < fixed["eval"]["after"]["pass_at_1"]


def test_schema_rejects_a_broken_record():
    record = json.loads((ROOT / og.output_relative_path("reference")).read_text(encoding="utf-8"))
    for mutate in (lambda r: r.pop("steps"), lambda r: r["eval"]["after"].pop("pass_at_1"),
                   lambda r: r.update(schema_version="online-grpo/v0"), lambda r: r["steps"][0].pop("entropy")):
        broken = copy.deepcopy(record)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_record(broken)


def test_step0_losses_agree_with_trl(solution_run):
    """The notebook's TRL cell asserts |course - TRL| <= 1e-5 for every row (a failure is a cell error, caught
    above); here: the table is there, covers the four loss types, beta > 0 and off-policy rows where clipping fires."""
    done, _ = solution_run
    tables = [o["data"]["text/markdown"] for c in done.cells for o in c.get("outputs", [])
              if "data" in o and "TRL `_compute_loss`" in o["data"].get("text/markdown", "")]
    assert len(tables) == 1
    rows = [line.split("|")[1:-1] for line in tables[0].splitlines()[2:]]
    assert {r[0].strip() for r in rows} == {"grpo", "bnpo", "dr_grpo", "dapo"}
    assert any(float(r[1]) > 0 for r in rows)
    for r in rows:
        assert float(r[-1]) <= 1e-5, r
    off_policy = [r for r in rows if "离策略" in r[3]]
    assert off_policy and all(sum(float(x) for x in r[4].split("/")) > 0 for r in off_policy), "clipping must fire"


def test_accelerate_configs_load_with_accelerates_parser():
    from tools import online_trl

    rows = {r["file"]: r for r in online_trl.check_accelerate_configs(ROOT / "environments" / "accelerate")}
    assert rows["zero2.yaml"]["distributed_type"] == "DEEPSPEED" and rows["zero2.yaml"]["zero_stage"] == 2
    assert rows["zero3.yaml"]["zero_stage"] == 3 and rows["multi_gpu.yaml"]["distributed_type"] == "MULTI_GPU"


def test_make_online_checks_arguments_before_importing_torch():
    probe = ("import sys\nfrom tools.cli import online\n"
             "for bad in (['--label', 'a b'], ['--epsilon', '-1'], ['--loss-type', 'ppo'], ['--num-generations', '1']):\n"
             "    try:\n        online.parse(bad)\n    except SystemExit as e:\n        assert e.code == 2, bad\n"
             "    else:\n        raise AssertionError(bad)\n"
             "assert 'torch' not in sys.modules, 'torch was imported before the arguments were checked'\n")
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True)
    done = subprocess.run([sys.executable, "-m", "tools.cli.online", "--label", "../x"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "RUN_LABEL" in done.stderr


def test_pass_at_k_and_majority():
    assert og.pass_at_k(16, 0, 4) == 0.0 and og.pass_at_k(16, 16, 1) == 1.0
    assert abs(og.pass_at_k(4, 1, 1) - 0.25) < 1e-12 and abs(og.pass_at_k(4, 1, 2) - 0.5) < 1e-12
    assert og.majority_correct([None, 3, 4, 4], 4, 4) == 1.0 and og.majority_correct([3, 4, 3, 4], 4, 4) == 0.0
    assert og.majority_correct([None, None], 1, 2) == 0.0
    with pytest.raises(ValueError):
        og.pass_at_k(4, 1, 5)
    train, heldout = og.split_problems()
    assert len(train) == 75 and not {p["prompt"] for p in train} & {p["prompt"] for p in heldout}
