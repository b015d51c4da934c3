"""How what a sandboxed process says comes back to the grader: over pipes the grader opened, read with a size limit
and a deadline, never through a file the sandbox could have replaced (a symlink to a root-only file, a FIFO that
blocks the reader, a directory, a file of gigabytes).

Only the standard library: the slots use it, and the commands that grade nothing never import torch.
"""

from __future__ import annotations

import os
import select
import stat
import time
from dataclasses import dataclass
from pathlib import Path

MAX_RESULTS_BYTES = 32 * 2**20  # what the grader keeps of a driver's results; past it the pipe is closed
MAX_LINE_BYTES = 8 * 2**20  # a longer results line is not parsed (the driver never writes one)
STDERR_TAIL_BYTES = 8192  # what the grader keeps of a sandboxed process's stderr (its end)
STDERR_DRAIN_BYTES = 16 * 2**20  # stderr read (and dropped) past the tail before the pipe is closed
DRAIN_SECONDS = 2.0  # after the process ended: how long what is still in the pipes is read


class BoundedPipe:
    """A pipe the grader opened for a sandboxed process. The grader keeps at most ``limit`` bytes of what comes back
    (``tail``: the last ``limit`` bytes, else the first); past that (results) or past ``STDERR_DRAIN_BYTES`` (a
    tail) it closes its end, so that a writer that never stops cannot keep the grader reading."""

    def __init__(self, limit: int, tail: bool = False) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.limit, self.tail = limit, tail
        self.data = bytearray()
        self.seen = 0
        self.dropped = 0
        self.open = True

    def take(self) -> None:
        try:
            chunk = os.read(self.read_fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.seen += len(chunk)
        if self.tail:
            self.data += chunk
            del self.data[: -self.limit]
            if self.seen > STDERR_DRAIN_BYTES:
                self.close()
            return
        room = self.limit - len(self.data)
        self.data += chunk[:room]
        if len(chunk) > room:
            self.dropped += len(chunk) - room
            self.close()

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_writer()
        if self.open:
            os.close(self.read_fd)
            self.open = False

    def text(self) -> str:
        return sanitise(bytes(self.data))


def pump(pipes: list[BoundedPipe], deadline: float, stop_fd: int | None = None) -> bool:
    """Read ``pipes`` until ``stop_fd`` is readable (a process's pidfd, a zygote's answer) or, without one, until
    every pipe is closed: True; or until ``deadline`` (``time.monotonic()``): False."""
    while True:
        watch = [p.read_fd for p in pipes if p.open] + ([stop_fd] if stop_fd is not None else [])
        if not watch:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready = select.select(watch, [], [], remaining)[0]
        for pipe in pipes:
            if pipe.open and pipe.read_fd in ready:
                pipe.take()
        if stop_fd is not None and stop_fd in ready:
            return True


def sanitise(data: bytes, limit: int = 200) -> str:
    """Learner-written text fit for a grading note: its last two non-empty lines, printable characters only, at
    most ``limit`` characters."""
    text = data.decode("utf-8", errors="replace")
    lines = ["".join(ch for ch in line if ch.isprintable()).strip() for line in text.splitlines()]
    return " ".join([line for line in lines if line][-2:])[-limit:]


def read_capped(path: Path, limit: int) -> str:
    """The start of a regular file the grader itself wrote (never one a sandbox can reach), at most ``limit``
    bytes, without following a symlink or blocking on a FIFO; "" when it is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return sanitise(os.read(fd, limit), limit)
    except OSError:
        return ""
    finally:
        os.close(fd)


@dataclass
class DriverRun:
    """One run of the oracle's driver in a sandbox, as the grader saw it."""

    code: int  # exit code (-1: unknown, the zygote died)
    timed_out: bool
    seconds: float
    stderr: str  # sanitised tail of its stderr
    results: bytes  # what it sent on its results pipe, at most MAX_RESULTS_BYTES
    dropped: int = 0  # results bytes past the limit (the pipe was then closed)
