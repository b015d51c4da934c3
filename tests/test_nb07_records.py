"""Lesson 7's committed records (benchmarks/results/online/): the reference record and its 3-seed summary meet the
headline, every figure of a summary is recomputed from its records, each seed evaluated with its own samples, the
summary holds what the model learned and did not (groups, transfer, pass@k / maj@k), the ablations have 3-seed
records and verdicts from their intervals, the TRL trainer's seeds start and are evaluated as the course loop's, every
record validates and names the warm start a fresh build gives (bit-for-bit on the float platform that built them),
a rerun reproduces the reference summary (integration), and the schemas reject broken records and summaries.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tools import online_grpo as og

ROOT = Path(__file__).resolve().parents[1]


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
    low, high = og.START_RANGE  # the course's goal: the warm start is right only sometimes
    assert low <= record["eval"]["before"]["pass_at_1"] <= high, "the warm start's held-out pass@1 is out of range"
    assert record["eval"]["before"]["outcomes"]["unparseable"] <= 0.20, "the warm start answers >= 80 % of the time"
    assert len(record["steps"]) == record["config"]["num_steps"]
    assert record["cpu_seconds"] <= 180, "CPU time of the headline run (one thread) exceeds the 180 s budget"


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
        lambda r: r["eval"]["before"].pop("seed"),
        lambda r: r["eval"]["after"].pop("per_prompt"),
        lambda r: r["eval"]["before"]["per_prompt"]["pass_at_1"].append(1.5),
        lambda r: r["eval"].pop("transfer"),
        lambda r: r["eval"]["groups"].update(carries_9=["1+2+3+4="]),
    ):
        broken = copy.deepcopy(record)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_record(broken)


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


def test_reference_seeds_summary_matches_its_records_and_shows_the_effect():
    """The committed `make online SEEDS=3 RUN_LABEL=reference` summary: seeds 0, 1, 2 of the default configuration,
    every figure recomputed from the per-seed records, each seed evaluated with its own samples (so "before" has an
    interval too), the held-out intervals by the bootstrap over seeds and prompts, mean held-out gain >= 0.30 with
    the interval above 0.20, each seed within the 180 CPU-second budget, and the gain split by outcome kind (the
    lesson reports where it comes from)."""
    summary = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert summary is not None, "no committed multi-seed summary"
    records = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)
    assert [r["config"]["seed"] for r in records] == [0, 1, 2]
    assert og.OnlineConfig(**dict(summary["config"], seed=0)) == og.OnlineConfig()
    again = og.seeds_summary(og.SEEDS_REFERENCE_LABEL, records)
    for key in set(again) - {"created_utc"}:
        assert again[key] == summary[key], key
    assert summary["interval_method"] == og.HELDOUT_INTERVAL_METHOD.format(
        replicates=og.BOOTSTRAP_REPLICATES, seed=og.BOOTSTRAP_SEED
    )
    assert summary["gain_pass_at_1"]["method"] == summary["interval_method"]
    assert summary["gain_pass_at_1"]["n"] == 3 and summary["gain_pass_at_1"]["prompts"] == og.HELDOUT_SIZE
    # every seed drew its own evaluation samples, before and after: the evaluation's noise is in the spread
    for record in records:
        seed, steps = record["config"]["seed"], record["config"]["num_steps"]
        assert record["eval"]["before"]["seed"] == og.evaluation_seed(seed, 0)
        assert record["eval"]["after"]["seed"] == og.evaluation_seed(seed, steps)
    assert len({r["eval"]["before"]["pass_at_1"] for r in records}) > 1, "the before figures differ by seed"
    before = summary["pass_at_1_before"]["ci95"]
    assert before[0] < summary["pass_at_1_before"]["mean"] < before[1]
    gain = summary["gain_pass_at_1"]
    # the goal (og.GOAL_MEAN_GAIN, og.GOAL_CI_LOW), met by the committed seeds
    assert og.goal_met(summary), gain
    assert og.goal_met(summary) == (gain["mean"] >= 0.30 and gain["ci95"][0] > 0.20)
    # what the records show, and the lesson states through og.shown_work_verdict: on this warm start RL sharpens the
    # bare answers, fewer completions show their work and they get shorter (the introduction's question, answered)
    assert og.interval_verdict(summary["scratchpad_share_after"], summary["scratchpad_share_before"]) == "a < b"
    assert og.interval_verdict(summary["mean_completion_chars_change"], 0.0) == "a < b"
    assert "少写算式" in og.shown_work_verdict(summary)
    assert all(e["cpu_seconds"] <= 180 for e in summary["seeds"])
    assert len({e["warm_start_hash"] for e in summary["seeds"]}) == 1
    assert set(summary["gain_by_outcome"]) == {"right", "wrong", "unparseable"}
    assert summary["heldout_groups"]["new"]["prompts"] == og.HELDOUT_SIZE
    low, high = og.START_RANGE
    assert low <= summary["pass_at_1_before"]["mean"] <= high, "the warm start is right only sometimes"
    for seed in records:
        assert seed["eval"]["before"]["outcomes"]["unparseable"] <= 0.20, "the warm start answers >= 80 % of the time"


def test_reference_summary_shows_what_was_learned_and_what_was_not():
    """The summary holds, with intervals over seeds and prompts, the gain by number of carries (0, 1, 2 - the
    held-out set has no 3-carry sum), over the zero-heavy sums, on the transfer sets of 3 and 5 addends (evaluated on
    og.transfer_problems, before and after training) and pass@k / maj@k for every k; each group's prompts are what
    og.heldout_groups gives, the carry groups partition the held-out set."""
    summary = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    records = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)
    train, heldout = og.split_problems()
    groups = og.heldout_groups(train, heldout)
    assert all(r["eval"]["groups"] == groups for r in records)
    assert {"carries_0", "carries_1", "carries_2", "zero_heavy", "new"} == set(summary["heldout_groups"])
    assert sum(summary["heldout_groups"][f"carries_{c}"]["prompts"] for c in range(3)) == og.HELDOUT_SIZE
    for stat in summary["heldout_groups"].values():
        assert all(stat[k]["n"] == 3 and stat[k]["ci95"] is not None for k in ("before", "after", "gain"))
    assert set(summary["transfer"]) == {str(n) for n in og.TRANSFER_ADDENDS}
    for n in og.TRANSFER_ADDENDS:
        prompts = [p["prompt"] for p in og.transfer_problems(n)]
        for record in records:
            for phase in ("before", "after"):
                assert record["eval"]["transfer"][str(n)][phase]["per_prompt"]["prompts"] == prompts
        assert summary["transfer"][str(n)]["prompts"] == len(prompts)
    assert list(summary["pass_maj"]) == ["1", "2", "4", "8", "16"]
    assert summary["pass_maj"]["1"]["pass"] == summary["pass_maj"]["1"]["maj"], "maj@1 is pass@1"
    assert og.learned_table(summary).count("\n") > 10 and "pass@16" in og.sharpens_verdict(summary)


def test_reference_records_hold_the_heldout_curve():
    """The held-out curve: every committed reference seed evaluated the held-out set before training, every
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
        lambda r: r["eval"]["curve"][1].pop("per_prompt"),
    ):
        broken = copy.deepcopy(records[0])
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_record(broken)


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
    assert trl["gain_pass_at_1"]["ci95"] is not None and "new" in trl["heldout_groups"]
    assert trl["interval_method"] == ours["interval_method"]
    assert og.interval_verdict(ours["gain_pass_at_1"], trl["gain_pass_at_1"]) in ("overlap", "a > b", "a < b")
    assert og.interval_verdict({"ci95": [0.3, 0.4]}, {"ci95": [0.1, 0.2]}) == "a > b"
    assert og.interval_verdict({"ci95": [0.1, 0.2]}, {"ci95": [0.15, 0.4]}) == "overlap"


