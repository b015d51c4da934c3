"""Pieces of the course's final experiment (notebook ``nb06_real_model_grpo``).

The notebook walks a learner through one chain: the verifier ``integer-answer-v1`` scores fixed candidate
responses -> group-relative advantages -> a few LoRA GRPO updates of a causal LM -> did the policy move
in the direction of the advantages? -> a JSON evidence record (schema ``post-training-mechanism-gpu/v2``).
The notebook shows and explains each step; the code of each step lives here so that it can be unit
tested (``tests/test_experiment.py``) and so that ``dry_run``, ``tiny_cpu`` and ``real_gpu`` share it.

Everything that depends on the run mode is an argument: the same update code runs in fp32 on the CPU
with the tiny local checkpoint and in bf16/fp16 autocast on a CUDA card with Qwen2.5-0.5B-Instruct.
Sequence log-probabilities only ever come from ``tools.post_training_runtime.response_sequence_logps``.

One home per function: the verifier is notebook 4's graded ``verify_integer_response`` and the advantages
are notebook 1's graded ``compute_group_advantages`` (both imported from ``tools.lessons``), so the
experiment scores and normalises exactly as the lessons grade.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tools.experiment_settings import (  # noqa: F401 (re-exported)
    ENV_MODEL_ID,
    RUN_MODES,
    SCHEMA_PATH,
    check_run_label,
    check_run_mode,
)
from tools.project_runtime import record_relative_path

SCHEMA_VERSION = "post-training-mechanism-gpu/v2"
SEMANTIC_ID = "PT-GRPO-LOSS"
VERIFIER_ID = "integer-answer-v1"
LOGPROB_FUNCTION = "tools.post_training_runtime.response_sequence_logps"
RESULTS_KIND = "pt_grpo"  # benchmarks/results/pt_grpo/ (reference records) or benchmarks/results/local/pt_grpo/
# The committed reference records (benchmarks/results/pt_grpo/): every other label is written under the git-ignored
# benchmarks/results/local/pt_grpo/ (tools.project_runtime.record_relative_path).
REFERENCE_RUN_LABELS = ("tiny_cpu_reference",)

# Optional, real_gpu only: force the compute dtype ("float16" -> fp16 autocast + GradScaler, "bfloat16").
# Used by tools/device/gpu_check.sh to exercise the fp16 path on a card that supports bf16.
ENV_FORCE_DTYPE = "GRPO_REAL_GPU_DTYPE"
# A GradScaler skips a step whose scaled gradients overflowed; the update loop retries until it has
# taken `update_steps` effective steps, but gives up after this many skips (a broken run, not noise).
MAX_SCALER_SKIPS = 16

# The seed's two fixed groups: one prompt each, four fixed responses each. A candidate set of group
# size G takes the first G responses of every group, so `minimal_pair` (G=2) is one correct, well
# formatted answer against one wrong one, and `expanded_group` (G=4) adds a correct answer in prose
# (format fails) and, in the first group, an answer with no integer at all (unjudgeable).
GROUP_FIXTURES: tuple[dict[str, Any], ...] = (
    {
        "prompt": "Return only the integer result of 2 + 2.",
        "expected_answer": 4,
        "responses": ("4", "5", "The answer is 4.", "I do not know."),
    },
    {
        "prompt": "Return only the integer result of 3 * 3.",
        "expected_answer": 9,
        "responses": ("9", "6", "The answer is 9.", "10"),
    },
)

EVIDENCE_LEVELS = {
    "dry_run": "dry_run",
    "tiny_cpu": "tiny_cpu_mechanism_check",
    "real_gpu": "real_model_grpo_rlvr_mechanism_benchmark",
    "real_gpu_random_init": "random_init_gpu_resource_benchmark",
}


# ----------------------------------------------------------------------------------------------------
# Run settings (mode and label: tools.experiment_settings; the model id override)
# ----------------------------------------------------------------------------------------------------
def model_id_override(model_id: str, environ: Mapping[str, str] | None = None) -> str:
    """``GRPO_MODEL_ID`` when set (a hub id or a local folder), else ``model_id``."""
    environ = os.environ if environ is None else environ
    return environ.get(ENV_MODEL_ID) or model_id


def output_relative_path(workload_id: str, run_label: str) -> Path:
    """``benchmarks/results/pt_grpo/{workload_id}_{run_label}.json`` for a committed reference label, else
    ``benchmarks/results/local/pt_grpo/...`` (git-ignored), relative to the course root."""
    return record_relative_path(RESULTS_KIND, workload_id, check_run_label(run_label), REFERENCE_RUN_LABELS)


# ----------------------------------------------------------------------------------------------------
# Verifier integer-answer-v1 and candidate sets
# ----------------------------------------------------------------------------------------------------
from tools.lessons.nb01_group_advantages import compute_group_advantages  # noqa: E402  (nb01's graded rule)
from tools.lessons.nb04_verifiable_rewards import verify_integer_response  # noqa: E402  (nb04's graded verifier)


@dataclass(frozen=True)
class CandidateSet:
    """One candidate set, flattened group by group (the TRL layout ``[num_groups * G]``)."""

    name: str
    group_size: int
    prompts: list[str]
    responses: list[str]
    group_ids: list[int]
    verifier_records: list[dict[str, Any]]  # one per response, with group_index and response added

    @property
    def rewards(self) -> list[float]:
        return [record["total_reward"] for record in self.verifier_records]


def build_candidate_set(
    name: str,
    group_size: int,
    fixtures: Sequence[Mapping[str, Any]] = GROUP_FIXTURES,
    correctness_weight: float = 1.0,
    format_weight: float = 0.1,
) -> CandidateSet:
    """Take the first ``group_size`` responses of every fixture group and score them with the verifier."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size 必须是 >= 2 的整数（组内至少两个候选才能比较），收到 {group_size!r}")
    prompts, responses, group_ids, records = [], [], [], []
    for group_index, fixture in enumerate(fixtures):
        available = list(fixture["responses"])
        if group_size > len(available):
            raise ValueError(f"第 {group_index} 组只有 {len(available)} 个固定候选，不够 group_size={group_size}")
        for response in available[:group_size]:
            prompts.append(fixture["prompt"])
            responses.append(response)
            group_ids.append(group_index)
            record = verify_integer_response(response, fixture["expected_answer"], correctness_weight, format_weight)
            records.append({"group_index": group_index, "response": response, **record})
    return CandidateSet(name, group_size, prompts, responses, group_ids, records)


