"""``GRPOTrainer._calculate_rewards`` on two reward functions: the weights, ``None`` -> NaN and a dataset column
passed through, as TRL applies them."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from tools.conformance.stand_ins import MissingAttribute, StandIn, TrlApiChanged, local_accelerator, trl_method
from tools.grading import trusted  # the genuine torch.allclose, captured before any learner code ran


def reward_check(GRPOTrainer, reads):
    """Two reward functions through GRPOTrainer._calculate_rewards; weights and NaN rule as TRL applies them."""
    calculate_rewards = trl_method(GRPOTrainer, "_calculate_rewards")
    seen_columns = []

    def correctness_reward(prompts, completions, expected_answer, **kwargs):
        seen_columns.append(list(expected_answer))  # the dataset's extra column, one value per completion
        return [None if c.strip() == "?" else float(c.strip() == a) for c, a in zip(completions, expected_answer)]

    def integer_format_reward(prompts, completions, **kwargs):
        return [1.0 if c.strip().lstrip("-").isdigit() else None for c in completions]

    rows = [
        {"prompt": "2+2=", "completion": "4", "expected_answer": "4"},
        {"prompt": "2+2=", "completion": "four", "expected_answer": "4"},
        {"prompt": "3*3=", "completion": "8", "expected_answer": "9"},
        {"prompt": "3*3=", "completion": "?", "expected_answer": "9"},
    ]
    weights = torch.tensor([0.9, 0.1])
    trainer = StandIn(
        "trainer",
        reads,
        reward_funcs=[correctness_reward, integer_format_reward],
        reward_processing_classes=[None, None],
        reward_func_names=["correctness", "integer_format"],
        reward_weights=weights,
        accelerator=local_accelerator(reads),
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]),
        _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None,
        environments=None,
    )
    prompts = [r["prompt"] for r in rows]
    completions = [r["completion"] for r in rows]
    try:
        per_func = calculate_rewards(trainer, rows, prompts, completions, [[0]] * len(rows))
    except MissingAttribute as error:
        raise TrlApiChanged(str(error), "GRPOTrainer._calculate_rewards 读取了这个属性，而本核对没有提供") from None
    except TypeError as error:
        raise TrlApiChanged("GRPOTrainer._calculate_rewards", f"调用方式变了：{error}") from None
    # TRL's combination rule (_generate_and_score_completions, multi_objective_aggregation="sum_then_normalize")
    unscorable = torch.isnan(per_func).all(dim=1)  # [N]
    combined = (per_func * weights[None, :]).nansum(dim=1)  # [N]
    combined[unscorable] = torch.nan
    nan = float("nan")
    expected_columns = torch.tensor([[1.0, 1.0], [0.0, nan], [0.0, 1.0], [nan, nan]])
    checks = {
        "reward_columns_match": bool(trusted("torch.allclose")(per_func, expected_columns, equal_nan=True)),
        "none_became_nan": bool(torch.isnan(per_func[1, 1]) and torch.isnan(per_func[3, 0])),
        "extra_column_passed": seen_columns == [["4", "4", "9", "9"]],
        "weighted_rewards_match": bool(trusted("torch.allclose")(combined[:3], torch.tensor([1.0, 0.0, 0.1]))),
        "unscorable_kept_nan": bool(unscorable.tolist() == [False, False, False, True] and torch.isnan(combined[3])),
    }
    return checks, {
        "rewards_per_func": [[None if v != v else round(v, 6) for v in row] for row in per_func.tolist()],
        "combined": [None if v != v else round(v, 6) for v in combined.tolist()],
    }
