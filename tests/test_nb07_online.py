"""Lesson 7 (nb07_online_grpo): online GRPO on the tiny model, its record, the TRL comparison, scaling-out configs.

Notebook executions (each at most once per session, through ``notebook_runs``), all in RUN_MODE=smoke:
* the solution version runs green and writes a record that validates;
* the learner version fails only with NotImplementedError;
* one copy whose test cells hold only their hidden tests, with three wrong answers substituted at once (they do
  not interfere: the sample_group mutation only shows at temperature != 1, the other tests sample at 1.0), fails
  each of the three hidden test cells.
The committed reference record and the 3-seed summary meet the headline; the ablations have 3-seed records and
verdicts from their intervals; grpo_step's loss and gradient agree with TRL's GRPOTrainer to 1e-5 relative over the
whole matrix, and the comparison fails when one side drops an option (slow); maj@1 equals pass@1; learners' records
go to the git-ignored benchmarks/results/local/online/; the real_gpu preset trains a LoRA adapter only (slow).
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
from autograde.sample_class import build as sample_class
from tools import online_grpo as og
from tools.lessons.nb04_verifiable_rewards import verify_integer_response

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


@pytest.mark.slow
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
    assert "TRL 损失" in text and "DEEPSPEED" in text
    trl_cell = [c for c in done.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "demo_trl"]
    trl_text = json.dumps(trl_cell[0].get("outputs", []), ensure_ascii=False)
    for noise in ("FutureWarning", "it/s]"):
        at = trl_text.find(noise)
        assert at < 0, f"the TRL cell prints {noise}: {trl_text[max(0, at - 300) : at + 100]}"


@pytest.mark.slow
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
    (
        "sample_group",
        "                               temperature=float(temperature))  # [N, C]\n        old = ",
        "                               temperature=1.0)  # [N, C]\n        old = ",
    ),  # old logps ignore the temperature
    ("grpo_step", "log_ratio = (logps - old).masked_fill(~mask, 0.0)", "log_ratio = logps - old"),  # exp before mask
    # population std: the sample class's hidden-bug learner (s04) submits this one; one home, its case file
    (
        "log_step_metrics",
        *sample_class.load_cases()["s04_bug_only_hidden_tests_catch"][A]["edit"]["log_step_metrics"][0],
    ),
]


@pytest.mark.slow
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
    record = json.loads((ROOT / og.output_relative_path("reference", seed=0)).read_text(encoding="utf-8"))
    og.validate_record(record)
    # (records written before use_bias_correction_kl existed lack it; they used beta = 0, where it does nothing)
    assert og.OnlineConfig(**record["config"]).to_dict() == og.OnlineConfig().to_dict(), (
        "the reference record uses the default configuration"
    )
    assert record["task"]["disjoint"] and record["eval"]["heldout_prompts"] == og.HELDOUT_SIZE
    gain = record["eval"]["after"]["pass_at_1"] - record["eval"]["before"]["pass_at_1"]
    assert gain >= og.GOAL_CI_LOW, f"held-out pass@1 gain {gain:.3f} < {og.GOAL_CI_LOW}"
    low, high = og.START_RANGE  # issue 27: the warm start is right only sometimes
    assert low <= record["eval"]["before"]["pass_at_1"] <= high, "the warm start's held-out pass@1 is out of range"
    assert record["eval"]["before"]["outcomes"]["unparseable"] <= 0.20, "the warm start answers >= 80 % of the time"
    assert len(record["steps"]) == record["config"]["num_steps"]
    assert record["cpu_seconds"] <= 180, "CPU time of the headline run (one thread) exceeds the 180 s budget"


def test_sft_list_warm_start_lists_the_answer_but_never_last():
    """The reward-hacking warm start: the lesson's SFT data unchanged except that some bare answers list three
    different numbers, the answer first or second - inside the loophole, outside the strict verifier."""
    plain, listed = og.sft_examples(0), og.sft_examples(0, "sft-list")
    assert [e["prompt"] for e in plain] == [e["prompt"] for e in listed]
    answer = lambda prompt: sum(og.addends_of(prompt))  # noqa: E731
    assert all(e["completion"] in (str(answer(e["prompt"])), og.scratchpad(og.addends_of(e["prompt"]))) for e in plain)
    bare = [
        (p, q)
        for p, q in zip(plain, listed)
        if p["completion"] == str(answer(p["prompt"])) and len(og.addends_of(p["prompt"])) == og.ADDENDS
    ]
    assert all(
        q == p for p, q in zip(plain, listed) if "+" in p["completion"] or len(og.addends_of(p["prompt"])) < og.ADDENDS
    )
    lists = [q["completion"].split() for p, q in bare if q["completion"] != p["completion"]]
    assert 0.2 <= len(lists) / len(bare) <= 0.4, len(lists) / len(bare)
    for p, q in bare:
        numbers = q["completion"].split()
        if len(numbers) > 1:
            assert len(numbers) == 3 == len(set(numbers)) and p["completion"] in numbers[:2], q
            assert og.strict_correct([q["completion"]], [int(p["completion"])], verify_integer_response) == [0.0]
            assert og.loophole_rewards([q["completion"]], [int(p["completion"])]) == [1.0]
    with pytest.raises(ValueError, match="warm start"):
        og.sft_examples(0, "sft-typo")


def test_sft_mixes_shown_work_and_bare_answers():
    """The warm start's data: about SFT_SCRATCH_FRACTION of the SFT pool's problems answered with the running-sum
    scratchpad (whose last integer is the answer), the rest bare; every step a held-out scratchpad takes is a step
    some SFT scratchpad takes (the held-out problems are new as problems, not as steps)."""
    examples = og.sft_examples(0)
    four = [e for e in examples if len(og.addends_of(e["prompt"])) == og.ADDENDS]
    assert len(examples) == len(four) + og.SFT_FACT_COPIES * len(og.two_operand_facts())
    shown = [e for e in four if "+" in e["completion"]]
    assert abs(len(shown) / len(four) - og.SFT_SCRATCH_FRACTION) < 0.03
    for e in shown:
        assert e["completion"] == og.scratchpad(og.addends_of(e["prompt"]))
        assert verify_integer_response(e["completion"], sum(og.addends_of(e["prompt"])))["correctness"] == 1.0
    assert og.scratchpad((6, 7, 9, 4)) == "6+7=13, 13+9=22, 22+4=26"
    trained_steps = {step for e in shown for step in e["completion"].split(", ")}
    heldout_steps = {
        step for p in og.task_pools()["heldout"] for step in og.scratchpad(og.addends_of(p["prompt"])).split(", ")
    }
    assert heldout_steps <= trained_steps


def test_reward_hacking_records_share_their_start():
    """`loophole` and `loophole_fixed` start from the same list-writing warm start and differ only in the reward
    (their effects are read from the multi-seed intervals, test_ablation_verdicts_cover_every_comparison)."""
    hacked, fixed = (
        json.loads((ROOT / og.output_relative_path(label, seed=0)).read_text(encoding="utf-8"))
        for label in ("loophole", "loophole_fixed")
    )
    for record in (hacked, fixed):
        og.validate_record(record)
        assert record["warm_start"]["variant"] == "sft-list"
    assert {k: v for k, v in hacked["config"].items() if k != "reward"} == {
        k: v for k, v in fixed["config"].items() if k != "reward"
    }
    assert (hacked["config"]["reward"], fixed["config"]["reward"]) == ("contains-answer-loophole", "integer-answer-v1")


def test_ablation_verdicts_cover_every_comparison():
    """Every ablation the lesson discusses has a committed 3-seed record, and each prediction gets a verdict from
    the intervals; a verdict of a difference needs non-overlapping 95 % intervals (checked here from the numbers)."""
    verdicts = og.ablation_verdicts(ROOT)
    assert len(verdicts) == len(og.ABLATION_COMPARISONS)
    for v in verdicts:
        assert v["verdict"] != "missing", f"{v['a']} / {v['b']}: no multi-seed record"
        a, b = v["a_interval"], v["b_interval"]
        assert a["n"] >= 3 and b["n"] >= 3
        if v["verdict"] == "a > b":
            assert a["ci95"][0] > b["ci95"][1]
        elif v["verdict"] == "a < b":
            assert a["ci95"][1] < b["ci95"][0]
        else:
            assert a["ci95"][0] <= b["ci95"][1] and b["ci95"][0] <= a["ci95"][1]
    # the verdict logic itself: disjoint intervals are resolved, overlapping ones are not
    assert og.ablation_verdicts(ROOT, [("mu4", "mu4", "approx_kl", "")])[0]["verdict"] == "overlap"
    for _, label, _ in og.ABLATIONS:
        summary = og.load_seeds_summary(ROOT, label)
        assert summary is not None, f"{label}: no 3-seed summary"
        assert summary["task"]["id"] == og.TASK_ID


def test_schema_rejects_a_broken_record():
    record = json.loads((ROOT / og.output_relative_path("reference", seed=0)).read_text(encoding="utf-8"))
    for mutate in (
        lambda r: r.pop("steps"),
        lambda r: r["eval"]["after"].pop("pass_at_1"),
        lambda r: r.update(schema_version="online-grpo/v0"),
        lambda r: r["steps"][0].pop("entropy"),
    ):
        broken = copy.deepcopy(record)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_record(broken)


@pytest.mark.slow
def test_step0_table_is_in_the_notebook(solution_run):
    """The notebook's TRL cell asserts agreement and sensitivity itself (a failure is a cell error, caught above);
    here: its table is there and covers the whole matrix."""
    done, _ = solution_run
    tables = [
        o["data"]["text/markdown"]
        for c in done.cells
        for o in c.get("outputs", [])
        if "data" in o and "TRL 损失" in o["data"].get("text/markdown", "")
    ]
    assert len(tables) == 1
    rows = [[x.strip() for x in line.split("|")[1:-1]] for line in tables[0].splitlines()[2:]]
    assert {(r[0], float(r[1]), r[2] == "True") for r in rows} == {
        (m["loss_type"], m["beta"], m["use_bias_correction_kl"]) for m in online_trl_module().MATRIX
    }


def online_trl_module():
    from tools import online_trl

    return online_trl


@pytest.fixture(scope="module")
def agreement_rows():
    """The lesson's saved sample_group / grpo_step against GRPOTrainer on the agreement batch (about 40 s)."""
    import torch

    from tools.lessons.nb07_online_grpo import grpo_step, sample_group
    from tools.tiny_model import tiny_checkpoint_path

    online_trl = online_trl_module()
    torch.set_num_threads(1)
    policy, tokenizer = og.load_policy(og.sft_checkpoint_path(seed=0)[0])
    ref = online_trl.mixed_reference(policy, og.load_policy(tiny_checkpoint_path(seed=0))[0])
    train, _ = og.split_problems()
    batch = online_trl.agreement_batch(sample_group, policy, ref, tokenizer, train)
    return batch, online_trl.trl_agreement(sample_group, grpo_step, policy, ref, tokenizer, train)