def _fake_seed_records():
    """The committed reference records, every prompt's held-out pass@1 after training set to 0.45 / 0.5 / 0.55."""
    records = []
    for record, after in zip(og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL), (0.45, 0.5, 0.55)):
        r = copy.deepcopy(record)
        r["eval"]["after"]["pass_at_1"] = after
        r["eval"]["after"]["per_prompt"]["pass_at_1"] = [after] * og.HELDOUT_SIZE
        records.append(r)
    return records


def test_seeds_summary_is_schema_checked():
    records = _fake_seed_records()
    summary = og.seeds_summary("pytest-seeds", records)
    og.validate_seeds_summary(summary)
    assert summary["schema_version"] == "online-grpo-seeds/v2"
    assert [e["seed"] for e in summary["seeds"]] == [0, 1, 2]
    befores = [sum(r["eval"]["before"]["per_prompt"]["pass_at_1"]) / og.HELDOUT_SIZE for r in records]
    assert abs(summary["gain_pass_at_1"]["mean"] - (0.5 - sum(befores) / 3)) < 1e-6
    low, high = summary["gain_pass_at_1"]["ci95"]
    assert low < summary["gain_pass_at_1"]["mean"] < high
    for mutate in (
        lambda s: s.pop("gain_pass_at_1"),
        lambda s: s.pop("interval_method"),
        lambda s: s.pop("pass_maj"),
        lambda s: s["seeds"][0].pop("warm_start_hash"),
        lambda s: s.update(schema_version="online-grpo-seeds/v1"),
        lambda s: s["gain_pass_at_1"].pop("method"),
        lambda s: s["seeds"][1].update(pass_at_1_after=1.5),
        lambda s: s["heldout_groups"]["new"].pop("gain"),
    ):
        broken = copy.deepcopy(summary)
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            og.validate_seeds_summary(broken)
    other = copy.deepcopy(records)
    other[1]["config"]["num_steps"] += 1
    with pytest.raises(ValueError, match="seed"):
        og.seeds_summary("pytest-seeds", other)
    shuffled = copy.deepcopy(records)
    shuffled[2]["eval"]["after"]["per_prompt"]["prompts"].reverse()
    with pytest.raises(ValueError, match="提示"):
        og.seeds_summary("pytest-seeds", shuffled)