def verifier_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Correctness and format pass rates over the candidates, and how many were unjudgeable."""
    if not records:
        raise ValueError("verifier_records 为空，无法统计通过率")
    count = len(records)
    return {
        "correctness_pass_rate": sum(r["correctness"] for r in records) / count,
        "format_pass_rate": sum(r["format_pass"] for r in records) / count,
        "unjudgeable_count": sum(r["status"] == "unjudgeable" for r in records),
    }


def fixtures_hash_items(fixtures: Sequence[Mapping[str, Any]] = GROUP_FIXTURES) -> list[str]:
    """The ordered strings whose hash identifies the embedded data set (prompt, answer, responses)."""
    return [
        json.dumps(
            {"prompt": f["prompt"], "expected_answer": f["expected_answer"], "responses": list(f["responses"])},
            ensure_ascii=False,
            sort_keys=True,
        )
        for f in fixtures
    ]


# ----------------------------------------------------------------------------------------------------
# Rewards -> group-relative advantages, and the zero-variance guard
# ----------------------------------------------------------------------------------------------------
def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Notebook 1's graded rule ``(r - mean_g) / max(std_g, eps)`` (population std), imported from
    ``tools.lessons.nb01_group_advantages``: a group whose rewards are all equal gets exactly zero
    advantages, also for float32 rewards that are not exactly representable (ten 1.1's, eight 0.1's).

    rewards: [N] float, group_ids: [N] int (any order). A bad input raises ``ValueError`` (nb01's contract).
    """
    return compute_group_advantages(rewards, group_ids, eps=eps)  # [N]


# Collapsed rewards the guard tries: 1.0 is exactly representable; 1.1 and 0.1 are not (in float32 a
# mean-then-subtract rule leaves residues like 1e-8 that a std floor of 1e-6 turns into 0.1-scale advantages).
ZERO_VARIANCE_PROBES = (1.0, 1.1, 0.1)


def zero_variance_guard(
    group_ids: torch.Tensor, eps: float = 1e-6, advantage_fn: Callable[..., torch.Tensor] = group_advantages
) -> bool:
    """True iff identical float32 rewards in every group give exactly zero advantages (no fake signal).

    Tries every value of :data:`ZERO_VARIANCE_PROBES` (1.0, 1.1, 0.1) for all candidates.
    ``advantage_fn`` is the function under test (the experiment passes :func:`group_advantages`); a
    version without the ``eps`` floor divides 0 by 0 (NaN), and a mean-then-subtract version with a
    floor passes 1.0 but not 1.1 or 0.1 (rounding residues divided by ``eps``).
    """
    for value in ZERO_VARIANCE_PROBES:
        collapsed = torch.full(group_ids.shape, value, dtype=torch.float32, device=group_ids.device)  # [N]
        advantages = advantage_fn(collapsed, group_ids, eps=eps)  # [N]
        if not bool(torch.isfinite(advantages).all() and advantages.eq(0).all()):
            return False
    return True