@pytest.mark.slow
def test_trl_agreement_matrix_values_and_gradients(agreement_rows):
    """Every loss type x beta in {0, 0.04} x use_bias_correction_kl: loss and gradient agree with TRL to 1e-5
    relative, on a batch where they could differ (unequal lengths in groups, group advantage sums != 0, a real KL,
    perturbed old log-probs with clipping at both ends)."""
    online_trl = online_trl_module()
    batch, rows = agreement_rows
    mask, g = batch["completion_mask"], 4
    lengths = mask.sum(1).view(-1, g)
    assert bool((lengths.max(1).values > lengths.min(1).values).all()), "completion lengths differ in every group"
    assert bool((batch["advantages"].view(-1, g).sum(1).abs() > 1e-3).all()), "no group's advantages sum to 0"
    assert {(r["loss_type"], r["beta"], r["use_bias_correction_kl"]) for r in rows} == {
        (m["loss_type"], m["beta"], m["use_bias_correction_kl"]) for m in online_trl.MATRIX
    }
    assert len(rows) == 16
    for r in rows:
        assert r["agree"] and r["loss_rel"] <= 1e-5 and r["grad_rel"] <= 1e-5, r
        assert r["clip_ratio_low"] > 0 and r["clip_ratio_high"] > 0, "clipping fires at both ends"
        assert r["grad_norm"] > 0
        if r["beta"] > 0:
            assert r["kl_ref"] > 0.1, f"the reference differs from the policy (KL {r['kl_ref']})"


