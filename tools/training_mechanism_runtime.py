"""Measurements for training-mechanism experiments: hardware, gradient norms, timing summaries, memory."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys

__all__ = ["cpuinfo_value", "cuda_hardware_snapshot", "gradient_l2_norm", "median_and_p95", "peak_rss_bytes"]


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
