"""One online GRPO run of lesson 7, and the check of a RUN_MODE preset.

``run_online_experiment``: evaluate the held-out set and the transfer sets, train with the lesson's ``train_fn`` (the
held-out curve every ``eval_every`` steps in between), evaluate again, and write the validated record; every
evaluation samples with its own seed, derived from the run's (``evaluation_seed``). ``train_fn`` and ``verify`` come
from the caller (the notebook passes its own functions, ``make online`` the saved ones): this runtime never imports
the generated ``tools.lessons``. ``preset_check``: a few training steps of a preset, checking that only its LoRA
adapter trains.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path

from tools.online.config import (
    RUN_PRESETS,
    OnlineConfig,
    load_preset_policy,
    make_optimizer,
    preset_config,
    preset_dtype,
)
from tools.online.evaluation import evaluate, evaluation_seed
from tools.online.record import (
    SCHEMA_VERSION,
    framework_versions,
    hardware_snapshot,
    load_average,
    output_relative_path,
    resolve_root,
    utc_now,
    write_record,
)
from tools.online.task import ADDENDS, TASK_ID, TRANSFER_ADDENDS, heldout_groups, split_problems, transfer_problems
from tools.online.warm_start import (
    check_warm_start,
    content_hash,
    load_policy,
    sft_checkpoint_path,
    warm_start_platform_of,
)
from tools.project_runtime import check_run_label


def print_progress(row: dict) -> None:
    if row["step"] % 5 == 0:
        kl = "-" if row["kl_ref"] is None else f"{row['kl_ref']:.4f}"
        print(
            f"step {row['step']:3d}  reward {row['reward_mean']:.3f}±{row['reward_std']:.3f}  "
            f"zero_std {row['frac_reward_zero_std']:.2f}  len {row['completion_length']:.2f}  "
            f"clip {row['clip_ratio_low']:.3f}/{row['clip_ratio_high']:.3f}  approx_kl {row['approx_kl']:.5f}  "
            f"kl_ref {kl}  entropy {row['entropy']:.3f}  strict {row['strict_accuracy']:.3f}  "
            f"{row['seconds']:.2f}s",
            flush=True,
        )


def run_online_experiment(
    train_fn,
    config: OnlineConfig,
    label: str,
    *,
    verify,
    model=None,
    tokenizer=None,
    warm_start=None,
    heldout=None,
    train=None,
    root=None,
    progress=None,
    write: bool = True,
    warm_start_variant: str = "sft",
    record_seed: int | None = None,
) -> dict:
    """Evaluate -> ``train_fn`` -> evaluate, and write the validated record; returns it.

    ``train_fn(model, tokenizer, train_problems, config, ref_model=..., progress=...)`` is the lesson's
    ``train_online_grpo`` (the notebook passes its own; ``make online`` the saved one) and ``verify`` nb04's
    ``verify_integer_response`` (held-out correctness). Without ``model``
    the cached SFT warm start ``warm_start_variant`` (WARM_STARTS) is loaded. ``wall_seconds`` covers loading,
    both evaluations and training.
    """
    import torch

    check_run_label(label)
    if not isinstance(config, OnlineConfig):  # an OnlineConfig was checked when it was built (and is frozen)
        raise ValueError(f"config 必须是 OnlineConfig，收到 {type(config).__name__}")
    root = Path(root) if root is not None else resolve_root()
    started = time.perf_counter()
    cpu_started = time.process_time()
    hardware = hardware_snapshot()
    check_warm_start(warm_start_variant)
    if model is None:
        path, cached, build_seconds = sft_checkpoint_path(seed=0, root=root, variant=warm_start_variant)
        model, tokenizer = load_policy(path)
        warm_start = {
            "path": str(path.relative_to(root)),
            "cached": cached,
            "build_seconds": build_seconds,
            "variant": warm_start_variant,
        }
        built_on = warm_start_platform_of(path)
        if built_on is not None:
            warm_start["built_on"] = built_on
    warm_start = dict(warm_start or {})
    path = Path(warm_start.get("path", ""))
    full = path if path.is_absolute() else root / path
    # (no path: a model built in memory - an empty path would name the course root and hash the whole repository)
    warm_start["content_sha256"] = content_hash(full) if warm_start.get("path") and full.is_dir() else "0" * 64
    default_train, default_heldout = split_problems()
    train = default_train if train is None else train
    heldout = default_heldout if heldout is None else heldout
    ks = tuple(k for k in (1, 2, 4, 8, 16) if k <= config.eval_k)

    def held_out(step):  # the held-out evaluation after `step` training steps, with its own sampling seed
        return evaluate(
            model,
            tokenizer,
            heldout,
            verify,
            samples_per_prompt=config.eval_k,
            temperature=config.temperature,
            max_new_tokens=config.max_new_tokens,
            seed=evaluation_seed(config.seed, step),
            ks=ks,
        )

    transfer_sets = {n: transfer_problems(n, size=len(heldout)) for n in TRANSFER_ADDENDS}

    def transfer(step):  # the transfer sets (TRANSFER_ADDENDS addends), room for their longest scratchpad; pass@1 only
        return {
            str(n): evaluate(
                model,
                tokenizer,
                problems,
                verify,
                samples_per_prompt=config.eval_k,
                temperature=config.temperature,
                max_new_tokens=transfer_max_new_tokens(config.max_new_tokens, n),
                seed=evaluation_seed(config.seed, step),
                ks=(1,),
            )
            for n, problems in transfer_sets.items()
        }

    torch.manual_seed(config.seed)
    before = held_out(0)
    transfer_before = transfer(0)
    ref_model = copy.deepcopy(model).eval() if config.beta > 0 else None
    if ref_model is not None:
        for parameter in ref_model.parameters():
            parameter.requires_grad_(False)
    curve, curve_seconds = [curve_point(0, before)], 0.0

    def on_step(row):  # the held-out curve: every config.eval_every steps, between the before and after evaluations
        nonlocal curve_seconds
        if progress is not None:
            progress(row)
        done = row["step"] + 1
        if config.eval_every and done % config.eval_every == 0 and done < config.num_steps:
            started_eval = time.perf_counter()
            curve.append(curve_point(done, held_out(done)))
            curve_seconds += time.perf_counter() - started_eval
            if progress is not None:
                print(f"held-out pass@1 after {done} steps: {curve[-1]['pass_at_1']:.3f}", flush=True)

    train_started = time.perf_counter()
    steps = train_fn(model, tokenizer, train, config, ref_model=ref_model, progress=on_step)
    train_seconds = time.perf_counter() - train_started - curve_seconds
    after = held_out(len(steps))
    transfer_after = transfer(len(steps))
    curve.append(curve_point(len(steps), after))
    hardware["load_average_after"] = load_average()
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_label": label,
        "created_utc": utc_now(),
        "config": config.to_dict(),
        "task": {
            "id": TASK_ID,
            "train_prompts": len(train),
            "heldout_prompts": len(heldout),
            "disjoint": not ({p["prompt"] for p in train} & {p["prompt"] for p in heldout}),
        },
        "warm_start": warm_start,
        "steps": steps,
        "eval": {
            "heldout_prompts": len(heldout),
            "before": before,
            "after": after,
            "groups": heldout_groups(train, heldout),
            "curve": curve,
            "transfer": {
                key: {
                    "prompts": len(transfer_sets[int(key)]),
                    "before": transfer_before[key],
                    "after": transfer_after[key],
                }
                for key in transfer_before
            },
        },
        "train_seconds": round(train_seconds, 3),
        "curve_eval_seconds": round(curve_seconds, 3),
        "wall_seconds": round(time.perf_counter() - started, 3),
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
        "framework": framework_versions(),
        "hardware": hardware,
    }
    if write:
        write_record(root / output_relative_path(label, seed=record_seed), record)
    return record


CURVE_PER_PROMPT_KEYS = ("pass_at_1", "scratchpad_share", "mean_chars")  # evaluate()'s columns a curve point keeps


def curve_point(step: int, evaluation: dict) -> dict:
    """One point of the held-out curve: after ``step`` training steps, ``evaluate``'s pass@1, outcome shares, share of
    completions that show their work and mean length in characters, and the per-prompt columns of the three
    (CURVE_PER_PROMPT_KEYS, in the order of the held-out prompts; the multi-seed summary bootstraps over them)."""
    return {
        "step": int(step),
        "pass_at_1": evaluation["pass_at_1"],
        "outcomes": evaluation["outcomes"],
        "scratchpad_share": evaluation["kinds"]["scratchpad"]["share"],
        "mean_completion_chars": evaluation["mean_completion_chars"],
        "per_prompt": {key: evaluation["per_prompt"][key] for key in CURVE_PER_PROMPT_KEYS},
    }


def transfer_max_new_tokens(max_new_tokens: int, addends: int) -> int:
    """The completion length limit of a transfer set of ``addends`` addends: the run's ``max_new_tokens`` (sized for
    the longest scratchpad of ADDENDS addends), scaled by the scratchpad's number of steps, never below it."""
    return max(int(max_new_tokens), math.ceil(max_new_tokens * (addends - 1) / (ADDENDS - 1)))


