"""The model side of the final experiment: where and in which precision the update runs, which checkpoint it
loads (a hub id or a local folder, and how the record names it), the LoRA policy, and its sequence log-probs.

Everything that depends on the run mode is an argument: the same code runs in fp32 on the CPU with the tiny local
checkpoint and in bf16/fp16 autocast on a CUDA card with Qwen2.5-0.5B-Instruct. Sequence log-probabilities only
ever come from ``tools.post_training_runtime.response_sequence_logps``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tools import env_vars
from tools.experiment_settings import ENV_MODEL_ID, REAL_GPU_MODEL_ID, check_run_mode, model_id_override  # noqa: F401
from tools.tiny_model import MARKER_FILE

# Optional, real_gpu only: force the compute dtype ("float16" -> fp16 autocast + GradScaler, "bfloat16").
# Used by benchmarks/gpu_check.sh to exercise the fp16 path on a card that supports bf16.
ENV_FORCE_DTYPE = env_vars.REAL_GPU_DTYPE


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

    real_gpu's choice per card, at the workload's own batch (the fixed candidate sets; the batch never changes):
    native bf16 (sm >= 80): bf16 weights + bf16 autocast. Colab's T4 (sm 75, 16 GB), V100 and every card without
    native bf16: fp16 weights + fp16 autocast + a GradScaler (the adapters stay float32, so the scaler can unscale
    their gradients). :func:`memory_estimate` computes the peak of one update from parameter and activation counts
    (an estimate; tests/test_device_numerics.py: under 2 GiB for either dtype, far below a T4's 16 GB).

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
        marker = path / MARKER_FILE
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


def memory_estimate(dtype_name: str, batch_shape: Sequence[int], lora_rank: int, target_modules: Sequence[str]) -> dict:
    """An ESTIMATE of the peak memory of one real_gpu update of a candidate set's batch ``[B, T]`` on Qwen2.5-0.5B's
    architecture with ``dtype_name`` weights under autocast (``tools.training_mechanism_runtime.
    lora_step_memory_estimate``, whose docstring says what is counted and what is not; ``peak`` in bytes)."""
    from tools.tiny_model import QWEN25_05B_ARCHITECTURE
    from tools.training_mechanism_runtime import lora_step_memory_estimate

    rows, tokens = (int(v) for v in batch_shape)
    return lora_step_memory_estimate(
        QWEN25_05B_ARCHITECTURE,
        weight_dtype=dtype_name,
        autocast=True,
        rows=rows,
        prompt_tokens=tokens,
        completion_tokens=0,
        lora_targets=target_modules,
        lora_rank=lora_rank,
        logprob_path="response",
    )