def reward_std_mean(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Mean over groups of the within-group population std of the rewards (0 = collapsed rewards)."""
    stds = [rewards[group_ids == gid].std(unbiased=False) for gid in group_ids.unique(sorted=True)]
    return float(torch.stack(stds).mean())


# ----------------------------------------------------------------------------------------------------
# The model side: precision, LoRA, log-probs, one GRPO update step
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Precision:
    """Where and in which precision the update runs (fp32 on CPU; bf16, else fp16, autocast on CUDA)."""

    device: torch.device
    dtype: torch.dtype
    autocast: bool
    grad_scaler: bool  # fp16 only: scale the loss so small gradients do not underflow

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")

    def autocast_context(self):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def bf16_natively_supported() -> bool:
    """True iff the current CUDA card runs bf16 natively (sm >= 80).

    ``torch.cuda.is_bf16_supported()`` defaults to ``including_emulation=True`` and then answers True on
    sm < 80 cards (T4, V100) that only emulate bf16; the experiment would then never take its fp16 +
    GradScaler branch there.
    """
    return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def forced_dtype(environ: Mapping[str, str] | None = None) -> torch.dtype | None:
    """``GRPO_REAL_GPU_DTYPE``: ``float16`` / ``bfloat16`` forces real_gpu's dtype; unset or empty -> None."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV_FORCE_DTYPE) or ""
    if not value:
        return None
    choices = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    if value not in choices:
        raise ValueError(f"{ENV_FORCE_DTYPE} 只能是 float16 或 bfloat16（或不设置），收到 {value!r}")
    return choices[value]


def select_precision(
    run_mode: str,
    cuda_available: bool | None = None,
    bf16_supported: bool | None = None,
    force_dtype: torch.dtype | None = None,
) -> Precision:
    """``tiny_cpu`` -> CPU fp32; ``real_gpu`` -> CUDA bf16 where natively supported, else fp16 (+ grad
    scaler). ``force_dtype`` (real_gpu only; see :func:`forced_dtype`) overrides the automatic choice.

    ``real_gpu`` without CUDA raises ``RuntimeError`` (the notebook turns it into a failure record).
    """
    check_run_mode(run_mode)
    if run_mode == "dry_run":
        raise ValueError("dry_run 不加载模型，没有计算精度可选")
    if run_mode == "tiny_cpu":
        return Precision(torch.device("cpu"), torch.float32, autocast=False, grad_scaler=False)
    cuda_available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if not cuda_available:
        raise RuntimeError(
            "RUN_MODE=real_gpu 需要 CUDA，但 torch.cuda.is_available() 为 False；没有 GPU 时请用 tiny_cpu 或 dry_run"
        )
    if force_dtype is not None:
        if force_dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"force_dtype 只能是 torch.float16 或 torch.bfloat16，收到 {force_dtype}")
        dtype = force_dtype
    else:
        if bf16_supported is None:
            bf16_supported = bf16_natively_supported()
        dtype = torch.bfloat16 if bf16_supported else torch.float16
    return Precision(torch.device("cuda"), dtype, autocast=True, grad_scaler=dtype == torch.float16)


def checkpoint_weights_kind(model_id: str) -> str:
    """``random_init`` when a local folder's ``course_checkpoint.json`` says so; ``local_checkpoint`` for
    another local folder; ``pretrained_hub`` for a hub id."""
    path = Path(model_id)
    if path.is_dir():
        marker = path / "course_checkpoint.json"
        if marker.is_file():
            try:
                weights = json.loads(marker.read_text(encoding="utf-8")).get("weights")
            except (OSError, ValueError):
                weights = None
            if weights == "random_init":
                return "random_init"
        return "local_checkpoint"
    return "pretrained_hub"


def resolve_model_path(model_id: str, root: Path) -> str:
    """A local checkpoint folder as an absolute path (a relative one is looked up under the course root
    first, then the working folder); anything else is returned unchanged as a hub id."""
    path = Path(model_id).expanduser()
    if path.is_absolute():
        return str(path)
    for base in (Path(root), Path.cwd()):
        if (base / path).is_dir():
            return str((base / path).resolve())
    return model_id


def display_model_id(model_path: str, root: Path) -> str:
    """How the record names the model: a hub id as is; a local folder relative to the course root when
    it lies inside it (no machine-specific absolute paths in committed evidence)."""
    path = Path(model_path)
    if path.is_dir():
        try:
            return path.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            return str(path)
    return str(model_path)


def attach_lora(
    model: torch.nn.Module, rank: int, alpha: float, dropout: float, target_modules: Sequence[str]
) -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
    """Wrap ``model`` with a LoRA adapter (peft); return the peft model and its trainable parameters.

    Only the adapter's A/B matrices train; the base weights are frozen. peft initialises B at zero, so
    the wrapped model starts exactly at the base policy (the experiment's baseline).
    """
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        bias="none",
        task_type=TaskType.CAUSAL_LM,
    )
    peft_model = get_peft_model(model, config)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    if not trainable:
        raise RuntimeError(f"LoRA 没有可训练参数：target_modules={list(target_modules)} 在模型中不存在？")
    return peft_model, trainable


