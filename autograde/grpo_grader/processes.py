"""Stopping what a slot started: a process, a process group, a zygote's bubblewrap."""

from __future__ import annotations

import os
import signal
import subprocess


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``, and ``pid`` itself (it may not lead its group yet)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill(pid)


def stop(process: subprocess.Popen | None) -> None:
    """Kill a zygote's bubblewrap and its process group, and reap it (its PID namespace dies with it)."""
    if process is None:
        return
    kill_group(process.pid)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
