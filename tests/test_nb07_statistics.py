"""Lesson 7's statistics and what it reads from them, without training: the bootstrap over seeds and prompts against
cases whose answer is known, the one rule that turns intervals into words (and a check that no other comparison of
interval ends exists), the evaluation seeds, the held-out groups and transfer sets, the prompt encoding's contract,
and the PNGs ``make online`` saves.
"""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest

from tools import online_grpo as og

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------- the bootstrap's known answers
def _crossed_sd(a, b):
    """The exact standard deviation of the two-way bootstrap mean for values a[s] + b[p]: the seeds and the prompts
    are drawn independently, so Var = var(a) / S + var(b) / P with the plug-in (divide by n) variances."""

    def var(x):
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x) / len(x)

    return math.sqrt(var(a) / len(a) + var(b) / len(b))


def _nested_sd(a, b):
    """What a nested bootstrap (each drawn seed draws its own prompts) would give for the same values: the prompt
    part shrinks by the number of seeds - too narrow when every seed evaluated the same prompts."""

    def var(x):
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x) / len(x)

    return math.sqrt(var(a) / len(a) + var(b) / (len(b) * len(a)))


def test_bootstrap_interval_matches_known_answers():
    """Cases whose answer is known: constant values give a zero-width interval at the value; two prompts 0 and 1
    (any number of identical seeds) give the mean of two draws, 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4, so the
    2.5 % / 97.5 % quantiles are 0 and 1 and the standard deviation sqrt(1/8); additive values a[s] + b[p] give
    the exact crossed variance var(a)/S + var(b)/P (which the nested bootstrap's would not match); one seed gives no
    interval; the same seed gives the same interval."""
    flat = og.bootstrap_ci95([[0.25] * 5] * 3)
    assert flat["mean"] == 0.25 and flat["ci95"] == [0.25, 0.25] and flat["sd"] == 0.0
    two = og.bootstrap_ci95([[0.0, 1.0]] * 3, replicates=4000)
    assert two["mean"] == 0.5 and two["ci95"] == [0.0, 1.0]
    assert abs(two["sd"] - math.sqrt(1 / 8)) < 0.02 * math.sqrt(1 / 8), two
    rng = random.Random(7)
    a = [rng.gauss(0, 0.3) for _ in range(12)]
    b = [rng.gauss(0, 1.0) for _ in range(30)]
    stat = og.bootstrap_ci95([[x + y for y in b] for x in a], replicates=4000)
    want, nested = _crossed_sd(a, b), _nested_sd(a, b)
    assert abs(stat["sd"] - want) < 0.05 * want, (stat["sd"], want)
    assert abs(nested - want) > 0.15 * want, "the check tells the crossed bootstrap from the nested one"
    half = (stat["ci95"][1] - stat["ci95"][0]) / 2
    assert abs(half - 1.96 * want) < 0.1 * 1.96 * want, (half, want)  # near-normal: the percentile interval
    assert stat["n"] == 12 and stat["prompts"] == 30
    again = og.bootstrap_ci95([[x + y for y in b] for x in a], replicates=4000)
    assert again == stat, "deterministic given its own seed"
    other = og.bootstrap_ci95([[x + y for y in b] for x in a], replicates=4000, seed=1)
    assert other["ci95"] != stat["ci95"] and other["mean"] == stat["mean"]
    single = og.bootstrap_ci95([[0.1, 0.9, 0.4]])
    assert single["ci95"] is None and single["n"] == 1
    assert "bootstrap" in og.bootstrap_ci95([[0.0, 1.0]] * 2)["method"]
    for bad in ([], [[]], [[0.1, float("nan")]] * 2, [0.1, 0.2]):
        with pytest.raises(ValueError):
            og.bootstrap_ci95(bad)
    with pytest.raises(ValueError):
        og.bootstrap_ci95([[0.0, 1.0]] * 2, replicates=10)


def test_bootstrap_counts_the_prompts_not_only_the_seeds():
    """Every seed identical (no training noise), prompts that differ: a t interval over seeds would have width 0;
    the bootstrap's interval does not - the choice of held-out prompts is a source of noise it counts."""
    rows = [[0.0, 0.5, 1.0, 0.25, 0.75]] * 3
    assert og.mean_ci95([sum(r) / len(r) for r in rows])["ci95"] == [0.5, 0.5]
    stat = og.bootstrap_ci95(rows)
    assert stat["ci95"][0] < 0.5 < stat["ci95"][1]


