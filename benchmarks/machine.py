"""The machine a run measured on: CPU, memory, thread counts, load, the commit (``results["machine"]``)."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from benchmarks.harness import ROOT


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = _proc_meminfo_total()
    except OSError:
        mem = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_default_threads": torch_default_threads(),
        "memory_gib": mem,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "git_commit": commit,
    }


@functools.cache
def torch_default_threads() -> int | None:
    """torch's intra-op thread count in a fresh interpreter (what a notebook kernel gets)."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True
    )
    return int(done.stdout.strip()) if done.returncode == 0 else None


def _proc_meminfo_total() -> float:
    match = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return round(int(match.group(1)) / 2**20, 1)
