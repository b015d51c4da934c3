"""Measurements for training-mechanism experiments: hardware, gradient norms, timing summaries, memory."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys

__all__ = [
    "cpuinfo_value",
    "cuda_hardware_snapshot",
    "gradient_l2_norm",
    "lora_step_memory_estimate",
    "median_and_p95",
    "peak_rss_bytes",
]


def cpuinfo_value(*keys: str) -> str:
    """The first non-empty value of one of ``keys`` in /proc/cpuinfo (e.g. "vendor_id"); "" where there is none or
    no /proc/cpuinfo (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in keys and value.strip():
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_model_name() -> str:
    """The CPU's model name: /proc/cpuinfo on Linux, sysctl on macOS, else what ``platform`` knows."""
    name = cpuinfo_value("model name", "Model", "Hardware", "cpu model")
    if name:
        return name
    if sys.platform == "darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5, check=False
            ).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown"


def _nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver version (e.g. "570.86.15"), or None when it cannot be read."""
    try:
        import pynvml  # nvidia-ml-py, when installed

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            for token in handle.readline().split():
                if token[:1].isdigit() and "." in token:
                    return token
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
        if out:
            return out.splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def cuda_hardware_snapshot() -> dict:
    """Describe the accelerator the run used; never raises.

    With CUDA: ``cuda_available`` True, ``device_index``, ``device_count``, ``gpu_name``,
    ``compute_capability`` ("9.0"), ``total_memory_bytes``, ``bf16_supported`` (native, i.e.
    ``is_bf16_supported(including_emulation=False)``), ``driver_version`` (the
    NVIDIA driver, None when unreadable), ``cuda_driver_api`` (the driver's CUDA API version, e.g.
    12080), ``cuda_runtime`` (``torch.version.cuda``), ``cudnn``, ``torch``, ``python``.
    Without CUDA: ``{"cuda_available": False, "cpu": <model name>, "cpu_count": ..., "torch": ...,
    "python": ..., "platform": ...}``. An unexpected failure is recorded under ``"error"``.
    """
    snapshot: dict = {"cuda_available": False, "python": platform.python_version()}
    try:
        import torch
    except Exception as error:  # no torch at all
        snapshot.update({"torch": None, "error": f"{type(error).__name__}: {error}"})
    else:
        snapshot["torch"] = torch.__version__
        try:
            if torch.cuda.is_available():
                index = torch.cuda.current_device()
                props = torch.cuda.get_device_properties(index)
                driver_api = None
                try:
                    driver_api = int(torch._C._cuda_getDriverVersion())
                except Exception:
                    pass
                snapshot.update(
                    {
                        "cuda_available": True,
                        "device_index": index,
                        "device_count": torch.cuda.device_count(),
                        "gpu_name": props.name,
                        "compute_capability": f"{props.major}.{props.minor}",
                        "total_memory_bytes": int(props.total_memory),
                        # native bf16 only (sm >= 80): torch's default includes emulation, True on T4/V100
                        "bf16_supported": bool(torch.cuda.is_bf16_supported(including_emulation=False)),
                        "driver_version": _nvidia_driver_version(),
                        "cuda_driver_api": driver_api,
                        "cuda_runtime": torch.version.cuda,
                        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                    }
                )
                return snapshot
        except Exception as error:  # broken driver, CUDA init failure: report, do not raise
            snapshot["error"] = f"{type(error).__name__}: {error}"
    try:
        snapshot.update({"cpu": cpu_model_name(), "cpu_count": os.cpu_count(), "platform": platform.platform()})
    except Exception as error:
        snapshot.setdefault("error", f"{type(error).__name__}: {error}")
    return snapshot


def gradient_l2_norm(params) -> float:
    """Global L2 norm of the gradients of ``params`` (an iterable of parameters or tensors).

    Parameters whose ``.grad`` is None (frozen, unused) are skipped; with no gradient at all the norm
    is 0.0. Each gradient's norm is taken in float32 on its own device; the norms are combined in
    float64, i.e. ``sqrt(sum_p ||grad_p||^2)`` - the value ``torch.nn.utils.clip_grad_norm_`` reports.
    """
    import torch

    total = 0.0
    for param in params:
        grad = getattr(param, "grad", None)
        if grad is None:
            continue
        if grad.is_sparse:
            grad = grad.coalesce().values()
        norm = float(torch.linalg.vector_norm(grad.detach(), 2, dtype=torch.float32))
        total += norm * norm
    return math.sqrt(total)


def _percentile_linear(ordered: list[float], q: float) -> float:
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def median_and_p95(values) -> tuple[float, float]:
    """``(median, p95)`` of ``values`` by linear interpolation between closest ranks.

    Method: sort the n values x_0 <= ... <= x_{n-1}; the q-quantile sits at rank h = (n - 1) * q and is
    ``x_floor(h) + (h - floor(h)) * (x_floor(h)+1 - x_floor(h))`` - numpy's default
    (``np.percentile(values, [50, 95])``, method "linear", Hyndman-Fan type 7). For example
    ``[1, 2, 3, 4]`` gives median 2.5 and p95 3.85. Raises ``ValueError`` on an empty input or a
    NaN / infinite value.
    """
    ordered = sorted(float(value) for value in values)
    if not ordered:
        raise ValueError("median_and_p95 需要至少一个数值，收到空序列")
    if not all(math.isfinite(value) for value in ordered):
        raise ValueError("median_and_p95 的输入含有 NaN 或无穷大")
    return _percentile_linear(ordered, 0.5), _percentile_linear(ordered, 0.95)


def peak_rss_bytes() -> int | None:
    """Peak resident set size (CPU memory) of this process since it started, in bytes.

    From ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on Linux, bytes on macOS). It never goes
    down and cannot be reset, so measure a workload in a fresh process to attribute it. None where
    the ``resource`` module does not exist (Windows).
    """
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_ATTENTION_INPUTS = ("q_proj", "k_proj", "v_proj")  # the three LoRA targets that read the same normalised input


def lora_step_memory_estimate(
    architecture: dict,
    *,
    weight_dtype: str,
    autocast: bool,
    rows: int,
    prompt_tokens: int,
    completion_tokens: int,
    lora_targets,
    lora_rank: int,
    logprob_path: str,
) -> dict:
    """An ESTIMATE, in bytes, of the peak memory of one LoRA training step of a Qwen2-architecture causal LM (its
    ``config`` keys: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
    vocab_size, tie_word_embeddings), computed from parameter and activation counts:

    * ``weights``: every parameter in ``weight_dtype``; ``adapter``: the LoRA parameters in float32 with their
      gradients and AdamW's two moments (16 bytes each);
    * ``activations``: what autograd saves for backward, per token and layer, in the compute dtype c (the weights';
      autocast is modelled with half weights only) and in float32 - the MLP's gate, up and activation (3 x
      intermediate, c), attention's query and output (2 x hidden, c), key and value (2 x kv width, c), its logsumexp
      (heads, fp32), both RMSNorms' float32 inputs and reciprocal norms (2 x hidden + 2, fp32), each adapter's input
      (peft casts it to float32 per module for half weights; autocast casts it to c; float32 weights share it) and
      its rank-r output; plus the adapters' half-precision weight copies under autocast;
    * ``logits_saved``: ``logprob_path="completion"`` (lesson 7's ``og.completion_logps``): the ``[N, C, V]`` logits
      divided by the temperature; ``"response"`` (nb06's ``response_sequence_logps``): the full ``[B, T, V]`` logits;
    * ``transient``: the backward's gradients of the saved logits and of the full logits they were cut from (the
      forward's full logits next to the divided ones are less).

    ``peak`` = weights + adapter + activations + logits_saved + transient. Not counted: the CUDA context (a few
    hundred MB), cuBLAS workspaces, the caching allocator's rounding and fragmentation, the KV cache of sampling (it
    is freed before the update). tests/test_device_numerics.py checks the activation and logits counts against the
    bytes autograd really saves on the CPU.
    """
    if logprob_path not in ("completion", "response"):
        raise ValueError(f"logprob_path 只能是 'completion' 或 'response'，收到 {logprob_path!r}")
    if weight_dtype not in _DTYPE_BYTES:
        raise ValueError(f"weight_dtype 只能是 {sorted(_DTYPE_BYTES)} 之一，收到 {weight_dtype!r}")
    hidden, inter = architecture["hidden_size"], architecture["intermediate_size"]
    layers, heads = architecture["num_hidden_layers"], architecture["num_attention_heads"]
    head_dim = hidden // heads
    kv = architecture["num_key_value_heads"] * head_dim
    vocab = architecture["vocab_size"]
    widths = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden)}
    targets = tuple(lora_targets)
    if not set(targets) <= widths.keys():
        raise ValueError(f"只估计注意力投影上的 LoRA（{'/'.join(widths)}），收到 {targets}")
    w_bytes = _DTYPE_BYTES[weight_dtype]
    c_bytes = w_bytes  # the compute dtype: the weights' (autocast is modelled with half weights only)
    per_layer_params = (
        hidden * hidden
        + hidden  # q (with bias)
        + 2 * (hidden * kv + kv)  # k, v (with bias)
        + hidden * hidden  # o
        + 3 * hidden * inter  # gate, up, down
        + 2 * hidden  # the two RMSNorm weights
    )
    embedding = vocab * hidden
    parameters = (
        embedding + layers * per_layer_params + hidden + (0 if architecture["tie_word_embeddings"] else embedding)
    )
    adapter_parameters = layers * sum(lora_rank * sum(widths[t]) for t in targets)

    c_elems = 3 * inter + 2 * hidden + 2 * kv  # per token and layer, compute dtype
    f32_elems = 2 * hidden + 2 + heads  # the RMSNorms' float32 inputs and 1/norm, attention's logsumexp
    if c_bytes == 4:  # float32: the adapters of q/k/v read the normalised input, o's reads attention's output
        f32_elems += (hidden if set(targets) & set(_ATTENTION_INPUTS) else 0) + len(targets) * lora_rank
    elif autocast:
        c_elems += len(targets) * (hidden + lora_rank)
    else:
        f32_elems += len(targets) * (hidden + lora_rank)
    tokens = rows * (prompt_tokens + completion_tokens)
    activations = tokens * layers * (c_elems * c_bytes + f32_elems * 4)
    if autocast and c_bytes == 2:
        activations += layers * c_bytes * sum(lora_rank * sum(widths[t]) for t in targets)  # half copies of A and B
    full_logits = tokens * vocab * c_bytes
    if logprob_path == "completion":
        logits_saved = rows * completion_tokens * vocab * c_bytes
        transient = logits_saved + full_logits  # backward: the gradients of both (forward: the full logits only)
    else:
        logits_saved = full_logits
        transient = 2 * full_logits  # backward: the custom function's gradient and the slice's full-size one
    weights = parameters * w_bytes
    adapter = adapter_parameters * 16
    return {
        "parameters": parameters,
        "adapter_parameters": adapter_parameters,
        "weights": weights,
        "adapter": adapter,
        "activations": activations,
        "logits_saved": logits_saved,
        "transient": transient,
        "peak": weights + adapter + activations + logits_saved + transient,
        "estimate": True,
    }
