"""Lesson 7 (nb07_online_grpo) executed, its TRL comparison, its presets and the grader's policy.

Notebook executions (each at most once per session, through ``notebook_runs``), all in RUN_MODE=smoke:
* the solution version runs green and writes a record that validates;
* the learner version fails only with NotImplementedError;
* one copy whose test cells hold only their hidden tests, with three wrong answers substituted at once (they do
  not interfere: the sample_group mutation only shows at temperature != 1, the other tests sample at 1.0), fails
  each of the three hidden test cells.
The comparison of grpo_step with TRL's GRPOTrainer and the mutations it catches are tested in
tests/test_nb07_trl_comparison.py; here the lesson's TRL cell shows its tables (slow); the real_gpu preset trains a
LoRA adapter only, in the course loop and through TRL (slow); the held-out curve does not change the training steps;
``make online SEEDS=n`` writes a validated summary; the grader's policy is built once per process.

The committed records are checked in tests/test_nb07_records.py, the runtime's pieces (task, statistics, settings,
command line) in tests/test_nb07_runtime.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

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
    # what the lesson computes from the committed records instead of stating it: the one rule, the intervals' method,
    # what the model learned and did not, how far the held-out problems are from training, the length ratio
    for computed in (
        og.VERDICT_RULE,
        og.INTERVAL_METHOD_WORDS["heldout"],
        "模型学到了什么",
        "迁移集：3 个数相加",
        "只差一个加数的训练组合",
        "算式是直接作答的",
        og.shown_work_verdict(og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)),
        og.sharpens_verdict(og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)),
        "奖励投机的两条记录，逐个种子",
    ):
        assert json.dumps(computed, ensure_ascii=False)[1:-1] in text, computed
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


@pytest.mark.slow
def test_trl_tables_are_in_the_notebook(solution_run):
    """The notebook's TRL cell asserts agreement, sensitivity and that every mutation is caught itself (a failure is
    a cell error, caught above); here: its tables are there - the matrix covers the whole MATRIX, the scenario table
    has a row per scenario with nothing that disagrees, the mutation table a row per registered mutation, each
    caught by one part or the other - and its summary line is printed."""
    done, _ = solution_run
    online_trl = online_trl_module()
    markdown = [
        o["data"]["text/markdown"]
        for c in done.cells
        for o in c.get("outputs", [])
        if "text/markdown" in o.get("data", {})
    ]

    def table(marker):
        found = [t for t in markdown if marker in t]
        assert len(found) == 1, marker
        return [[x.strip() for x in line.split("|")[1:-1]] for line in found[0].splitlines()[2:]]

    rows = table("TRL 损失")
    assert {(r[0], float(r[1]), r[2] == "True") for r in rows} == {
        (m["loss_type"], m["beta"], m["use_bias_correction_kl"]) for m in online_trl.MATRIX
    }
    scenarios = table("裁剪比例最大绝对差")
    assert len(scenarios) == len(online_trl.SCENARIOS) and all(r[-1] == "—" for r in scenarios)
    mutations = table("整次更新的场景")
    assert [r[0] for r in mutations] == [m.what for m in online_trl.MUTATIONS]
    assert all(r[3] != "—" or r[4] != "—" for r in mutations)
    text = json.dumps([c.get("outputs", []) for c in done.cells], ensure_ascii=False)
    assert f"故意改坏的副本 {len(online_trl.MUTATIONS)} 个" in text


def online_trl_module():
    from tools import online_trl

    return online_trl


def test_accelerate_configs_load_with_accelerates_parser():
    from tools import online_trl

    rows = {r["file"]: r for r in online_trl.check_accelerate_configs(ROOT / "environments" / "accelerate")}
    assert rows["zero2.yaml"]["distributed_type"] == "DEEPSPEED" and rows["zero2.yaml"]["zero_stage"] == 2
    assert rows["zero3.yaml"]["zero_stage"] == 3 and rows["multi_gpu.yaml"]["distributed_type"] == "MULTI_GPU"


@pytest.mark.slow
def test_real_gpu_preset_trains_only_the_lora_adapter():
    """Two steps of the real_gpu preset on the CPU. On the course's tiny Qwen2-architecture checkpoint, not the
    Qwen-shaped one (0.5 B parameters: too heavy for a test on 2 cores; benchmarks/gpu_check.sh runs that one on a
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


@pytest.mark.slow
def test_make_online_seeds_writes_a_validated_summary():
    """`make online SEEDS=n` machinery, short: two seeds of one step each, the summary under the local folder, a PNG
    beside every record and beside the summary."""
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
        for path in paths:  # each record's training curve and the summary's held-out curve, beside the JSON
            assert og.figure_paths(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", og.figure_paths(path)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
            og.figure_paths(path).unlink(missing_ok=True)


@pytest.mark.slow
def test_grading_policy_is_built_once_and_every_call_gets_its_own_copy():
    """The grader's kernel zygote builds the lesson's grading policy once and forks kernels from it
    (``ZYGOTE_WARM``): a second call returns the same weights without a second build, as a copy that a caller may
    change without changing the next one's (a kernel's learner code trains its model)."""
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
    """The zygotes prepare for the lessons in the run only: they make their ``ZYGOTE_WARM`` calls (lesson 7's
    grading policy, ~4 s per zygote) and import their ``ZYGOTE_IMPORTS`` (transformers' Qwen2 model, ~3 s) where a
    lesson that uses them is graded, and nowhere else."""
    from autograde.grpo_grader.oracles._common import QWEN2_MODEL
    from autograde.grpo_grader.slots import ZygoteWarm
    from autograde.pipeline import zygote_warm

    lesson7 = [("nb07_online_grpo", None, "fp")]
    lesson5 = [("nb05_logprobs_masks", None, "fp")]
    others = [("nb01_group_advantages", None, "fp"), ("nb03b_loss_family_trl", None, "fp")]
    assert zygote_warm([others]) == ZygoteWarm() and zygote_warm([]) == ZygoteWarm()
    assert zygote_warm([others, lesson7]) == ZygoteWarm(
        imports=QWEN2_MODEL, calls=("tools.online_grpo:grading_policy",)
    )
    assert zygote_warm([lesson7, lesson5, others]) == zygote_warm([lesson7]), "each module once"
    assert zygote_warm([lesson5]) == ZygoteWarm(imports=QWEN2_MODEL)


def test_zygote_imports_name_what_the_lessons_import():
    """A lesson whose notebook loads a transformers model declares transformers' Qwen2 model in its oracle module's
    ZYGOTE_IMPORTS, for its kernels; the other lessons declare nothing; every declared module exists."""
    import importlib.util

    from autograde.grpo_grader.oracle import load_oracle
    from autograde.grpo_grader.oracles._common import QWEN2_MODEL

    for assignment in sample_class.LESSONS:
        oracle = load_oracle(assignment)
        source = (ROOT / "solutions" / f"{assignment}.py").read_text(encoding="utf-8")
        loads_a_model = "from_pretrained" in source or "online_grpo" in source
        declared = oracle.zygote_imports
        assert declared == (QWEN2_MODEL if loads_a_model else ()), (assignment, declared)
        assert all(importlib.util.find_spec(name) for name in declared), (assignment, declared)
