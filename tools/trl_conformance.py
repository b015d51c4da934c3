"""Conformance of the course's GRPO losses and advantages with TRL's real ``GRPOTrainer`` code paths.

Lesson 3B (``nb03b_loss_family_trl``) hands its learner's own functions to :func:`check_trl_conformance`; the check
runs TRL's private methods next to them on controlled inputs and returns a JSON-ready dict:

- ``GRPOTrainer._calculate_rewards``: two reward functions, ``None`` -> NaN, a dataset column passed through;
- ``GRPOTrainer._compute_loss``: every ``loss_type`` the course teaches (grpo, bnpo, dr_grpo, dapo, cispo, GSPO's
  sequence level, and the provided sapo / luspo / vespo, ``delta``, ``use_bias_correction_kl=True`` and the
  gradient-accumulation division), value and gradient with respect to the per-token log-probs;
- the advantage block of ``GRPOTrainer._generate_and_score_completions`` (``scale_rewards`` group / batch / none,
  ``multi_objective_aggregation="normalize_then_sum"``), executed from TRL's installed source.

No model, no generation, no full ``Trainer``: a stand-in object provides exactly the attributes those methods read,
and records every read (reported as ``trl_reads``). ``status`` is ``passed`` / ``failed`` (with ``failed``: the cases
that differ), ``skipped`` (no TRL installed; the lesson then needs the PT-CPU profile) or ``api_changed`` (TRL's
private API moved: ``attribute`` names what). Written for ``trl==1.16.0``; another version runs and is noted.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import tempfile
import textwrap
import warnings
from collections import defaultdict
from types import SimpleNamespace

import torch

from tools.grading import trusted  # the genuine torch.allclose, captured before any learner code ran

TRL_VERSION_WRITTEN_FOR = "1.16.0"
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas", "trl-conformance-v1.json")
ADVANTAGE_BLOCK_START = "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)"
ADVANTAGE_BLOCK_END = "advantages = torch.nan_to_num(advantages, nan=0.0)"


class TrlApiChanged(Exception):
    """TRL's private API no longer matches what this check was written for."""

    def __init__(self, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


class _MissingAttribute(AttributeError):
    pass


class _StandIn:
    """Attribute bag standing in for a GRPOTrainer; records every attribute TRL reads from it."""

    def __init__(self, label, reads, **attrs):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_reads", reads)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name):
        attrs = object.__getattribute__(self, "_attrs")
        label = object.__getattribute__(self, "_label")
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in attrs:
            object.__getattribute__(self, "_reads").add(f"{label}.{name} (缺失)")
            raise _MissingAttribute(f"{label}.{name}")
        object.__getattribute__(self, "_reads").add(f"{label}.{name}")
        return attrs[name]

    def __setattr__(self, name, value):
        object.__getattribute__(self, "_attrs")[name] = value


class _RecordingView:
    """Forwards attribute reads to a real object (the GRPOConfig) and records them."""

    def __init__(self, label, target, reads):
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name):
        object.__getattribute__(self, "_reads").add(f"{object.__getattribute__(self, '_label')}.{name}")
        return getattr(object.__getattribute__(self, "_target"), name)


