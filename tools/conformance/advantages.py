"""The advantage check: the advantage block of ``GRPOTrainer._generate_and_score_completions``, compiled from TRL's
installed source, against the lesson's function (``scale_rewards`` group / batch / none, ``normalize_then_sum``),
and MiniMind's population std against TRL's group scaling."""

from __future__ import annotations

import inspect
import math
import textwrap
from types import SimpleNamespace

import torch

from tools.conformance.cases import ADVANTAGE_CASES
from tools.conformance.stand_ins import TrlApiChanged, trl_method

ADVANTAGE_BLOCK_START = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"


ADVANTAGE_BLOCK_END = "advantages = torch.nan_to_num(advantages, nan=0.0)"


def _trl_advantage_code(GRPOTrainer):
    """The advantage block of GRPOTrainer._generate_and_score_completions, compiled from TRL's installed source."""
    method = trl_method(GRPOTrainer, "_generate_and_score_completions")
    try:
        source = inspect.getsource(method)
    except (OSError, TypeError) as error:
        raise TrlApiChanged("GRPOTrainer._generate_and_score_completions", f"读不到源码：{error}") from None
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == ADVANTAGE_BLOCK_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == ADVANTAGE_BLOCK_END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise TrlApiChanged(
            "GRPOTrainer._generate_and_score_completions",
            f"找不到计算优势的那段代码（起止行：{ADVANTAGE_BLOCK_START!r} ... {ADVANTAGE_BLOCK_END!r}）",
        )
    block = textwrap.dedent("\n".join(lines[starts[0] : ends[0] + 1]))
    return compile(block, f"<trl {GRPOTrainer.__module__} advantage block>", "exec"), method


def _advantage_fixture():
    """Rewards of 3 prompts x 4 completions from 2 reward functions, with None (NaN) entries and one unscorable row."""
    nan = float("nan")
    rewards_per_func = torch.tensor(
        [
            [1.0, 0.5],
            [0.0, 1.0],
            [1.0, nan],
            [0.0, 0.0],  # prompt 0
            [0.3, 0.2],
            [0.9, 0.4],
            [0.1, 0.8],
            [nan, nan],  # prompt 1: one completion no function could score
            [2.0, 0.1],
            [0.5, 0.3],
            [1.5, 0.9],
            [0.2, 0.6],  # prompt 2
        ],
        dtype=torch.float32,
    )
    return rewards_per_func, torch.tensor([0.7, 0.3]), 4


def advantage_checks(GRPOTrainer, fns, atol):
    """scale_rewards group / batch / none and normalize_then_sum: TRL's own code against the lesson's function."""
    code, method = _trl_advantage_code(GRPOTrainer)
    rewards_per_func, weights, num_generations = _advantage_fixture()
    results, failures = {}, []
    for case in ADVANTAGE_CASES:
        stand_in = SimpleNamespace(
            multi_objective_aggregation=case["multi_objective_aggregation"],
            scale_rewards=case["scale_rewards"],
            reward_weights=weights,
            reward_funcs=[None] * weights.numel(),
        )
        namespace = dict(method.__globals__)  # TRL's module globals: torch, nanstd, ...
        namespace.update(
            self=stand_in,
            rewards_per_func=rewards_per_func.clone(),
            num_generations=num_generations,
            device=torch.device("cpu"),
        )
        try:
            exec(code, namespace)  # noqa: S102  (TRL's own source lines, nothing else)
        except (AttributeError, NameError, KeyError) as error:
            raise TrlApiChanged(
                "GRPOTrainer._generate_and_score_completions", f"优势代码需要的名字变了：{error}"
            ) from None
        trl_adv = namespace["advantages"].double()  # [N]
        course_adv = fns["advantages"](
            rewards_per_func.clone(),
            weights,
            num_generations,
            scale_rewards=case["scale_rewards"],
            multi_objective_aggregation=case["multi_objective_aggregation"],
        ).double()
        entry = {
            "trl_advantages": [round(v, 6) for v in trl_adv.tolist()],
            "course_advantages": [round(v, 6) for v in course_adv.tolist()],
            "max_abs_error": float((trl_adv - course_adv).abs().max()),
        }
        entry["passed"] = bool(
            trl_adv.shape == course_adv.shape
            and entry["max_abs_error"] <= max(atol, 1e-5)
            and bool(torch.isfinite(course_adv).all())
        )
        results[case["name"]] = entry
        failures += [] if entry["passed"] else [f"advantages.{case['name']}"]
    # the course's MiniMind convention (population std) against TRL's group scaling (Bessel), same single objective
    single = rewards_per_func[:, 0].nan_to_num(0.0)[:8]  # [2*G], two scorable prompts
    stand_in = SimpleNamespace(
        multi_objective_aggregation="sum_then_normalize",
        scale_rewards="group",
        reward_weights=torch.tensor([1.0]),
        reward_funcs=[None],
    )
    namespace = dict(method.__globals__)
    namespace.update(
        self=stand_in,
        rewards_per_func=single[:, None].clone(),
        num_generations=num_generations,
        device=torch.device("cpu"),
    )
    exec(code, namespace)  # noqa: S102
    minimind = fns["group_relative_advantages"](single.double(), num_generations)
    results["minimind_population_std_vs_trl"] = {
        "rewards": [round(v, 6) for v in single.tolist()],
        "trl_group": [round(v, 6) for v in namespace["advantages"].tolist()],
        "minimind": [round(v, 6) for v in minimind.tolist()],
        "ratio_minimind_over_trl": round(float(minimind[0] / namespace["advantages"][0].double()), 6),
        "sqrt_g_over_g_minus_1": round(math.sqrt(num_generations / (num_generations - 1)), 6),
    }
    return results, failures