# ----------------------------------------------------------------------------------- the one rule
def test_interval_verdict_is_the_rule_the_lesson_states():
    assert og.interval_verdict({"ci95": [0.3, 0.4]}, {"ci95": [0.1, 0.2]}) == "a > b"
    assert og.interval_verdict({"ci95": [0.1, 0.2]}, {"ci95": [0.3, 0.4]}) == "a < b"
    assert og.interval_verdict({"ci95": [0.1, 0.3]}, {"ci95": [0.2, 0.4]}) == "overlap"
    assert og.interval_verdict({"ci95": [0.1, 0.2]}, {"ci95": [0.2, 0.4]}) == "overlap", "a shared end point overlaps"
    assert og.interval_verdict({"ci95": [0.1, 0.2]}, 0.0) == "a > b" and og.interval_verdict(
        {"ci95": [-0.1, 0.2]}, 0
    ) == ("overlap")
    assert og.interval_verdict({"ci95": None}, 0.0) == "missing" and og.interval_verdict(None, 0.0) == "missing"
    assert "不重叠" in og.VERDICT_RULE and "不含这个数" in og.VERDICT_RULE
    summary = {"gain_pass_at_1": {"mean": 0.31, "ci95": [0.21, 0.4]}}
    assert og.goal_met(summary)
    assert not og.goal_met({"gain_pass_at_1": {"mean": 0.31, "ci95": [0.19, 0.4]}})
    assert not og.goal_met({"gain_pass_at_1": {"mean": 0.29, "ci95": [0.21, 0.4]}})


def _interval_comparisons(source: str, allowed=("interval_verdict",)) -> list[str]:
    """Functions in ``source`` (outside ``allowed``) that compare an interval's end (a subscript ``[...]["ci95"]``)
    with anything: each such comparison would be a second rule for reading intervals."""
    tree = ast.parse(source)
    found = []

    def mentions_ci95(node):
        return any(isinstance(n, ast.Constant) and n.value == "ci95" for n in ast.walk(node))

    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.Module)) or getattr(func, "name", None) in allowed:
            continue
        body = func.body if isinstance(func, ast.Module) else [func]
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef) and isinstance(func, ast.Module):
                continue  # functions are visited on their own
            for node in ast.walk(stmt):
                if isinstance(node, ast.Compare) and mentions_ci95(node):
                    is_none_check = all(isinstance(c, ast.Constant) and c.value is None for c in node.comparators)
                    if not is_none_check:
                        found.append(getattr(func, "name", "<module>"))
    return sorted(set(found))


def test_no_verdict_reads_an_interval_outside_the_one_rule():
    """Every verdict the lesson prints comes from ``interval_verdict``: no other function of the runtime, the command
    line or the lesson compares an interval's end with something (a ``ci95 is None`` check is not a verdict); and the
    check finds such a comparison where one is planted."""
    paths = sorted((ROOT / "tools" / "online").glob("*.py")) + [
        ROOT / "tools" / "cli" / "online.py",
        ROOT / "solutions" / "nb07_online_grpo.py",
    ]
    for path in paths:
        assert _interval_comparisons(path.read_text(encoding="utf-8")) == [], path.name
    planted = "def shown(summary):\n    return summary['x']['ci95'][0] > 0\n"
    assert _interval_comparisons(planted) == ["shown"]
    assert _interval_comparisons("x = s['ci95'][1] < 0.2\n") == ["<module>"]


def test_shown_work_verdict_follows_the_rule():
    def summary(share_before, share_after, length):
        return {
            "scratchpad_share_before": {"mean": 0, "ci95": share_before},
            "scratchpad_share_after": {"mean": 0, "ci95": share_after},
            "mean_completion_chars_change": {"mean": 0, "ci95": length},
        }

    assert "少写算式" in og.shown_work_verdict(summary([0.1, 0.13], [0.02, 0.05], [-2.0, -1.0]))
    assert "多写算式" in og.shown_work_verdict(summary([0.1, 0.13], [0.2, 0.3], [1.0, 2.0]))
    assert "分辨不出" in og.shown_work_verdict(summary([0.1, 0.13], [0.12, 0.3], [-1.0, 2.0]))


# ----------------------------------------------------------------------------------- evaluation seeds, groups, sets
def test_every_run_seed_evaluates_with_its_own_samples():
    seeds = {og.evaluation_seed(s, step) for s in range(3) for step in (0, 10, 100)}
    assert len(seeds) == 9 and og.evaluation_seed(0, 0) == og.EVALUATION_SEED_BASE
    training = {s * 1000003 + step for s in range(3) for step in range(100)}  # the loop's sampling seeds
    assert not seeds & training
    for bad in ((0, -1), (0, 1.5), (True, 0), (0, False)):
        with pytest.raises(ValueError):
            og.evaluation_seed(*bad)