class _RecordingInputs(dict):
    """The `inputs` dict of _compute_loss; records which keys TRL reads."""

    def __init__(self, reads, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._reads = reads

    def __getitem__(self, key):
        self._reads.add(f"inputs[{key!r}]")
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._reads.add(f"inputs[{key!r}]")
        return super().get(key, default)


def _local_accelerator(reads, num_processes=1):
    """Single-process stand-in for accelerate.Accelerator: reduce / gather are identities."""
    return _StandIn(
        "accelerator",
        reads,
        num_processes=num_processes,
        process_index=0,
        device=torch.device("cpu"),
        is_main_process=False,
        sync_gradients=True,
        reduce=lambda value, reduction="sum": value,
        gather=lambda value: value,
        gather_for_metrics=lambda value: value,
    )


def _trl_config(GRPOConfig, **overrides):
    base = dict(
        output_dir=os.path.join(tempfile.gettempdir(), "grpo-course-trl-check"),
        use_cpu=True,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        per_device_train_batch_size=8,
        num_generations=4,
        gradient_accumulation_steps=1,
    )
    base.update(overrides)
    try:
        with warnings.catch_warnings():  # transformers' own deprecation notices are not about this check
            warnings.simplefilter("ignore", FutureWarning)
            return GRPOConfig(**base)
    except TypeError as error:  # a field was renamed or removed
        raise TrlApiChanged("GRPOConfig", str(error)) from None


def _trl_method(GRPOTrainer, name):
    method = getattr(GRPOTrainer, name, None)
    if method is None:
        raise TrlApiChanged(f"GRPOTrainer.{name}", "方法不存在")
    return method


def _controlled_batch(
    advantage_fn, seed, n_prompts, num_generations, t, lengths, spread, big_log_ratio=None, dtype=torch.float64
):
    """Controlled log-probs whose ratios leave the clip range, variable-length masks, MiniMind advantages."""
    gen = torch.Generator().manual_seed(seed)
    n = n_prompts * num_generations
    old = -torch.rand(n, t, generator=gen, dtype=dtype) * 2.5 - 0.05  # [B*G, T]
    log_ratio = (torch.rand(n, t, generator=gen, dtype=dtype) * 2.0 - 1.0) * spread  # [B*G, T]
    if big_log_ratio is not None:  # push some tokens above a large absolute cap (CISPO)
        log_ratio[::2, 0] = big_log_ratio
    policy = old + log_ratio  # [B*G, T]
    ref = old + 0.3 * torch.randn(n, t, generator=gen, dtype=dtype)  # [B*G, T]
    mask = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]  # [B*G, T]
    rewards = torch.rand(n, generator=gen, dtype=dtype)  # [B*G]
    advantages = advantage_fn(rewards, num_generations)  # [B*G]
    return policy, old, ref, mask, advantages