def load_lora_policy(
    model_id: str,
    precision: Precision,
    *,
    revision: str | None,
    local_files_only: bool,
    lora_rank: int,
    lora_alpha: float,
    lora_dropout: float,
    target_modules: Sequence[str],
    seed: int,
) -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
    """Load the policy fresh (``from_pretrained``), put it on the device, attach LoRA under ``seed``."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    if precision.device.type == "cuda":
        torch.cuda.manual_seed_all(seed)
    kwargs: dict[str, Any] = {"local_files_only": local_files_only, "dtype": precision.dtype}
    if revision is not None:
        kwargs["revision"] = revision
    base = AutoModelForCausalLM.from_pretrained(model_id, **kwargs).to(precision.device)
    base.config.use_cache = False
    return attach_lora(base, lora_rank, lora_alpha, lora_dropout, target_modules)


def sequence_logps(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], precision: Precision) -> torch.Tensor:
    """Per-candidate mean response-token log-prob [N] in eval mode, without gradients (fp32 result)."""
    from tools.post_training_runtime import response_sequence_logps

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), precision.autocast_context():
            logps, _ = response_sequence_logps(model, batch, normalize=True)  # [N]
    finally:
        model.train(was_training)
    return logps.detach().float()


def full_precision_sequence_logps(
    model: torch.nn.Module, batch: Mapping[str, torch.Tensor], precision: Precision
) -> torch.Tensor:
    """[N] eval-mode log-probs at the same weights computed in float32: every half-precision parameter
    upcast (exact), no autocast; afterwards every parameter gets its dtype back (bf16 -> fp32 -> bf16 is
    lossless, the Parameter objects - and so the optimizer's references and tied weights - are kept).
    For an fp32 run it is just :func:`sequence_logps`. Its gap to the run's own log-probs is how far
    rounding alone moves a log-prob (see :func:`logprob_noise`).
    """
    fp32 = Precision(precision.device, torch.float32, autocast=False, grad_scaler=False)
    halves = [(param, param.dtype) for param in model.parameters() if param.dtype in (torch.float16, torch.bfloat16)]
    try:
        for param, _ in halves:
            param.data = param.data.float()
        return sequence_logps(model, batch, fp32)  # [N]
    finally:
        for param, dtype in halves:
            param.data = param.data.to(dtype)


def clipped_surrogate(
    new_logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, clip_range: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's sequence-level GRPO objective and the fraction of clipped ratios.

    ratio = exp(new - old); loss = -mean(min(ratio * A, clip(ratio, 1-eps, 1+eps) * A)).
    The clip fraction counts candidates whose ratio left [1-eps, 1+eps] (the seed's definition: it
    measures how far the policy has moved, whichever side the advantage is on).
    """
    if not (new_logps.shape == old_logps.shape == advantages.shape) or new_logps.ndim != 1:
        raise ValueError("new_logps、old_logps、advantages 必须是同形状的一维张量 [N]")
    if not 0 < clip_range < 1:
        raise ValueError(f"clip_range 必须在 (0, 1) 之间，收到 {clip_range}")
    ratio = torch.exp(new_logps.float() - old_logps.float())  # [N]
    clipped_ratio = ratio.clamp(1.0 - clip_range, 1.0 + clip_range)  # [N]
    advantages = advantages.float()  # [N]
    loss = -torch.minimum(ratio * advantages, clipped_ratio * advantages).mean()  # []
    clip_fraction = ratio.detach().ne(clipped_ratio.detach()).float().mean()  # []
    return loss, clip_fraction


@dataclass(frozen=True)
class StepResult:
    loss: float
    gradient_norm: float
    clip_fraction: float
    update_ms: float
    skipped: bool = False  # fp16: the GradScaler found inf/NaN gradients and skipped optimizer.step()
    new_logps: torch.Tensor | None = None  # [N] train-mode log-probs before this step (detached, CPU fp32)


def grpo_update_step(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    trainable: Sequence[torch.nn.Parameter],
    clip_range: float,
    precision: Precision,
    scaler: torch.amp.GradScaler | None = None,
) -> StepResult:
    """One optimizer step of the clipped objective; the timing covers forward, backward and step.

    The gradient norm is taken on unscaled gradients (after ``scaler.unscale_`` in fp16). With a
    ``scaler``, an overflow (non-finite gradients) is normal: the scaler skips ``optimizer.step()`` and
    lowers its scale; the result then has ``skipped=True`` (its gradient norm is not finite) and the
    caller retries (see :func:`run_update_steps`). A non-finite loss, or non-finite gradients without a
    scaler, raise ``FloatingPointError`` instead of writing NaN evidence.
    """
    from tools.post_training_runtime import response_sequence_logps
    from tools.training_mechanism_runtime import gradient_l2_norm

    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision.synchronize()
    started = time.perf_counter()
    with precision.autocast_context():
        new_logps, _ = response_sequence_logps(model, batch, normalize=True)  # [N]
    loss, clip_fraction = clipped_surrogate(new_logps, old_logps, advantages, clip_range)
    if not torch.isfinite(loss.detach()):
        raise FloatingPointError(f"GRPO 损失不是有限值：{float(loss.detach())}")
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    gradient_norm = float(gradient_l2_norm(trainable))
    skipped = False
    if scaler is not None:
        scale_before = float(scaler.get_scale())
        scaler.step(optimizer)  # skipped by the scaler when the unscaled gradients hold inf/NaN
        scaler.update()
        skipped = float(scaler.get_scale()) < scale_before  # the scale only drops after an overflow
    else:
        optimizer.step()
    precision.synchronize()
    update_ms = (time.perf_counter() - started) * 1000.0
    if not skipped and not math.isfinite(gradient_norm):
        raise FloatingPointError(f"梯度范数不是有限值：{gradient_norm}")
    return StepResult(
        float(loss.detach()), gradient_norm, float(clip_fraction), update_ms, skipped, new_logps.detach().float().cpu()
    )


def run_update_steps(
    model: torch.nn.Module,
    batch: Mapping[str, torch.Tensor],
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    trainable: Sequence[torch.nn.Parameter],
    clip_range: float,
    precision: Precision,
    scaler: torch.amp.GradScaler | None,
    update_steps: int,
    max_skips: int = MAX_SCALER_SKIPS,
) -> tuple[list[StepResult], int, torch.Tensor]:
    """Take ``update_steps`` *effective* optimizer steps; return ``(steps, skipped, first_new_logps)``.

    ``steps`` are the effective steps only (finite numbers); ``skipped`` counts GradScaler overflow
    skips (each one is retried; more than ``max_skips`` raises ``FloatingPointError``);
    ``first_new_logps`` [N] are the train-mode log-probs of the very first attempt, taken at the
    weights ``old_logps`` saw (so their gap to ``old_logps`` is numerical noise, see
    :func:`logprob_noise`).
    """
    if isinstance(update_steps, bool) or not isinstance(update_steps, int) or update_steps < 1:
        raise ValueError(f"update_steps 必须是正整数，收到 {update_steps!r}")
    steps: list[StepResult] = []
    skipped = 0
    first_new_logps = None
    while len(steps) < update_steps:
        result = grpo_update_step(
            model, batch, old_logps, advantages, optimizer, trainable, clip_range, precision, scaler
        )
        if first_new_logps is None:
            first_new_logps = result.new_logps
        if result.skipped:
            skipped += 1
            if skipped > max_skips:
                raise FloatingPointError(
                    f"GradScaler 连续跳过了 {skipped} 步（梯度一直溢出），已取 {len(steps)} 个有效步：这不是正常的 fp16 溢出"
                )
            continue
        steps.append(result)
    return steps, skipped, first_new_logps


# A separation counts only when it exceeds this multiple of the measured log-prob noise (see logprob_noise).
# policy_separation = (mean new - mean old over the positive candidates) - (the same over the negative ones):
# four evaluations, each off by up to one measured gap g, so noise alone can move it by up to 4 g.
NOISE_MARGIN_FACTOR = 4.0


def logprob_noise(
    old_logps: torch.Tensor,
    first_train_logps: torch.Tensor,
    repeat_eval_logps: torch.Tensor,
    full_precision_logps: torch.Tensor | None = None,
) -> dict[str, float]:
    """How far the log-probs move with no update at all, and the margin a separation must beat.

    - ``train_eval_logprob_gap``: max |train-mode forward (with grad) - eval-mode forward (no grad)| at
      the same weights, before any step. In exact arithmetic 0; with bf16 on a GPU, train and eval may
      run different kernels (SDPA picks per mode), which is why step 1's loss is only about 0.
    - ``eval_repeat_logprob_gap``: max |eval forward - the same eval forward repeated|.
    - ``precision_logprob_gap``: max |the run's eval forward - the float32 forward at the same weights|
      (:func:`full_precision_sequence_logps`): how far bf16/fp16 rounding alone moves a log-prob (0 for
      an fp32 run; 0.0 when not given).
    - ``noise_margin = NOISE_MARGIN_FACTOR * max(the gaps)`` = 4 x the largest gap: a separation is a
      difference of two mean shifts, each a difference of two evaluations (after minus before); if every
      evaluation is off by at most g, noise moves the separation by at most 2 g + 2 g = 4 g.

    What it does not guard: the gaps are measured once, at the initial weights, on these N candidates (a
    sample of the noise, not a bound for the updated weights); one run is one seed (no spread across seeds);
    and on an fp32 CPU run all three gaps are exactly 0.0, so the margin is 0 and the rule reduces to
    "separation > 0" (every committed record so far is such a run).
    """
    old = old_logps.detach().float().cpu()  # [N]
    train_gap = float((first_train_logps.detach().float().cpu() - old).abs().max())
    repeat_gap = float((repeat_eval_logps.detach().float().cpu() - old).abs().max())
    precision_gap = (
        0.0 if full_precision_logps is None else float((full_precision_logps.detach().float().cpu() - old).abs().max())
    )
    return {
        "train_eval_logprob_gap": train_gap,
        "eval_repeat_logprob_gap": repeat_gap,
        "precision_logprob_gap": precision_gap,
        "noise_margin": NOISE_MARGIN_FACTOR * max(train_gap, repeat_gap, precision_gap),
    }


def policy_separation(old_logps: torch.Tensor, new_logps: torch.Tensor, advantages: torch.Tensor) -> float:
    """Mean log-prob shift of positive-advantage candidates minus that of negative-advantage ones.

    > 0: the update moved probability towards the candidates the verifier preferred.
    """
    shifts = new_logps.float() - old_logps.float()  # [N]
    positive, negative = advantages > 0, advantages < 0  # [N] bool
    if not positive.any() or not negative.any():
        raise ValueError("策略分离需要至少一个正优势和一个负优势候选（奖励全等的组没有方向）")
    return float(shifts[positive].mean() - shifts[negative].mean())


def restart_peak_memory(precision: Precision) -> None:
    """CUDA: restart the peak counter from what is allocated now (after a measurement-only detour, such as
    :func:`full_precision_sequence_logps`'s float32 weights, that the update itself never needs)."""
    if precision.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(precision.device)


def reset_peak_memory(precision: Precision) -> int | None:
    """CUDA: empty the cache, reset the peak counter, return ``memory_allocated`` now - what the previous
    candidate set left behind (the batch only, if the model and optimizer were freed). CPU: None."""
    if precision.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(precision.device)
        return int(torch.cuda.memory_allocated(precision.device))
    return None


def peak_memory(precision: Precision, allocated_at_start: int | None = None) -> dict[str, Any]:
    """CUDA: ``max_memory_allocated`` since the last reset (per candidate set). CPU: the process's peak
    resident set size since it started - named as such, because it is neither per candidate set nor
    tensor memory only. ``allocated_at_start``: :func:`reset_peak_memory`'s value (CUDA), else None."""
    from tools.training_mechanism_runtime import peak_rss_bytes

    rss = peak_rss_bytes()  # None where the platform cannot tell (Windows)
    rss = None if rss is None else int(rss)
    start = None if allocated_at_start is None else int(allocated_at_start)
    if precision.device.type == "cuda":
        return {
            "peak_memory_metric": "cuda_max_memory_allocated",
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(precision.device)),
            "peak_rss_bytes": rss,
            "allocated_bytes_at_start": start,
        }
    return {
        "peak_memory_metric": "process_peak_rss" if rss is not None else "unavailable",
        "peak_allocated_bytes": None,
        "peak_rss_bytes": rss,
        "allocated_bytes_at_start": start,
    }


