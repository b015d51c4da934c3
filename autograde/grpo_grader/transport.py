"""How what a sandboxed process says comes back to the grader: over a pipe (or a FIFO) the grader opened itself, read
with a size limit and a deadline, never through a file the sandbox could have replaced (a symlink to a root-only file,
a FIFO that blocks the reader, a directory, a file of gigabytes).

Only the standard library: the slots use it, and the commands that grade nothing never import torch.
"""

from __future__ import annotations

import os
import select
import time

MAX_RESULTS_BYTES = 32 * 2**20  # what the grader keeps of a kernel's case results; past it the pipe is closed
MAX_LINE_BYTES = 8 * 2**20  # a longer results line is not parsed (the case runner never writes one)
DRAIN_SECONDS = 2.0  # after the process ended: how long what is still in the pipes is read


class BoundedPipe:
    """A pipe the grader opened for a sandboxed process (``fds``: the read and write ends of a FIFO the grader opened,
    else a new pipe). The grader keeps at most the first ``limit`` bytes of what comes back; past that it closes its
    end, so that a writer that never stops cannot keep the grader reading."""

    def __init__(self, limit: int, fds: tuple[int, int] | None = None) -> None:
        self.read_fd, self.write_fd = fds if fds is not None else os.pipe()
        os.set_blocking(self.read_fd, False)
        self.limit = limit
        self.data = bytearray()
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


def pump(pipes: list[BoundedPipe], deadline: float) -> bool:
    """Read ``pipes`` until every one is closed (True) or until ``deadline`` (``time.monotonic()``): False."""
    while True:
        watch = [p.read_fd for p in pipes if p.open]
        if not watch:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready = select.select(watch, [], [], remaining)[0]
        for pipe in pipes:
            if pipe.open and pipe.read_fd in ready:
                pipe.take()