@pytest.mark.slow
def test_trl_agreement_fails_when_one_side_drops_an_option(agreement_rows):
    """Sensitivity: each row disagrees (> 1e-5 relative) when one side drops the option the row exercises: another
    loss type (bnpo and dapo are the same reduction on one process with one step per batch, and agree), on-policy
    old log-probs, epsilon_high = epsilon, and for beta > 0: beta = 0, and use_bias_correction_kl flipped on the
    course side or on TRL's. With beta = 0 TRL ignores use_bias_correction_kl: flipping it changes nothing."""
    _, rows = agreement_rows
    for r in rows:
        checks = r["sensitivity"]
        expected = {"on-policy old", "epsilon_high=epsilon"} | {
            f"loss_type={o}"
            for o in ("grpo", "bnpo", "dr_grpo", "dapo")
            if o != r["loss_type"] and {o, r["loss_type"]} != {"bnpo", "dapo"}
        }
        if r["beta"] > 0:
            expected |= {"beta=0", "course use_bias_correction_kl flipped", "TRL use_bias_correction_kl flipped"}
        assert set(checks) == expected, (r["loss_type"], sorted(checks))
        for name, check in checks.items():
            assert check["detected"], (r["loss_type"], r["beta"], r["use_bias_correction_kl"], name, check)
        for name, check in r["not_exercised"].items():
            assert not check["detected"], (name, check)
    same = {(r["loss_type"], r["beta"], r["use_bias_correction_kl"]): r["trl_loss"] for r in rows}
    assert all(same[("bnpo", b, c)] == same[("dapo", b, c)] for b in (0.0, 0.04) for c in (False, True))


def test_accelerate_configs_load_with_accelerates_parser():
    from tools import online_trl

    rows = {r["file"]: r for r in online_trl.check_accelerate_configs(ROOT / "environments" / "accelerate")}
    assert rows["zero2.yaml"]["distributed_type"] == "DEEPSPEED" and rows["zero2.yaml"]["zero_stage"] == 2
    assert rows["zero3.yaml"]["zero_stage"] == 3 and rows["multi_gpu.yaml"]["distributed_type"] == "MULTI_GPU"