def _trl_loss_and_grad(
    GRPOTrainer,
    config,
    reads,
    policy,
    old,
    ref,
    mask,
    advantages,
    *,
    num_items_in_batch,
    training=True,
    accumulation_steps=1,
):
    """Run GRPOTrainer._compute_loss on controlled log-probs; return (loss, d loss / d policy_logps)."""
    compute_loss = _trl_method(GRPOTrainer, "_compute_loss")
    leaf = policy.detach().clone().requires_grad_(True)

    def controlled_logps(_model, *args, **kwargs):
        # bypass the model forward: hand TRL the controlled per-token log-probs (and zero entropies)
        return leaf, torch.zeros_like(leaf), None

    model = _StandIn("model", reads, training=training)
    trainer = _StandIn(
        "trainer",
        reads,
        model=model,
        args=_RecordingView("args", config, reads),
        accelerator=_local_accelerator(reads),
        _get_per_token_logps_and_entropies=controlled_logps,
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=config.importance_sampling_level,
        loss_type=config.loss_type,
        beta=config.beta,
        epsilon_low=config.epsilon,
        epsilon_high=config.epsilon_high if config.epsilon_high is not None else config.epsilon,
        max_completion_length=config.max_completion_length,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        get_gamma_weights=getattr(GRPOTrainer, "get_gamma_weights", None),  # TRL's own (static) VESPO weights
        current_gradient_accumulation_steps=accumulation_steps,
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    n, t = policy.shape
    inputs = _RecordingInputs(
        reads,
        {
            "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
            "prompt_mask": torch.ones(n, 1, dtype=torch.long),
            "completion_ids": torch.zeros(n, t, dtype=torch.long),
            "completion_mask": mask.long(),
            "advantages": advantages,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "num_items_in_batch": torch.tensor(float(num_items_in_batch)),
        },
    )
    try:
        loss = compute_loss(trainer, model, inputs)
    except _MissingAttribute as error:
        raise TrlApiChanged(
            str(error), "GRPOTrainer._compute_loss 读取了这个属性，而本核对没有提供（TRL 私有 API 已变化）"
        ) from None
    except KeyError as error:
        raise TrlApiChanged(f"inputs[{error}]", "GRPOTrainer._compute_loss 需要的输入键变了") from None
    except TypeError as error:
        raise TrlApiChanged("GRPOTrainer._compute_loss", f"调用方式变了：{error}") from None
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def _facts_read(reads, inputs_present):
    """The reads this check documents: model/args/accelerator attributes and the loss inputs TRL looked up."""
    keep = [r for r in reads if r.split(".")[0] in ("model", "args", "accelerator")]
    keep += [r for r in reads if any(r == f"inputs[{key!r}]" for key in inputs_present)]
    return sorted(keep)


def _course_kwargs(case, old, adv, mask, ref, items) -> dict:
    """The course loss's arguments for a conformance ``case`` on one batch (what its TRL config sets)."""
    return dict(
        old_logps=old,
        advantages=adv,
        completion_mask=mask,
        loss_type=case["loss_type"],
        epsilon_low=case["epsilon"],
        epsilon_high=case["epsilon_high"],
        importance_sampling_level=case["importance_sampling_level"],
        beta=case["beta"],
        ref_logps=ref,
        max_completion_length=_MAX_LEN,
        num_items_in_batch=items,
    )


def _course_loss_and_grad(fn, policy, **kwargs):
    leaf = policy.detach().clone().requires_grad_(True)
    loss = fn(leaf, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


def _clipping_fired(importance_ratio, policy, old, mask, advantages, case):
    """How many valid tokens sit in a clipped region (zero GRPO gradient or capped CISPO weight)."""
    ratio = importance_ratio(policy, old, mask, case["importance_sampling_level"]).expand(policy.shape).detach()
    adv = advantages[:, None].expand(policy.shape)
    if case["loss_type"] == "cispo":
        fired = ratio > case["epsilon_high"]
    else:
        low, high = 1 - case["epsilon"], 1 + case["epsilon_high"]
        fired = ((ratio > high) & (adv > 0)) | ((ratio < low) & (adv < 0))
    outside = (ratio > (case["epsilon_high"] if case["loss_type"] == "cispo" else 1 + case["epsilon_high"])) | (
        ratio < 1 - case["epsilon"]
    )
    return int((fired & mask).sum()), int((outside & mask).sum())


def _reward_check(GRPOTrainer, reads):
    """Two reward functions through GRPOTrainer._calculate_rewards; weights and NaN rule as TRL applies them."""
    calculate_rewards = _trl_method(GRPOTrainer, "_calculate_rewards")
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
    trainer = _StandIn(
        "trainer",
        reads,
        reward_funcs=[correctness_reward, integer_format_reward],
        reward_processing_classes=[None, None],
        reward_func_names=["correctness", "integer_format"],
        reward_weights=weights,
        accelerator=_local_accelerator(reads),
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
    except _MissingAttribute as error:
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


LOSS_CASES = [
    # name, TRL config, how the course computes the same objective (the learner's grpo_family_loss)
    dict(name="grpo", loss_type="grpo", epsilon=0.2, epsilon_high=0.2, importance_sampling_level="token", beta=0.04),
    dict(
        name="grpo_clip_higher",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.0,
    ),
    dict(name="bnpo", loss_type="bnpo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(
        name="dr_grpo",
        loss_type="dr_grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.04,
    ),
    dict(name="dapo", loss_type="dapo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(name="cispo", loss_type="cispo", epsilon=0.2, epsilon_high=5.0, importance_sampling_level="token", beta=0.04),
    dict(
        name="gspo_sequence",
        loss_type="grpo",
        epsilon=3e-4,
        epsilon_high=4e-4,
        importance_sampling_level="sequence",
        beta=0.0,
    ),
]
EXTENDED_CASES = [
    # TRL 1.16's other loss types and options, computed by the lesson's provided `extended_loss`
    dict(name="sapo", loss_type="sapo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.04),
    dict(
        name="luspo", loss_type="luspo", epsilon=3e-4, epsilon_high=4e-4, importance_sampling_level="sequence", beta=0.0
    ),
    dict(name="vespo", loss_type="vespo", epsilon=0.2, epsilon_high=0.28, importance_sampling_level="token", beta=0.0),
    dict(
        name="grpo_delta",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.0,
        delta=1.5,
    ),
    dict(
        name="grpo_bias_correction_kl",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.2,
        importance_sampling_level="token",
        beta=0.04,
        use_bias_correction_kl=True,
    ),
    dict(
        name="dapo_bias_correction_kl",
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.04,
        use_bias_correction_kl=True,
    ),
    dict(
        name="grpo_accumulation_2",
        loss_type="grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.04,
        accumulation_steps=2,
    ),
    dict(
        name="bnpo_accumulation_2",
        loss_type="bnpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.0,
        accumulation_steps=2,
    ),
    dict(
        name="dr_grpo_accumulation_2",
        loss_type="dr_grpo",
        epsilon=0.2,
        epsilon_high=0.28,
        importance_sampling_level="token",
        beta=0.0,
        accumulation_steps=2,
    ),
]
ADVANTAGE_CASES = [
    dict(name="group", scale_rewards="group", multi_objective_aggregation="sum_then_normalize"),
    dict(name="batch", scale_rewards="batch", multi_objective_aggregation="sum_then_normalize"),
    dict(name="none", scale_rewards="none", multi_objective_aggregation="sum_then_normalize"),
    dict(name="normalize_then_sum", scale_rewards="group", multi_objective_aggregation="normalize_then_sum"),
]
_LENGTHS = [8, 3, 5, 8, 1, 6, 2, 7]  # [B*G] = 2 prompts x 4 generations, variable lengths
_MAX_LEN = 8


def _case_config(GRPOConfig, case, **extra):
    return _trl_config(
        GRPOConfig,
        loss_type=case["loss_type"],
        epsilon=case["epsilon"],
        epsilon_high=case["epsilon_high"],
        importance_sampling_level=case["importance_sampling_level"],
        beta=case["beta"],
        use_bias_correction_kl=case.get("use_bias_correction_kl", False),
        delta=case.get("delta"),
        max_completion_length=_MAX_LEN,
        scale_rewards="group",
        gradient_accumulation_steps=case.get("accumulation_steps", 1),
        steps_per_generation=case.get("accumulation_steps", 1),
        **extra,
    )


def _loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol):
    entry = {
        "trl_loss": round(float(trl_loss), 8),
        "course_loss": round(float(course_loss), 8),
        "abs_error": float((trl_loss - course_loss).abs()),
        "grad_max_abs_error": float((trl_grad - course_grad).abs().max()),
    }
    entry["passed"] = bool(
        entry["abs_error"] <= atol
        and entry["grad_max_abs_error"] <= atol
        and math.isfinite(entry["abs_error"])
        and math.isfinite(entry["grad_max_abs_error"])
    )
    return entry


def _family_checks(GRPOTrainer, GRPOConfig, fns, atol):
    """The graded loss family against _compute_loss, case by case; plus MiniMind's two losses where they apply."""
    grpo_family_loss, importance_ratio = fns["grpo_family_loss"], fns["importance_ratio"]
    results, failures = {}, []
    for case in LOSS_CASES:
        reads = set()
        policy, old, ref, mask, adv = _controlled_batch(
            fns["group_relative_advantages"],
            seed=24,
            n_prompts=2,
            num_generations=4,
            t=_MAX_LEN,
            lengths=_LENGTHS,
            spread=0.9,
            big_log_ratio=2.0 if case["loss_type"] == "cispo" else None,
        )
        items = int(mask.sum())
        config = _case_config(GRPOConfig, case)
        trl_loss, trl_grad = _trl_loss_and_grad(
            GRPOTrainer, config, reads, policy, old, ref, mask, adv, num_items_in_batch=items
        )
        course_loss, course_grad = _course_loss_and_grad(
            grpo_family_loss, policy, **_course_kwargs(case, old, adv, mask, ref, items)
        )
        entry = _loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol)
        fired, outside = _clipping_fired(importance_ratio, policy, old, mask, adv, case)
        entry.update(
            clipped_tokens=fired,
            tokens_outside_clip_range=outside,
            valid_tokens=items,
            trl_reads=_facts_read(reads, inputs_present=("advantages", "num_items_in_batch")),
        )
        entry["passed"] &= fired > 0
        if (
            case["loss_type"] == "grpo"
            and case["importance_sampling_level"] == "token"
            and case["epsilon_high"] == case["epsilon"]
        ):
            mini, mini_grad = _course_loss_and_grad(
                fns["grpo_policy_loss"],
                policy,
                old_logps=old,
                advantages=adv,
                completion_mask=mask,
                epsilon=case["epsilon"],
                beta=case["beta"],
                ref_logps=ref,
            )
            entry["grpo_policy_loss_abs_error"] = float((mini - trl_loss).abs())
            entry["passed"] &= bool(
                entry["grpo_policy_loss_abs_error"] <= atol and (mini_grad - trl_grad).abs().max() <= atol
            )
        if case["loss_type"] == "cispo":
            cispo = fns["cispo_policy_loss"]
            mini, _ = _course_loss_and_grad(
                cispo,
                policy,
                old_logps=old,
                advantages=adv,
                completion_mask=mask,
                epsilon_high=case["epsilon_high"],
                beta=case["beta"],
                ref_logps=ref,
            )
            entry["minimind_reduction_loss"] = round(float(mini), 8)
            entry["minimind_vs_trl_reduction_diff"] = round(float(mini - trl_loss), 8)
            # equal-length batch: both reductions agree, so MiniMind's cispo_policy_loss must match TRL directly
            full = torch.ones_like(mask)
            trl_full, trl_full_grad = _trl_loss_and_grad(
                GRPOTrainer, config, set(), policy, old, ref, full, adv, num_items_in_batch=int(full.sum())
            )
            mini_full, mini_full_grad = _course_loss_and_grad(
                cispo,
                policy,
                old_logps=old,
                advantages=adv,
                completion_mask=full,
                epsilon_high=case["epsilon_high"],
                beta=case["beta"],
                ref_logps=ref,
            )
            entry["equal_lengths_cispo_policy_loss_abs_error"] = float((mini_full - trl_full).abs())
            entry["absolute_cap_confirmed"] = bool(
                entry["equal_lengths_cispo_policy_loss_abs_error"] <= atol
                and (mini_full_grad - trl_full_grad).abs().max() <= atol
            )
            # the other convention (cap = 1 + epsilon_high) gives a different number on these inputs
            one_plus, _ = _course_loss_and_grad(
                cispo,
                policy,
                old_logps=old,
                advantages=adv,
                completion_mask=full,
                epsilon_high=1.0 + case["epsilon_high"],
                beta=case["beta"],
                ref_logps=ref,
            )
            entry["one_plus_epsilon_high_abs_error"] = float((one_plus - trl_full).abs())
            entry["absolute_cap_confirmed"] &= entry["one_plus_epsilon_high_abs_error"] > atol
            # TRL's default epsilon_high (= epsilon = 0.2) caps nearly every ratio: measure how many tokens
            default_cap = _trl_config(GRPOConfig, loss_type="cispo").epsilon_high
            ratio = torch.exp(policy - old)[mask]  # [valid tokens]
            entry["trl_default_epsilon_high"] = default_cap
            entry["capped_fraction_at_trl_default"] = round(
                float((ratio > (default_cap if default_cap is not None else 0.2)).double().mean()), 4
            )
            entry["passed"] &= entry["absolute_cap_confirmed"]
        results[case["name"]] = entry
        failures += [] if entry["passed"] else [f"loss.{case['name']}"]

    # dapo over two micro-batches (gradient accumulation): TRL's per-micro-batch losses add up to the
    # course's token mean over the global batch
    policy, old, ref, mask, adv = _controlled_batch(
        fns["group_relative_advantages"],
        seed=7,
        n_prompts=2,
        num_generations=4,
        t=_MAX_LEN,
        lengths=_LENGTHS,
        spread=0.9,
    )
    config = _trl_config(
        GRPOConfig,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        use_bias_correction_kl=False,
        max_completion_length=_MAX_LEN,
        gradient_accumulation_steps=2,
        steps_per_generation=2,
    )
    items = int(mask.sum())
    halves = [slice(0, 4), slice(4, 8)]
    trl_total = sum(
        _trl_loss_and_grad(
            GRPOTrainer,
            config,
            set(),
            policy[s],
            old[s],
            ref[s],
            mask[s],
            adv[s],
            num_items_in_batch=items,
            accumulation_steps=2,
        )[0]
        for s in halves
    )
    course_total = grpo_family_loss(
        policy, old, adv, mask, "dapo", epsilon_low=0.2, epsilon_high=0.28, num_items_in_batch=items
    ).detach()
    entry = {
        "trl_loss_sum_over_micro_batches": round(float(trl_total), 8),
        "course_loss": round(float(course_total), 8),
        "abs_error": float((trl_total - course_total).abs()),
    }
    entry["passed"] = bool(entry["abs_error"] <= atol)
    results["dapo_two_micro_batches"] = entry
    failures += [] if entry["passed"] else ["loss.dapo_two_micro_batches"]
    return results, failures


def _extended_checks(GRPOTrainer, GRPOConfig, fns, atol):
    """TRL's sapo / luspo / vespo, delta, use_bias_correction_kl=True, accumulation: the lesson's extended_loss vs TRL."""
    extended_loss = fns["extended_loss"]
    results, failures = {}, []
    for case in EXTENDED_CASES:
        reads = set()
        policy, old, ref, mask, adv = _controlled_batch(
            fns["group_relative_advantages"],
            seed=31,
            n_prompts=2,
            num_generations=4,
            t=_MAX_LEN,
            lengths=_LENGTHS,
            spread=0.9,
        )
        items = int(mask.sum())
        steps = case.get("accumulation_steps", 1)
        config = _case_config(GRPOConfig, case)
        trl_loss, trl_grad = _trl_loss_and_grad(
            GRPOTrainer, config, reads, policy, old, ref, mask, adv, num_items_in_batch=items, accumulation_steps=steps
        )
        kwargs = dict(
            _course_kwargs(case, old, adv, mask, ref, items),
            delta=case.get("delta"),
            use_bias_correction_kl=case.get("use_bias_correction_kl", False),
            gradient_accumulation_steps=steps,
        )
        course_loss, course_grad = _course_loss_and_grad(extended_loss, policy, **kwargs)
        entry = _loss_entry(trl_loss, trl_grad, course_loss, course_grad, atol)
        entry["trl_reads"] = _facts_read(reads, inputs_present=("num_items_in_batch", "importance_sampling_ratio"))
        # each option must matter on these inputs, otherwise agreeing with TRL proves nothing about it
        if case.get("delta") is not None:
            plain, _ = _course_loss_and_grad(extended_loss, policy, **{**kwargs, "delta": None})
            entry["delta_changes_loss"] = bool((plain - course_loss).abs() > atol)
            entry["passed"] &= entry["delta_changes_loss"]
        if case.get("use_bias_correction_kl"):
            plain, plain_grad = _course_loss_and_grad(
                extended_loss, policy, **{**kwargs, "use_bias_correction_kl": False}
            )
            entry["correction_changes_loss"] = bool((plain - course_loss).abs() > atol)
            # on-policy (old = policy): the ratio is 1, the value is unchanged, the gradient is not
            on_kwargs = {**kwargs, "old_logps": policy.detach()}
            on_trl, on_trl_grad = _trl_loss_and_grad(
                GRPOTrainer, config, set(), policy, policy.detach(), ref, mask, adv, num_items_in_batch=items
            )
            on_course, on_course_grad = _course_loss_and_grad(extended_loss, policy, **on_kwargs)
            on_plain, on_plain_grad = _course_loss_and_grad(
                extended_loss, policy, **{**on_kwargs, "use_bias_correction_kl": False}
            )
            entry["on_policy"] = {
                "abs_error": float((on_trl - on_course).abs()),
                "grad_max_abs_error": float((on_trl_grad - on_course_grad).abs().max()),
                "loss_change_from_correction": float((on_course - on_plain).abs()),
                "grad_change_from_correction": float((on_course_grad - on_plain_grad).abs().max()),
            }
            entry["passed"] &= bool(
                entry["on_policy"]["abs_error"] <= atol
                and entry["on_policy"]["grad_max_abs_error"] <= atol
                and entry["on_policy"]["loss_change_from_correction"] <= atol
                and entry["on_policy"]["grad_change_from_correction"] > atol
            )
        if steps > 1:
            single, _ = _course_loss_and_grad(extended_loss, policy, **{**kwargs, "gradient_accumulation_steps": 1})
            entry["ratio_to_single_step"] = round(float(course_loss / single), 8)
            entry["passed"] &= abs(entry["ratio_to_single_step"] - 1.0 / steps) <= 1e-6
        results[case["name"]] = entry
        failures += [] if entry["passed"] else [f"extended.{case['name']}"]
    return results, failures


def _trl_advantage_code(GRPOTrainer):
    """The advantage block of GRPOTrainer._generate_and_score_completions, compiled from TRL's installed source."""
    method = _trl_method(GRPOTrainer, "_generate_and_score_completions")
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


def _advantage_checks(GRPOTrainer, fns, atol):
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


def check_trl_conformance(
    *,
    grpo_family_loss,
    grpo_policy_loss,
    cispo_policy_loss,
    importance_ratio,
    group_relative_advantages,
    extended_loss=None,
    advantages=None,
    atol=1e-6,
):
    """Compare the learner's losses (and the lesson's provided ones) with TRL's private code paths.

    ``grpo_family_loss(policy_logps, old_logps, advantages, completion_mask, loss_type, epsilon_low, epsilon_high,
    importance_sampling_level, beta, ref_logps, max_completion_length, num_items_in_batch)`` is the lesson's
    composition of the learner's per-token loss and reduction; ``extended_loss`` takes the same arguments plus
    ``delta``, ``use_bias_correction_kl`` and ``gradient_accumulation_steps``; ``advantages(rewards_per_func,
    reward_weights, num_generations, scale_rewards, multi_objective_aggregation)``. Returns a JSON-ready dict.
    """
    fns = dict(
        grpo_family_loss=grpo_family_loss,
        grpo_policy_loss=grpo_policy_loss,
        cispo_policy_loss=cispo_policy_loss,
        importance_ratio=importance_ratio,
        group_relative_advantages=group_relative_advantages,
        extended_loss=extended_loss,
        advantages=advantages,
    )
    try:
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as error:
        return {
            "status": "skipped",
            "reason": f"没有可用的 TRL（{error}）。本节需要 PT-CPU 环境：pip install trl=={TRL_VERSION_WRITTEN_FOR}",
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    trl_version = getattr(trl, "__version__", "unknown")
    try:  # GRPOTrainer's logging goes through accelerate, which needs its (single-process, CPU) state
        from accelerate import PartialState

        PartialState(cpu=True)
    except Exception as error:  # noqa: BLE001  (reported, not hidden)
        return {
            "status": "api_changed",
            "attribute": "accelerate.PartialState",
            "detail": str(error),
            "trl_version": trl_version,
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    paths = ["GRPOTrainer._calculate_rewards", "GRPOTrainer._compute_loss"]
    if advantages is not None:
        paths.append("GRPOTrainer._generate_and_score_completions (advantage block, TRL's source)")
    result = {
        "status": "passed",
        "trl_version": trl_version,
        "written_for": TRL_VERSION_WRITTEN_FOR,
        "framework_paths": paths,
        "atol": atol,
    }
    if trl_version != TRL_VERSION_WRITTEN_FOR:
        result["version_note"] = (
            f"本核对为 trl=={TRL_VERSION_WRITTEN_FOR} 编写，当前是 {trl_version}：照常运行，结果仅供参考"
        )
    failures = []
    try:
        reads = set()
        reward_checks, reward_values = _reward_check(GRPOTrainer, reads)
        result["rewards"] = {"checks": reward_checks, **reward_values}
        failures += [f"rewards.{k}" for k, ok in reward_checks.items() if not ok]

        default_config = _trl_config(GRPOConfig)
        for field in ("use_bias_correction_kl", "beta", "epsilon_high", "loss_type", "scale_rewards"):
            if not hasattr(default_config, field):
                raise TrlApiChanged(f"GRPOConfig.{field}", "字段不存在")
        result["trl_defaults"] = {
            "beta": default_config.beta,
            "use_bias_correction_kl": default_config.use_bias_correction_kl,
            "loss_type": default_config.loss_type,
            "epsilon": default_config.epsilon,
            "epsilon_high": default_config.epsilon_high,
            "scale_rewards": default_config.scale_rewards,
        }
        result["use_bias_correction_kl_default"] = default_config.use_bias_correction_kl

        loss_results, loss_failures = _family_checks(GRPOTrainer, GRPOConfig, fns, atol)
        result["loss"] = loss_results
        failures += loss_failures

        # the default use_bias_correction_kl=True multiplies the KL term by the ratio: not nb02 / nb03a's objective
        policy, old, ref, mask, adv = _controlled_batch(
            group_relative_advantages, seed=24, n_prompts=2, num_generations=4, t=_MAX_LEN, lengths=_LENGTHS, spread=0.9
        )
        config = _trl_config(GRPOConfig, loss_type="grpo", epsilon=0.2, beta=0.04, max_completion_length=_MAX_LEN)
        trl_default, _ = _trl_loss_and_grad(
            GRPOTrainer, config, set(), policy, old, ref, mask, adv, num_items_in_batch=int(mask.sum())
        )
        course_plain = grpo_policy_loss(policy, old, adv, mask, epsilon=0.2, beta=0.04, ref_logps=ref).detach()
        result["bias_correction_kl_effect"] = {
            "trl_default_loss": round(float(trl_default), 8),
            "course_loss": round(float(course_plain), 8),
            "changes_loss": bool((trl_default - course_plain).abs() > 1e-6),
        }
        if extended_loss is not None:
            extended_results, extended_failures = _extended_checks(GRPOTrainer, GRPOConfig, fns, atol)
            result["extended"] = extended_results
            failures += extended_failures
        if advantages is not None:
            advantage_results, advantage_failures = _advantage_checks(GRPOTrainer, fns, atol)
            result["advantages"] = advantage_results
            failures += advantage_failures
    except TrlApiChanged as error:
        return {
            "status": "api_changed",
            "attribute": error.what,
            "detail": error.detail,
            "trl_version": trl_version,
            "written_for": TRL_VERSION_WRITTEN_FOR,
        }
    if failures:
        result["status"] = "failed"
        result["failed"] = failures
    return result


def validate_result(result):
    """Raise jsonschema.ValidationError when ``result`` breaks tools/schemas/trl-conformance-v1.json (or holds NaN)."""
    from tools.notebook_runtime import schema_validator

    schema_validator(SCHEMA_PATH).validate(result)
    json.dumps(result, allow_nan=False)  # NaN / inf cannot be carried by JSON


def _fmt(value):
    return "-" if value is None else f"{value:.1e}"


def print_conformance_summary(result):
    """A short human-readable view of the result (Chinese); the lesson prints the full result as one JSON line."""
    print(
        f"status: {result['status']}  (trl {result.get('trl_version', '-')}, 核对为 trl=={result['written_for']} 编写)"
    )
    for key in ("reason", "version_note", "attribute", "detail", "failed"):
        if key in result:
            print(f"{key}: {result[key]}")
    if "rewards" in result:
        print("奖励核对:", ", ".join(f"{k}={v}" for k, v in result["rewards"]["checks"].items()))
    if "trl_defaults" in result:
        print("TRL 1.16 的默认值:", json.dumps(result["trl_defaults"], ensure_ascii=False))
    for section in ("loss", "extended"):
        if section not in result:
            continue
        print(f"{'case':<26}{'TRL':>12}{'本课':>12}{'|误差|':>10}{'梯度误差':>10}{'裁剪词元':>8}  通过")
        for name, entry in result[section].items():
            trl_value = entry.get("trl_loss", entry.get("trl_loss_sum_over_micro_batches"))
            print(
                f"{name:<26}{trl_value:>12.6f}{entry['course_loss']:>12.6f}{_fmt(entry['abs_error']):>10}"
                f"{_fmt(entry.get('grad_max_abs_error')):>10}{entry.get('clipped_tokens', '-'):>8}  {entry['passed']}"
            )
    cispo = result.get("loss", {}).get("cispo", {})
    if cispo:
        print(
            f"cispo：MiniMind 归约（回答等权）比 TRL 归约（全局词元均值）多 {cispo['minimind_vs_trl_reduction_diff']:+.6f}；"
            f"等长批上 cispo_policy_loss 与 TRL 一致（绝对上限）: {cispo['absolute_cap_confirmed']}；"
            f"TRL 默认 epsilon_high={cispo['trl_default_epsilon_high']}（即 = epsilon）时被封顶的词元比例 "
            f"{cispo['capped_fraction_at_trl_default']:.2f}"
        )
    if "bias_correction_kl_effect" in result:
        effect = result["bias_correction_kl_effect"]
        print(
            f"use_bias_correction_kl 默认值 = {result['use_bias_correction_kl_default']}，"
            f"默认值下 TRL 损失 {effect['trl_default_loss']:.6f}，本课（无修正）{effect['course_loss']:.6f}"
        )
    on_policy = result.get("extended", {}).get("grpo_bias_correction_kl", {}).get("on_policy")
    if on_policy:
        print(
            f"on-policy（old = policy）时 KL 修正使损失变化 {on_policy['loss_change_from_correction']:.1e}，"
            f"梯度变化 {on_policy['grad_change_from_correction']:.2e}"
        )
    if "advantages" in result:
        for name, entry in result["advantages"].items():
            if "max_abs_error" in entry:
                print(f"优势 {name:<20} TRL 源码 vs 本课 最大误差 {entry['max_abs_error']:.1e}  通过 {entry['passed']}")
        mm = result["advantages"]["minimind_population_std_vs_trl"]
        print(
            f"MiniMind（总体 std）/ TRL（Bessel std）= {mm['ratio_minimind_over_trl']:.6f}，"
            f"sqrt(G/(G-1)) = {mm['sqrt_g_over_g_minus_1']:.6f}"
        )
    if "loss" in result and "dapo" in result["loss"]:
        print("dapo 读取的属性:", ", ".join(result["loss"]["dapo"]["trl_reads"]))