def preset_check(train_fn, mode: str, model_path, steps: int = 2, bf16_native: bool | None = None, **overrides) -> dict:
    """``steps`` training steps of RUN_MODE ``mode``'s preset (its config, dtype and LoRA for the card: ``preset``;
    ``bf16_native`` picks the card's variant on any machine) on the checkpoint folder ``model_path`` with the lesson's
    ``train_fn``, on CUDA when available else the CPU, at a reduced batch (2 prompts x 4 completions) unless
    ``overrides`` set other config fields. Checks: the trainable
    parameters are exactly the LoRA adapter's (count from the shapes: rank x (in + out) per targeted Linear), AdamW
    holds state for those parameters only, the base weights are bit-identical after training and the adapter moved,
    every logged metric is finite. Returns a JSON-ready report with ``passed``."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, tokenizer = load_preset_policy(mode, model_path, device=device, bf16_native=bf16_native)
    config = preset_config(
        mode, bf16_native, **{"num_steps": steps, "prompts_per_step": 2, "num_generations": 4, **overrides}
    )
    lora = RUN_PRESETS[mode]["lora"]
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainable_before = {n: p.detach().clone() for n, p in trainable.items()}
    expected = None
    if lora is not None:
        expected = sum(
            lora["rank"] * (m.in_features + m.out_features)
            for name, m in model.named_modules()
            if name.split(".")[-1] in lora["target_modules"] and hasattr(m, "base_layer")
        )
    optimizer = make_optimizer(model, config.learning_rate)
    train, _ = split_problems()
    started = time.perf_counter()
    steps_log = train_fn(model, tokenizer, train, config, optimizer=optimizer)
    seconds = time.perf_counter() - started
    state_tensors = [t for st in optimizer.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0]
    state_numel = sum(t.numel() for t in state_tensors)
    n_trainable = sum(p.numel() for p in trainable.values())
    n_total = sum(p.numel() for p in model.parameters())
    checks = {
        "steps_logged": len(steps_log) == steps,
        "metrics_finite": all(math.isfinite(v) for row in steps_log for v in row.values() if isinstance(v, float)),
        "optimizer_state_only_for_trainable": state_numel == 2 * n_trainable,  # exp_avg + exp_avg_sq
        "base_weights_unchanged": all(
            torch.equal(p.detach(), frozen_before[n]) for n, p in model.named_parameters() if not p.requires_grad
        ),
        "trainable_weights_moved": any(not torch.equal(p.detach(), trainable_before[n]) for n, p in trainable.items()),
    }
    if lora is not None:
        checks["trainable_count_is_lora"] = n_trainable == expected
        checks["only_lora_trainable"] = all("lora_" in n for n in trainable)
        checks["dtype_is_preset"] = all(
            p.dtype == preset_dtype(mode, bf16_native) for p in frozen_before.values() if p.is_floating_point()
        )
    return {
        "mode": mode,
        "model": str(model_path),
        "device": device,
        "dtype": str(preset_dtype(mode, bf16_native)),
        "config": config.to_dict(),
        "learning_rate": config.learning_rate,
        "lora": None if lora is None else dict(lora, target_modules=list(lora["target_modules"])),
        "trainable_parameters": n_trainable,
        "expected_trainable": expected,
        "total_parameters": n_total,
        "optimizer_state_numel": state_numel,
        "seconds": round(seconds, 3),
        "completion_length": [row["completion_length"] for row in steps_log],
        "approx_kl": [row["approx_kl"] for row in steps_log],
        "clip_ratio": [row["clip_ratio_low"] + row["clip_ratio_high"] for row in steps_log],
        "checks": checks,
        "passed": all(checks.values()),
    }