# What a rerun may change: when it ran, how long it took and on what load; everything else is the same bits.
_TIMING_KEYS = {
    "created_utc",
    "wall_seconds",
    "train_seconds",
    "cpu_seconds",
    "curve_eval_seconds",
    "hardware",
    "seconds",
}


def _without_timing(value):
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in _TIMING_KEYS}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


@pytest.mark.integration
def test_a_rerun_reproduces_the_reference_summary():
    """`make online SEEDS=3` of the reference configuration, rerun under another label on the float platform that
    built the warm start, gives the committed records and summary bit for bit (timings and load aside): every
    training step, every evaluation, every interval. About 3 CPU-minutes on one thread."""
    records = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)
    built_on = og.warm_start_platform_of(og.sft_checkpoint_path(seed=0)[0]) or og.float_platform()
    if not og.same_float_platform(og.warm_start_built_on(records[0]), built_on):
        pytest.skip(f"the committed records' warm start was built on another float platform than this one ({built_on})")
    label = "pytest-rerun"
    paths = [ROOT / og.seeds_summary_path(label)] + [ROOT / og.output_relative_path(label, seed=s) for s in range(3)]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools.cli.online", "--label", label, "--seeds", "3"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        for seed, committed in enumerate(records):
            rerun = json.loads(paths[1 + seed].read_text(encoding="utf-8"))
            assert _without_timing({**rerun, "run_label": None}) == _without_timing({**committed, "run_label": None})
        summary = json.loads(paths[0].read_text(encoding="utf-8"))
        committed = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
        for entry in summary["seeds"] + committed["seeds"]:
            entry.pop("record")
        assert _without_timing({**summary, "run_label": None}) == _without_timing({**committed, "run_label": None})
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
            og.figure_paths(path).unlink(missing_ok=True)
