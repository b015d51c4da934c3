"""The pieces of lesson 7's runtime (``tools.online``, through ``tools.online_grpo``): the task and its held-out rule,
the SFT data, pass@k / maj@k, the t-interval, the RUN_MODE presets, float platforms, where records go, and the
command line ``make online`` derived from ``OnlineConfig``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import online_grpo as og
from tools.lessons.nb04_verifiable_rewards import verify_integer_response

ROOT = Path(__file__).resolve().parents[1]


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


def test_run_presets():
    assert set(og.RUN_PRESETS) == {"tiny_cpu", "smoke", "real_gpu"}
    assert og.preset_config("tiny_cpu") == og.OnlineConfig()
    real = og.RUN_PRESETS["real_gpu"]
    assert set(real["lora"]["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert 1e-6 <= og.preset_config("real_gpu").learning_rate <= 2e-5, "within TRL's range for a LoRA adapter"
    with pytest.raises(ValueError, match="RUN_MODE"):
        og.check_run_mode("gpu")


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


def test_make_online_seeds_that_are_no_count_get_the_courses_message(capsys):
    """`make online SEEDS=abc` (or 0, -1, 1.5): the course's bilingual message, not argparse's English one."""
    from tools.cli import online

    for bad in ("abc", "0", "-1", "1.5", ""):
        with pytest.raises(SystemExit) as stop:
            online.parse(["--seeds", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "必须是正整数" in err and "must be a positive integer" in err and "invalid int" not in err, err
    assert online.parse(["--seeds", "3"])[0].seeds == 3


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


def upward_imports(folder: Path, order) -> dict[str, set[str]]:
    """{module: what it imports that it may not}: a module of ``folder`` (the package ``tools.online``) may import the
    modules before it in ``order`` only, and neither re-exporting module (``tools.online_grpo``, ``tools.online_trl``:
    they import the package)."""
    from test_tools_layout import imported_modules

    bad = {}
    for i, name in enumerate(order):
        found = imported_modules(folder / f"{name}.py", package=("tools", "online"))
        inner = {m.split(".")[2] for m in found if m.startswith("tools.online.")} - set(order[:i])
        facades = {m for m in found if m.split(".")[:2] in (["tools", "online_grpo"], ["tools", "online_trl"])}
        if inner | facades:
            bad[name] = inner | facades
    return bad


def test_the_online_package_imports_one_way():
    """Every module of tools/online/ is in its MODULES, and imports only the modules before it: no cycle, and a
    lower module never reaches for a higher one."""
    import tools.online

    folder = ROOT / "tools" / "online"
    assert set(tools.online.MODULES) == {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert upward_imports(folder, tools.online.MODULES) == {}


def test_an_upward_import_in_the_online_package_is_reported(tmp_path):
    """The check above can fail: the task importing the run (a higher module), or the re-exporting module, is found."""
    import shutil

    import tools.online

    folder = ROOT / "tools" / "online"
    for path in folder.glob("*.py"):
        shutil.copy(path, tmp_path / path.name)
    task = tmp_path / "task.py"
    task.write_text(task.read_text(encoding="utf-8") + "\n\ndef _f():\n    from tools.online.run import curve_point\n")
    evaluation = tmp_path / "evaluation.py"
    evaluation.write_text(evaluation.read_text(encoding="utf-8") + "\nfrom tools import online_grpo\n")
    found = upward_imports(tmp_path, tools.online.MODULES)
    assert found == {"task": {"run"}, "evaluation": {"tools.online_grpo"}}, found