def test_heldout_groups_carries_and_what_is_new():
    assert og.carries("6+7+9+4=") == 2 and og.carries("0+0+0+0=") == 0 and og.carries("9+9+9+9=") == 3
    assert og.zero_heavy("6+0+0+0=") and og.zero_heavy("4+0+0+4=") and not og.zero_heavy("0+1+2+3=")
    train, heldout = og.split_problems()
    groups = og.heldout_groups(train, heldout)
    assert set(groups) <= set(og.HELDOUT_GROUP_RULES) and "equivalent_in_training" not in groups
    assert groups["new"] == [p["prompt"] for p in heldout]
    carry_groups = [g for g in groups if g.startswith("carries_")]
    assert sorted(p for g in carry_groups for p in groups[g]) == sorted(groups["new"])
    assert all(og.carries(p) == int(g.split("_")[1]) for g in carry_groups for p in groups[g])
    assert groups["zero_heavy"] == [p["prompt"] for p in heldout if og.zero_heavy(p["prompt"])]
    pools = og.task_pools()
    near = og.training_neighbours(heldout, pools["rl"], pools["sft"])
    assert set(near) == set(groups["new"])
    assert all(v["one_addend_away"] >= 1 and v["answer_trained"] and v["carries_trained"] for v in near.values())
    # one addend away, counted by hand for one problem: replace one addend of 6+0+0+0 by another digit
    key = og.equivalent_key("6+0+0+0=")
    trained = {og.equivalent_key(p["prompt"]) for p in pools["rl"] + pools["sft"]}
    by_hand = {
        tuple(sorted(key[:i] + (d,) + key[i + 1 :])) for i in range(4) for d in range(10) if d != key[i]
    } & trained
    if "6+0+0+0=" in near:
        assert near["6+0+0+0="]["one_addend_away"] == len(by_hand)


def test_transfer_sets_are_disjoint_from_every_training_problem():
    pools = og.task_pools()
    trained = pools["rl"] + pools["sft"] + pools["heldout"] + og.two_operand_facts()
    trained_keys = {og.equivalent_key(p["prompt"]) for p in trained}
    for n in og.TRANSFER_ADDENDS:
        problems = og.transfer_problems(n)
        assert len(problems) == og.HELDOUT_SIZE == len({og.equivalent_key(p["prompt"]) for p in problems})
        assert all(
            len(og.addends_of(p["prompt"])) == n and p["answer"] == sum(og.addends_of(p["prompt"])) for p in problems
        )
        assert not {og.equivalent_key(p["prompt"]) for p in problems} & trained_keys
        assert og.transfer_problems(n) == problems, "a fixed set"
        assert og.transfer_max_new_tokens(25, n) >= 25
    assert og.transfer_max_new_tokens(25, 5) == 34 and og.transfer_max_new_tokens(25, 3) == 25
    with pytest.raises(ValueError):
        og.transfer_problems(og.ADDENDS)


def test_encode_prompts_contract():
    """og.encode_prompts: {input_ids, attention_mask}, long [B, P] on the CPU, left-padded; a tuple is accepted like a
    list; a bare string, an empty list or a non-string item raises ValueError."""
    import torch
    from transformers import AutoTokenizer

    from tools.tiny_model import tiny_checkpoint_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint_path(seed=0), local_files_only=True)
    prompts = ["1+2+3+4=", "9+9=", "5+5+5+5="]
    enc = og.encode_prompts(tokenizer, prompts)
    assert set(enc) == {"input_ids", "attention_mask"}
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert ids.dtype == mask.dtype == torch.long and ids.device.type == "cpu" and ids.shape == mask.shape
    rows = [tokenizer(og.chat_prompt(tokenizer, p), add_special_tokens=False)["input_ids"] for p in prompts]
    assert ids.shape == (3, max(len(r) for r in rows))
    for i, row in enumerate(rows):
        assert ids[i, ids.shape[1] - len(row) :].tolist() == row, "tokens at the right end: left padding"
        assert mask[i].tolist() == [0] * (ids.shape[1] - len(row)) + [1] * len(row)
    assert torch.equal(og.encode_prompts(tokenizer, tuple(prompts))["input_ids"], ids)
    for bad in ("1+2+3+4=", [], ["1+2=", 3], None):
        with pytest.raises(ValueError, match="prompts"):
            og.encode_prompts(tokenizer, bad)


# ----------------------------------------------------------------------------------- the PNGs of make online
def test_make_online_figures_are_pngs_beside_their_json(tmp_path):
    """save_figures: a run's record gets its step curves, a seeds summary its held-out curve, as a PNG with the JSON's
    stem beside it; a summary without a curve (the TRL trainer's) gets none."""
    record = og.load_seed_records(ROOT, og.SEEDS_REFERENCE_LABEL)[0]
    summary = og.load_seeds_summary(ROOT, og.SEEDS_REFERENCE_LABEL)
    for name, document in (("online-grpo_x_seed0.json", record), ("online-grpo-seeds_x.json", summary)):
        png = og.save_figures(tmp_path / name, document)
        assert png == tmp_path / name.replace(".json", ".png") == og.figure_paths(tmp_path / name)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert og.save_figures(tmp_path / "none.json", {k: v for k, v in summary.items() if k != "heldout_curve"}) is None
    assert not (tmp_path / "none.png").exists()