# ----------------------------------------------------------------------------------------------------
# The token workload: shapes, response-token counts, tokenizer and token-id hashes
# ----------------------------------------------------------------------------------------------------
def batch_shape_entry(name: str, batch: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """What one candidate set's batch costs: ``[B, T]``, per-row response tokens (the scored ones:
    ``response_mask[:, 1:]``, end-of-turn token included), prompt tokens and attended tokens."""
    input_ids = batch["input_ids"]  # [B, T]
    attention = batch["attention_mask"].bool()  # [B, T]
    response = batch["response_mask"].bool()  # [B, T]
    response_tokens = [int(v) for v in response[:, 1:].sum(dim=-1).cpu()]  # [B]
    first_response = response.float().argmax(dim=-1)  # [B] index of the first response token
    return {
        "candidate_set": name,
        "input_ids_shape": [int(v) for v in input_ids.shape],
        "response_tokens": response_tokens,
        "response_tokens_total": int(sum(response_tokens)),
        "prompt_tokens": [int(v) for v in first_response.cpu()],
        "attended_tokens_total": int(attention.sum()),
    }


def _sha256(parts: Iterable[bytes]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def tokenizer_hash(tokenizer) -> str:
    """sha256 of what decides the token ids: the tokenizer's full serialisation (vocabulary, merges,
    normaliser, pre-tokeniser, special tokens; ``backend_tokenizer.to_str()`` for a fast tokenizer) and
    its chat template. Two records with the same hash tokenised with the same rules."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        body = backend.to_str()
    else:  # a slow tokenizer: its vocabulary and special tokens
        body = json.dumps(
            {"vocab": sorted(tokenizer.get_vocab().items()), "special": sorted(map(str, tokenizer.all_special_tokens))},
            ensure_ascii=False,
        )
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        template = json.dumps(template, sort_keys=True, ensure_ascii=False)
    return _sha256([body.encode("utf-8"), template.encode("utf-8")])


def token_ids_hash(batches: Sequence[Mapping[str, torch.Tensor]]) -> str:
    """sha256 of every batch's ``input_ids``, ``attention_mask`` and ``response_mask`` (in order):
    equal hashes = the same token workload, token for token."""
    parts = []
    for batch in batches:
        for key in ("input_ids", "attention_mask", "response_mask"):
            tensor = batch[key].detach().cpu().to(torch.int64).contiguous()
            parts.append(json.dumps([key, list(tensor.shape)]).encode())
            parts.append(tensor.numpy().tobytes())
    return _sha256(parts)


# ----------------------------------------------------------------------------------------------------
# Record assembly, decision rule, schema validation, writing
# ----------------------------------------------------------------------------------------------------
MEASURED_FIELDS = (
    "trainable_parameters",
    "losses",
    "gradient_norms",
    "clip_fractions",
    "mean_clip_fraction",
    "logprob_shifts",
    "policy_separation",
    "train_eval_logprob_gap",
    "eval_repeat_logprob_gap",
    "precision_logprob_gap",
    "noise_margin",
    "scaler_skipped_steps",
    "update_ms",
    "median_update_ms",
    "p95_update_ms",
    "peak_memory_metric",
    "peak_allocated_bytes",
    "peak_rss_bytes",
    "allocated_bytes_at_start",
)


def candidate_entry(
    candidate_set: CandidateSet,
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    advantages: torch.Tensor,
    guard_passed: bool,
) -> dict[str, Any]:
    """The verifier/advantage half of a candidate set's record; update fields start as ``None``."""
    entry: dict[str, Any] = {
        "candidate_set": candidate_set.name,
        "group_size": candidate_set.group_size,
        "verifier_records": [dict(r) for r in candidate_set.verifier_records],
        **verifier_summary(candidate_set.verifier_records),
        "rewards": [float(v) for v in rewards.detach().cpu()],
        "advantages": [float(v) for v in advantages.detach().cpu()],
        "reward_std_mean": reward_std_mean(rewards.detach().cpu(), group_ids.detach().cpu()),
        "nonzero_advantages": int(advantages.ne(0).sum()),
        "zero_variance_guard_passed": bool(guard_passed),
    }
    entry.update({name: None for name in MEASURED_FIELDS})
    return entry


def add_update_measurements(
    entry: dict[str, Any],
    steps: Sequence[StepResult],
    old_logps: torch.Tensor,
    final_logps: torch.Tensor,
    advantages: torch.Tensor,
    trainable_parameters: int,
    memory: Mapping[str, Any],
    noise: Mapping[str, float] | None = None,
    scaler_skipped_steps: int = 0,
) -> dict[str, Any]:
    """Fill the update half of a candidate set's record from the steps and the before/after log-probs.

    ``noise`` is :func:`logprob_noise`'s result (required for a decision); ``scaler_skipped_steps``
    counts the GradScaler overflow skips that :func:`run_update_steps` retried.
    """
    from tools.training_mechanism_runtime import median_and_p95

    if not steps:
        raise ValueError("没有任何更新步骤，无法记录更新证据")
    update_ms = [s.update_ms for s in steps]
    median_ms, p95_ms = median_and_p95(update_ms)
    clip_fractions = [s.clip_fraction for s in steps]
    entry.update(
        {
            "trainable_parameters": int(trainable_parameters),
            "losses": [s.loss for s in steps],
            "gradient_norms": [s.gradient_norm for s in steps],
            "clip_fractions": clip_fractions,
            "mean_clip_fraction": sum(clip_fractions) / len(clip_fractions),
            "logprob_shifts": [float(v) for v in (final_logps.float() - old_logps.float()).cpu()],
            "policy_separation": policy_separation(old_logps.cpu(), final_logps.cpu(), advantages.cpu()),
            "train_eval_logprob_gap": None if noise is None else float(noise["train_eval_logprob_gap"]),
            "eval_repeat_logprob_gap": None if noise is None else float(noise["eval_repeat_logprob_gap"]),
            "precision_logprob_gap": None if noise is None else float(noise.get("precision_logprob_gap", 0.0)),
            "noise_margin": None if noise is None else float(noise["noise_margin"]),
            "scaler_skipped_steps": int(scaler_skipped_steps),
            "update_ms": update_ms,
            "median_update_ms": float(median_ms),
            "p95_update_ms": float(p95_ms),
            **dict(memory),
        }
    )
    return entry


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_record(
    *,
    run_mode: str,
    run_label: str,
    environment_profile: str,
    framework: Mapping[str, Any],
    hardware: Mapping[str, Any],
    model: Mapping[str, Any],
    dataset: Mapping[str, Any],
    workload: Mapping[str, Any],
    verifier: Mapping[str, Any],
) -> dict[str, Any]:
    """A record that claims nothing yet: no candidates, no failure, level ``dry_run``, ``not_measured``."""
    return {
        "schema_version": SCHEMA_VERSION,
        "semantic_id": SEMANTIC_ID,
        "environment_profile": environment_profile,
        "run_mode": check_run_mode(run_mode),
        "run_label": check_run_label(run_label),
        "created_utc": utc_now(),
        "framework": dict(framework),
        "hardware": dict(hardware),
        "runtime": {
            "device": None,
            "dtype": None,
            "dtype_choice": None,
            "autocast": False,
            "grad_scaler": False,
            "logprob_function": LOGPROB_FUNCTION,
            "logprob_normalize": True,
        },
        "model": dict(model),
        "dataset": dict(dataset),
        "workload": {"batch_shapes": None, "tokenizer_hash": None, "token_ids_hash": None, **dict(workload)},
        "verifier": dict(verifier),
        "baseline": {"name": "sampling_policy_before_update"},
        "candidates": [],
        "failure": None,
        "evidence_level": "dry_run",
        "decision": "not_measured",
        "decision_rules": None,
        "highest_separation_candidate": None,
        "timing": {"total_seconds": None},
    }


COURSE_RULE = (
    "every candidate set: policy_separation > noise_margin (4 x the largest no-update log-prob gap), "
    "zero_variance_guard_passed, reward_std_mean > 0"
)
REFERENCE_RULE = (
    "the reference document's rule: every candidate set: policy_separation > 0, "
    "zero_variance_guard_passed, reward_std_mean > 0"
)
# Decisions: a pretrained (or other non-random) model, and tiny_cpu's mechanism check, use the reference
# vocabulary; a random-init GPU run only says whether its code path behaved, never that a mechanism holds.
MODEL_DECISIONS = ("accept_mechanism", "tune")
RANDOM_INIT_DECISIONS = ("random_init_path_ok", "random_init_path_tune")


def decision_rules(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Both rules evaluated on the measured candidate sets: the course's (noise margin) and the reference's."""
    if not candidates:
        raise ValueError("没有候选组结果，无法做决策")
    for c in candidates:
        if c.get("policy_separation") is None or c.get("noise_margin") is None:
            raise ValueError(f"候选组 {c.get('candidate_set')!r} 缺少 policy_separation 或 noise_margin，无法做决策")
    common = all(c["zero_variance_guard_passed"] and c["reward_std_mean"] > 0 for c in candidates)
    course = common and all(c["policy_separation"] > c["noise_margin"] for c in candidates)
    reference = common and all(c["policy_separation"] > 0 for c in candidates)
    return {
        "course_rule": {"rule": COURSE_RULE, "passed": bool(course)},
        "reference_rule": {"rule": REFERENCE_RULE, "passed": bool(reference)},
    }


def decide(candidates: Sequence[Mapping[str, Any]], random_init: bool = False) -> str:
    """The course's rule (:data:`COURSE_RULE`): ``accept_mechanism`` / ``tune``; for a random-init GPU run
    ``random_init_path_ok`` / ``random_init_path_tune`` (random weights prove no mechanism)."""
    passed = decision_rules(candidates)["course_rule"]["passed"]
    vocabulary = RANDOM_INIT_DECISIONS if random_init else MODEL_DECISIONS
    return vocabulary[0] if passed else vocabulary[1]


def highest_separation(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Diagnostic only: which candidate set separated most. Never a configuration choice."""
    best = max(candidates, key=lambda c: c["policy_separation"])
    return {
        "candidate_set": best["candidate_set"],
        "group_size": best["group_size"],
        "interpretation": "diagnostic_only_not_configuration_selection",
    }


def finalize_measured(record: dict[str, Any]) -> dict[str, Any]:
    """Set evidence level, decision and the diagnostic for a run whose updates all completed."""
    mode = record["run_mode"]
    if mode == "dry_run":
        record.update(
            {
                "evidence_level": "dry_run",
                "decision": "not_measured",
                "decision_rules": None,
                "highest_separation_candidate": None,
            }
        )
        return record
    random_init_gpu = False
    if mode == "tiny_cpu":
        level = EVIDENCE_LEVELS["tiny_cpu"]
    elif record["model"].get("weights") == "random_init":
        level, random_init_gpu = EVIDENCE_LEVELS["real_gpu_random_init"], True
    else:
        level = EVIDENCE_LEVELS["real_gpu"]
    record.update(
        {
            "evidence_level": level,
            "decision": decide(record["candidates"], random_init=random_init_gpu),
            "decision_rules": decision_rules(record["candidates"]),
            "highest_separation_candidate": highest_separation(record["candidates"]),
        }
    )
    return record


def mark_failure(record: dict[str, Any], stage: str, error: BaseException) -> dict[str, Any]:
    """Turn ``record`` into a failure record: the stage, the error, ``reject_until_fixed``.

    Candidate sets that were not fully measured are reset to their unmeasured form so that the record
    never mixes half-filled numbers with a claim.
    """
    from tools.notebook_runtime import failure_record

    for entry in record["candidates"]:
        if entry.get("losses") is None or entry.get("policy_separation") is None:
            entry.update({name: None for name in MEASURED_FIELDS})
    record.update(
        {
            "failure": failure_record(stage, error),
            "evidence_level": f"failed_{record['run_mode']}_attempt",
            "decision": "reject_until_fixed",
            "decision_rules": None,
            "highest_separation_candidate": None,
        }
    )
    return record


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise if ``record`` breaks the schema (jsonschema) or holds a NaN/inf (which JSON cannot carry)."""
    import jsonschema

    from tools.notebook_runtime import schema_validator

    json.dumps(record, allow_nan=False)  # ValueError on NaN / inf anywhere
    errors = sorted(schema_validator(SCHEMA_PATH).iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "<root>"
        raise jsonschema.ValidationError(f"{len(errors)} schema error(s); first at {where}: {first.message}")


def write_record(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Validate, then write atomically with ``save_json``. An invalid record is replaced by a failure
    record at stage ``evidence_validation`` (itself validated) so that a file is always written."""
    from tools.notebook_runtime import save_json

    try:
        validate_record(record)
    except Exception as error:  # the record is broken: say so in the file rather than lose the run
        record = mark_failure(record, "evidence_validation", error)
        validate_record(record)
    save_json(Path(path), record)
    return record


def headline(record: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a reader checks first (used by the notebook's 5.3 cell)."""
    keys = (
        "run_mode",
        "run_label",
        "model",
        "evidence_level",
        "decision",
        "decision_rules",
        "highest_separation_candidate",
        "failure",
    )
    return {key: record.get(key) for key in keys}


CANDIDATE_HEADLINE_KEYS = (
    "candidate_set",
    "group_size",
    "correctness_pass_rate",
    "format_pass_rate",
    "unjudgeable_count",
    "reward_std_mean",
    "nonzero_advantages",
    "zero_variance_guard_passed",
    "policy_separation",
    "noise_margin",
    "scaler_skipped_steps",
    "mean_clip_fraction",
    "median_update_ms",
    "p95_update_ms",
    "peak_memory_metric",
    "peak_allocated_bytes",
    "peak_rss_bytes",
)


def candidate_headlines(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{key: c.get(key) for key in CANDIDATE_HEADLINE_KEYS} for c in record.get("candidates", [])]


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-style Markdown table (cells converted with ``str``; ``|`` escaped)."""

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + " --- |" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