def test_make_online_checks_arguments_before_importing_torch():
    probe = (
        "import sys\nfrom tools.cli import online\n"
        "for bad in (['--label', 'a b'], ['--epsilon', '-1'], ['--loss-type', 'ppo'], ['--num-generations', '1']):\n"
        "    try:\n        online.parse(bad)\n    except SystemExit as e:\n        assert e.code == 2, bad\n"
        "    else:\n        raise AssertionError(bad)\n"
        "assert 'torch' not in sys.modules, 'torch was imported before the arguments were checked'\n"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True)
    done = subprocess.run(
        [sys.executable, "-m", "tools.cli.online", "--label", "../x"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and "RUN_LABEL" in done.stderr


def test_make_online_flags_are_the_config_fields():
    """The command line is derived from OnlineConfig: one flag per field with the field's default and help, the
    ablations' documented ONLINE_ARGS parse, and the values are checked by OnlineConfig alone."""
    import dataclasses
    import shlex

    from tools.cli import online

    args, config = online.parse([])
    assert config == og.OnlineConfig()
    fields = dataclasses.fields(og.OnlineConfig)
    assert {f.name for f in fields} <= set(vars(args)) and all(f.metadata["help"] for f in fields)
    _, changed = online.parse(["--num-iterations", "4", "--no-use-bias-correction-kl", "--loss-type", "dapo"])
    assert changed == dataclasses.replace(
        og.OnlineConfig(), num_iterations=4, use_bias_correction_kl=False, loss_type="dapo"
    )
    for _, label, flags in og.ABLATIONS:
        online.parse(["--label", label, *shlex.split(flags)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.beta = -1.0  # checked once, when built: a built config cannot be made invalid


def test_pass_at_k_and_majority():
    assert og.pass_at_k(16, 0, 4) == 0.0 and og.pass_at_k(16, 16, 1) == 1.0
    assert abs(og.pass_at_k(4, 1, 1) - 0.25) < 1e-12 and abs(og.pass_at_k(4, 1, 2) - 0.5) < 1e-12
    # an unparseable sample votes for "no answer"; ties count 1/m; blocks of k samples are averaged
    assert og.majority_correct([None, 3, 4, 4], 4, 4) == 1.0 and og.majority_correct([3, 4, 3, 4], 4, 4) == 0.5
    assert og.majority_correct([None, None, None, 4], 4, 4) == 0.0, "most samples unparseable: no answer wins"
    assert og.majority_correct([None, 4, 4, 3], 4, 2) == 0.5 and og.majority_correct([None, None], 1, 2) == 0.0
    with pytest.raises(ValueError):
        og.majority_correct([1, 2], 1, 3)
    with pytest.raises(ValueError):
        og.pass_at_k(4, 1, 5)
    train, heldout = og.split_problems()
    assert len(heldout) == og.HELDOUT_SIZE and not {p["prompt"] for p in train} & {p["prompt"] for p in heldout}


def test_maj_at_1_equals_pass_at_1():
    """maj@1 is the fraction of right samples (pass@1) for every prompt, unparseable samples included; and over
    random draws maj@k of a prompt whose samples are right with probability p > 1/2 (others wrong or unparseable,
    spread over many values) rises with k, as a majority vote should."""
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.choice([1, 4, 16])
        parsed = [rng.choice([None, 3, 4, 5]) for _ in range(n)]
        right = sum(a == 4 for a in parsed) / n
        assert og.majority_correct(parsed, 4, 1) == right
        assert og.pass_at_k(n, sum(a == 4 for a in parsed), 1) == right
    draws = [[4 if rng.random() < 0.6 else rng.choice([None, 1, 2, 3, 5, 6]) for _ in range(16)] for _ in range(400)]
    maj = {k: sum(og.majority_correct(d, 4, k) for d in draws) / len(draws) for k in (1, 4, 16)}
    assert abs(maj[1] - 0.6) < 0.03 and maj[1] < maj[4] < maj[16], maj


def test_t_quantile_and_interval():
    for df, want in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert abs(og.t_quantile_975(df) - want) < 2e-3, (df, og.t_quantile_975(df))
    stat = og.mean_ci95([0.3, 0.4, 0.35])
    half = 4.303 * 0.05 / 3**0.5
    assert stat["mean"] == 0.35 and abs(stat["ci95"][0] - (0.35 - half)) < 1e-3 and stat["n"] == 3
    assert "t interval" in stat["method"]
    assert og.mean_ci95([0.2])["ci95"] is None
    with pytest.raises(ValueError):
        og.mean_ci95([])


def _fake_seed_records():
    record = json.loads((ROOT / og.output_relative_path("reference", seed=0)).read_text(encoding="utf-8"))
    records = []
    for seed, after in ((0, 0.45), (1, 0.5), (2, 0.55)):
        r = copy.deepcopy(record)
        r["config"]["seed"] = seed
        r["eval"]["after"]["pass_at_1"] = after
        records.append(r)
    return records


def test_seeds_summary_is_schema_checked():
    records = _fake_seed_records()
    summary = og.seeds_summary("pytest-seeds", records)
    og.validate_seeds_summary(summary)
    assert summary["schema_version"] == "online-grpo-seeds/v1"
    assert [e["seed"] for e in summary["seeds"]] == [0, 1, 2]
    before = records[0]["eval"]["before"]["pass_at_1"]
    assert abs(summary["gain_pass_at_1"]["mean"] - (0.5 - before)) < 1e-6
    low, high = summary["gain_pass_at_1"]["ci95"]
    assert low < summary["gain_pass_at_1"]["mean"] < high
    for mutate in (
        lambda s: s.pop("gain_pass_at_1"),
        lambda s: s["seeds"][0].pop("warm_start_hash"),
        lambda s: s.update(schema_version="online-grpo-seeds/v0"),
        lambda s: s["gain_pass_at_1"].pop("method"),
        lambda s: s["seeds"][1].update(pass_at_1_after=1.5),
    ):
        broken = copy.deepcopy(summary)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_seeds_summary(broken)
    other = copy.deepcopy(records)
    other[1]["config"]["num_steps"] += 1
    with pytest.raises(ValueError, match="seed"):
        og.seeds_summary("pytest-seeds", other)


def test_learner_records_go_to_the_ignored_local_folder():
    assert og.output_relative_path("reference").parent.as_posix() == "benchmarks/results/online"
    assert og.output_relative_path("mu4").parent.as_posix() == "benchmarks/results/online"
    assert og.seeds_summary_path("reference").as_posix() == "benchmarks/results/online/online-grpo-seeds_reference.json"
    for label in ("my_run", "notebook", "default", "pytest-scratch"):
        path = og.output_relative_path(label)
        assert path.parent.as_posix() == "benchmarks/results/local/online", path
        ignored = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} is not git-ignored"
    assert og.output_relative_path("my_run", seed=2).name == "online-grpo_my_run_seed2.json"
    tracked = subprocess.run(["git", "check-ignore", "-q", str(og.output_relative_path("reference"))], cwd=ROOT)
    assert tracked.returncode == 1, "the committed reference record must not be ignored"


def test_run_presets():
    assert set(og.RUN_PRESETS) == {"tiny_cpu", "smoke", "real_gpu"}
    assert og.preset_config("tiny_cpu") == og.OnlineConfig()
    real = og.RUN_PRESETS["real_gpu"]
    assert set(real["lora"]["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert 1e-6 <= og.preset_config("real_gpu").learning_rate <= 2e-5, "within TRL's range for a LoRA adapter"
    with pytest.raises(ValueError, match="RUN_MODE"):
        og.check_run_mode("gpu")


@pytest.mark.slow
def test_real_gpu_preset_trains_only_the_lora_adapter():
    """Two steps of the real_gpu preset on the CPU. On the course's tiny Qwen2-architecture checkpoint, not the
    Qwen-shaped one (0.5 B parameters: too heavy for a test on 2 cores; tools/device/gpu_check.sh runs that one on a
    GPU): LoRA r=16 on q/k/v/o, trainable count from the shapes, AdamW state for the adapter only, base unchanged."""
    import torch

    from tools.lessons.nb07_online_grpo import train_online_grpo
    from tools.tiny_model import tiny_checkpoint_path

    torch.set_num_threads(1)
    report = og.preset_check(train_online_grpo, "real_gpu", tiny_checkpoint_path(seed=0))
    assert report["passed"], report["checks"]
    assert report["trainable_parameters"] == report["expected_trainable"] == 14336  # 2 layers x 4 projections
    assert report["optimizer_state_numel"] == 2 * report["trainable_parameters"]
    assert report["trainable_parameters"] < 0.2 * report["total_parameters"]


def test_float_platforms_compare_only_the_keys_a_record_gives():
    here = {"machine": "x86_64", "cpu_vendor": "AuthenticAMD", "cpu_capability": "AVX2"}
    assert og.same_float_platform(dict(here), here)
    assert og.same_float_platform({"machine": "x86_64", "cpu_vendor": "AuthenticAMD"}, here)
    assert not og.same_float_platform(og.UNRECORDED_WARM_START_PLATFORM, here)  # the committed records: Intel
    assert not og.same_float_platform(dict(here, cpu_capability="AVX512"), here)
    assert not og.same_float_platform({}, here), "a record that says nothing matches no machine"
    built = og.float_platform()
    assert set(built) == {"machine", "cpu_vendor", "cpu_capability"} and all(built.values())
    assert og.warm_start_built_on({"warm_start": {"built_on": here}}) == here
    assert og.warm_start_built_on({"warm_start": {}}) == og.UNRECORDED_WARM_START_PLATFORM


@pytest.mark.slow
def test_committed_records_start_from_a_fresh_warm_start():
    """The warm-start hash in every committed record equals what this recipe (one torch thread) builds, "sft" for the
    lesson's runs, "sft-list" for the reward-hacking pair, wherever the build runs on the float platform that built
    the records' warm start (``og.float_platform``: CPU vendor and torch's vector width decide the last bits, and
    1,600 SFT steps carry them into other weights). ``make setup`` builds both into .cache (a fresh build on a fresh
    clone); a cache whose marker names another recipe or library version is rebuilt here first. On every platform:
    the records of one variant share one hash, and the seed summaries name only those hashes."""
    fresh, built_on = {}, {}
    for variant in og.WARM_STARTS:
        path = og.sft_checkpoint_path(seed=0, variant=variant)[0]
        fresh[variant] = og.content_hash(path)
        built_on[variant] = og.warm_start_platform_of(path) or og.float_platform()
    recorded, compared = {}, 0
    for path in sorted((ROOT / og.RESULTS_DIR).glob("online-grpo_*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        variant, value = record["warm_start"].get("variant", "sft"), record["warm_start"]["content_sha256"]
        recorded.setdefault(variant, set()).add(value)
        if og.same_float_platform(og.warm_start_built_on(record), built_on[variant]):
            assert value == fresh[variant], f"{path.name}: warm start {value[:12]} != fresh build {fresh[variant][:12]}"
            compared += 1
    assert set(recorded) == set(og.WARM_STARTS) and all(len(v) == 1 for v in recorded.values()), recorded
    for path in sorted((ROOT / og.RESULTS_DIR).glob("online-grpo-seeds_*.json")):
        summary = json.loads(path.read_text(encoding="utf-8"))
        assert {e["warm_start_hash"] for e in summary["seeds"]} <= set().union(*recorded.values()), path.name
    if not compared:
        pytest.skip(
            f"bit-for-bit check not possible here: the committed records' warm starts were built on "
            f"{og.UNRECORDED_WARM_START_PLATFORM} (or their warm_start.built_on), this machine's were built on "
            f"{built_on} and give { ({k: v[:12] for k, v in fresh.items()}) }; "
            f"the records' own hashes agree with each other"
        )
    assert compared >= 20


@pytest.mark.slow
def test_make_online_seeds_writes_a_validated_summary():
    """`make online SEEDS=n` machinery, short: two seeds of one step each, the summary under the local folder."""
    label = "pytest-seeds"
    paths = [ROOT / og.seeds_summary_path(label)] + [ROOT / og.output_relative_path(label, seed=s) for s in (0, 1)]
    for path in paths:
        path.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tools.cli.online",
                "--label",
                label,
                "--seeds",
                "2",
                "--num-steps",
                "1",
                "--prompts-per-step",
                "2",
                "--eval-k",
                "2",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "mean held-out pass@1 gain over 2 seeds" in done.stdout and "95% CI" in done.stdout
        summary = json.loads(paths[0].read_text(encoding="utf-8"))
        og.validate_seeds_summary(summary)
        assert [e["seed"] for e in summary["seeds"]] == [0, 1] and summary["config"]["num_steps"] == 1
        for path in paths[1:]:
            og.validate_record(json.loads(path.read_text(encoding="utf-8")))
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


def test_reference_seeds_summary_matches_its_records_and_shows_the_effect():
    """The committed `make online SEEDS=3 RUN_LABEL=reference` summary: seeds 0, 1, 2 of the default configuration,
    every figure recomputed from the per-seed records, mean held-out gain >= 0.30 with ci95[0] >= 0.20, each seed
    within the 180 s budget, and the gain split by outcome kind (the lesson reports where it comes from)."""
    summary = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert summary is not None, "no committed multi-seed summary"
    records = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert [r["config"]["seed"] for r in records] == [0, 1, 2]
    assert og.OnlineConfig(**dict(summary["config"], seed=0)) == og.OnlineConfig()
    again = og.seeds_summary(og.SEEDS_REFERENCE_LABEL, records)
    for key in ("seeds", "gain_pass_at_1", "gain_by_outcome", "heldout_curve"):
        assert again[key] == summary[key], key
    gain = summary["gain_pass_at_1"]
    # the goal (og.GOAL_MEAN_GAIN, og.GOAL_CI_LOW), met by the committed seeds (+0.340, ci95 [+0.260, +0.420])
    assert og.goal_met(summary), gain
    assert og.goal_met(summary) == (gain["mean"] >= 0.30 and gain["ci95"][0] >= 0.20)
    # what the records show, and the lesson states through og.shown_work_verdict: the lesson's prediction (more shown
    # work, longer answers) does not hold on this warm start - RL sharpens the bare answers, fewer show their work
    assert summary["scratchpad_share_after"]["ci95"][1] < summary["scratchpad_share_before"]["ci95"][0]
    assert summary["mean_completion_chars_change"]["ci95"][1] < 0
    assert "不成立" in og.shown_work_verdict(summary)
    assert all(e["wall_seconds"] <= 180 for e in summary["seeds"])
    assert len({e["warm_start_hash"] for e in summary["seeds"]}) == 1
    assert set(summary["gain_by_outcome"]) == {"right", "wrong", "unparseable"}
    assert summary["gain_by_heldout_subset"]["new"]["prompts"] == og.HELDOUT_SIZE
    low, high = og.START_RANGE
    assert low <= summary["pass_at_1_before"]["mean"] <= high, "the warm start is right only sometimes"
    for seed in records:
        assert seed["eval"]["before"]["outcomes"]["unparseable"] <= 0.20, "the warm start answers >= 80 % of the time"


def test_reference_records_hold_the_heldout_curve():
    """Issue 27's held-out curve: every committed reference seed evaluated the held-out set before training, every
    config.eval_every steps and after training (the first and last points are the before / after evaluations), and
    the schema rejects a curve point without its pass@1 or a curve of one point."""
    records = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert len(records) == 3
    for record in records:
        steps, every = record["config"]["num_steps"], record["config"]["eval_every"]
        curve = record["eval"]["curve"]
        assert every == og.OnlineConfig().eval_every > 0
        assert [p["step"] for p in curve] == list(range(0, steps, every)) + [steps]
        assert curve[0] == og.curve_point(0, record["eval"]["before"])
        assert curve[-1] == og.curve_point(steps, record["eval"]["after"])
        assert 0 < record["curve_eval_seconds"] < record["wall_seconds"]
    summary = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert [p["step"] for p in summary["heldout_curve"]] == [p["step"] for p in records[0]["eval"]["curve"]]
    assert all(p["pass_at_1"]["n"] == 3 and p["pass_at_1"]["ci95"] is not None for p in summary["heldout_curve"])
    for mutate in (
        lambda r: r["eval"]["curve"][1].pop("pass_at_1"),
        lambda r: r["eval"].update(curve=r["eval"]["curve"][:1]),
    ):
        broken = copy.deepcopy(records[0])
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_record(broken)


@pytest.mark.slow
def test_heldout_curve_does_not_change_the_training_steps():
    """The curve's evaluations sit between training steps; sampling is seeded per step, so a run with an evaluation
    after every step logs the same steps as one without (and a run with another seed does not: the comparison can
    fail). Short: two steps of one prompt on copies of the in-memory grading policy (about 10 s, mostly its build)."""
    import torch

    from tools.lessons.nb07_online_grpo import train_online_grpo

    torch.set_num_threads(1)
    policy, tokenizer = og.grading_policy(seed=0)
    heldout = og.split_problems()[1][:2]

    def steps(**overrides):
        config = og.OnlineConfig(
            num_steps=2, prompts_per_step=1, num_generations=2, eval_k=1, max_new_tokens=4, **overrides
        )
        record = og.run_online_experiment(
            train_online_grpo,
            config,
            "pytest-curve",
            verify=verify_integer_response,
            model=copy.deepcopy(policy),
            tokenizer=tokenizer,
            warm_start={"path": "in-memory"},  # not a folder: nothing to hash
            heldout=heldout,
            write=False,
        )
        return record, [{k: v for k, v in row.items() if k != "seconds"} for row in record["steps"]]

    with_curve, logged = steps(eval_every=1)
    _, without = steps(eval_every=0)
    _, other_seed = steps(eval_every=0, seed=1)
    assert [p["step"] for p in with_curve["eval"]["curve"]] == [0, 1, 2]
    assert logged == without
    assert logged != other_seed


def test_heldout_problems_are_structurally_new():
    """The rule the lesson states: no held-out problem, nor any reordering of its addends, is in the SFT data or the
    RL prompts (and the three pools are disjoint); the check fails when a reordering leaks in."""
    pools = og.task_pools()
    keys = {name: {og.equivalent_key(p["prompt"]) for p in pool} for name, pool in pools.items()}
    assert not keys["heldout"] & keys["rl"] and not keys["heldout"] & keys["sft"] and not keys["rl"] & keys["sft"]
    sft_prompts = {e["prompt"] for e in og.sft_examples(0)} | {e["prompt"] for e in og.sft_examples(0, "sft-list")}
    assert not keys["heldout"] & {og.equivalent_key(p) for p in sft_prompts}
    assert len(pools["heldout"]) == og.HELDOUT_SIZE == len(keys["heldout"])
    train, heldout = og.split_problems()
    assert train == pools["rl"] and heldout == pools["heldout"]
    assert og.heldout_subsets(train, heldout)["equivalent_in_training"] == []
    leaked = dict(
        pools["heldout"][0], prompt="+".join(map(str, reversed(og.addends_of(pools["heldout"][0]["prompt"])))) + "="
    )
    with pytest.raises(ValueError, match="留出题"):
        og.check_heldout_rule(pools["heldout"], pools["rl"] + [leaked])
    assert og.heldout_subsets(pools["rl"] + [leaked], heldout)["equivalent_in_training"] == [
        pools["heldout"][0]["prompt"]
    ]


def test_trl_seeds_summary_uses_the_same_start_settings_and_evaluation():
    """`make online SEEDS=3 RUN_LABEL=trl ONLINE_ARGS="--trainer trl"`: GRPOTrainer from the same warm start, with the
    same settings, evaluated the same way (the before figures equal the course loop's), seeds 0-2, with intervals."""
    from tools import online_trl

    ours = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    trl = og.load_seeds_summary(ROOT, online_trl.TRL_SEEDS_LABEL)
    assert trl is not None and trl["trainer"].startswith("trl.GRPOTrainer") and "trainer" not in ours
    assert trl["config"] == ours["config"]
    assert [e["seed"] for e in trl["seeds"]] == [0, 1, 2] and all(
        e["train_steps"] == og.OnlineConfig().num_steps for e in trl["seeds"]
    )
    assert {e["warm_start_hash"] for e in trl["seeds"]} == {e["warm_start_hash"] for e in ours["seeds"]}
    assert [e["pass_at_1_before"] for e in trl["seeds"]] == [e["pass_at_1_before"] for e in ours["seeds"]]
    assert trl["gain_pass_at_1"]["ci95"] is not None and set(trl["gain_by_heldout_subset"]) == {"new"}
    assert og.interval_verdict(ours["gain_pass_at_1"], trl["gain_pass_at_1"]) in ("overlap", "a > b", "a < b")
    assert og.interval_verdict({"ci95": [0.3, 0.4]}, {"ci95": [0.1, 0.2]}) == "a > b"
    assert og.interval_verdict({"ci95": [0.1, 0.2]}, {"ci95": [0.15, 0.4]}) == "overlap"


@pytest.mark.slow
def test_trl_gets_the_real_gpu_lora_adapter_on_the_qwen_shaped_model():
    """real_gpu through TRL: train_with_trl hands the preset's LoRA adapter to GRPOTrainer as peft_config, so on
    Qwen2.5-0.5B's architecture (built in memory) only the adapter on q/k/v/o trains - the count from the shapes,
    rank x (in + out) per targeted Linear - and without it every parameter would. Nothing runs forward, so the
    weights are left uninitialised (built on the meta device, then allocated): a random init of 0.5 B parameters on
    one thread took 10 of the test's 13 CPU-s."""
    import torch

    from tools import online_trl, tiny_model

    torch.set_num_threads(1)
    tokenizer = tiny_model.build_qwen25_like_tokenizer()
    with torch.device("meta"):
        model = tiny_model._build_model(dict(tiny_model.QWEN25_05B_ARCHITECTURE), tokenizer, 0, torch.bfloat16)
    model = model.to_empty(device="cpu")  # real (uninitialised) CPU storage: the trainer and peft need tensors
    model.tie_weights()  # to_empty gives the tied embedding and head separate storage: tie them again
    assert model.lm_head.weight is model.model.embed_tokens.weight
    lora = og.RUN_PRESETS["real_gpu"]["lora"]
    expected = sum(
        lora["rank"] * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if name.split(".")[-1] in lora["target_modules"] and isinstance(m, torch.nn.Linear)
    )
    total = sum(p.numel() for p in model.parameters())
    config = og.preset_config("real_gpu", num_steps=1, prompts_per_step=2, num_generations=2)
    trainer = online_trl.make_trainer(
        model,
        tokenizer,
        og.split_problems()[0][:4],
        online_trl.grpo_config(config, max_steps=1),
        online_trl.course_reward(verify_integer_response, config.format_weight),
        og.preset_lora_config("real_gpu"),
    )
    trainable = {n: p.numel() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert sum(trainable.values()) == expected == 24 * 16 * (2 * (896 + 896) + 2 * (896 + 128))
    assert all("lora_" in n for n in trainable) and sum(trainable.values()) < 0.01 * total
    assert og.preset_lora_config("tiny_cpu") is None and og.preset_lora_config("smoke") is None


@pytest.mark.slow
def test_grading_policy_is_built_once_and_every_call_gets_its_own_copy():
    """The grader's oracle zygote builds the lesson's grading policy once and forks drivers from it
    (``ZYGOTE_WARM``): a second call returns the same weights without a second build, as a copy that a caller may
    change without changing the next one's (a driver's learner code trains its model)."""
    import torch

    from tools.online import grading_policy as defining  # the module that holds the built policies

    first, tokenizer = og.grading_policy(seed=0)
    built = dict(defining._GRADING_POLICIES)
    second, other_tokenizer = og.grading_policy(seed=0)
    assert defining._GRADING_POLICIES == built  # no second build
    assert first is not second and tokenizer is not other_tokenizer
    pairs = list(zip(first.parameters(), second.parameters()))
    assert all(torch.equal(a, b) for a, b in pairs)
    with torch.no_grad():
        pairs[0][0].add_(1.0)  # a caller changes its copy...
    third, _ = og.grading_policy(seed=0)
    assert torch.equal(next(third.parameters()), pairs[0][1])  # ...the next copy is the built one
    assert not torch.equal(pairs[0][0], pairs[0][1])  # (and the comparison can fail)


def test_only_the_lessons_being_graded_warm_the_zygotes():
    """The zygotes prepare for the lessons in the run only: the oracle zygote makes their ``ZYGOTE_WARM`` calls
    (lesson 7's grading policy, ~4 s per zygote) and both zygotes import their ``ZYGOTE_IMPORTS`` (transformers'
    Qwen2 model, ~3 s) where a lesson that uses them is graded, and nowhere else."""
    from autograde.grpo_grader.oracles._common import QWEN2_MODEL
    from autograde.grpo_grader.slots import ZygoteWarm
    from autograde.pipeline import zygote_warm

    lesson7 = [("nb07_online_grpo", None, "fp")]
    lesson5 = [("nb05_logprobs_masks", None, "fp")]
    others = [("nb01_group_advantages", None, "fp"), ("nb03b_loss_family_trl", None, "fp")]
    assert zygote_warm([others]) == ZygoteWarm() and zygote_warm([]) == ZygoteWarm()
    assert zygote_warm([others, lesson7]) == ZygoteWarm(
        kernel=QWEN2_MODEL, oracle=QWEN2_MODEL, calls=("tools.online_grpo:grading_policy",)
    )
    assert zygote_warm([lesson7, lesson5, others]) == zygote_warm([lesson7]), "each module once"
    assert zygote_warm([lesson5]) == ZygoteWarm(kernel=QWEN2_MODEL, oracle=QWEN2_MODEL)


def test_zygote_imports_name_what_the_lessons_import():
    """A lesson whose notebook loads a transformers model declares transformers' Qwen2 model in its oracle module's
    ZYGOTE_IMPORTS, for its kernels and its drivers; the other lessons declare nothing; every declared module exists."""
    import importlib.util

    from autograde.grpo_grader.oracle import load_oracle
    from autograde.grpo_grader.oracles._common import QWEN2_MODEL

    for assignment in sample_class.LESSONS:
        oracle = load_oracle(assignment)
        source = (ROOT / "solutions" / f"{assignment}.py").read_text(encoding="utf-8")
        loads_a_model = "from_pretrained" in source or "online_grpo" in source
        for kind in ("kernel", "oracle"):
            declared = oracle.zygote_imports(kind)
            assert declared == (QWEN2_MODEL if loads_a_model else ()), (assignment, kind, declared)
            assert all(importlib.util.find_spec(name) for name in declared), (assignment, declared)
