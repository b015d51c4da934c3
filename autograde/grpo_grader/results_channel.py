"""How a graded kernel's case results reach the grader, and how long a notebook may run on after its last one.

One execution per notebook: the kernel nbgrader drives runs the oracle's cases at each test cell (``case_runner.py``)
and writes one JSON line per case to a FIFO in the slot's runtime folder, a folder no sandbox sees; the launcher opens
its write end outside the sandbox and hands it to the kernel with the job (``sandbox._grading_fds``). The grader makes
the FIFO and opens it itself, and reads it while nbgrader runs (``watch``): at most ``MAX_RESULTS_BYTES``
(``transport.BoundedPipe``), until nbgrader exits or the notebook's hard limit. Once every case has its record the
learner side has nothing left to send: after ``grace`` seconds more the kernel is killed (its uid's processes with it),
nbgrader finishes the notebook (the cells left get an error) and the points already sent stand. Only the standard
library: the slots use it, and the commands that grade nothing never import torch.
"""

from __future__ import annotations

import json
import os
import select
import time
from dataclasses import dataclass
from pathlib import Path

from .transport import DRAIN_SECONDS, MAX_LINE_BYTES, MAX_RESULTS_BYTES, BoundedPipe, pump


@dataclass
class GradedRun:
    """One ``nbgrader autograde`` of a notebook, as the slot saw it."""

    returncode: int | None
    timed_out: bool  # killed at the notebook's hard limit
    seconds: float
    results: bytes = b""  # what the kernel sent on the results FIFO, at most MAX_RESULTS_BYTES
    dropped: int = 0  # bytes past the limit (the FIFO was then closed)
    lingered: float = 0.0  # seconds the kernel ran on after the last result before it was killed (0: it ended)


class ResultsChannel:
    """The FIFO and the job of one graded notebook: ``job`` written to ``job_path`` (mode 0600, the grader's), the FIFO
    made at ``fifo`` and opened by the grader (read end, and a write end of its own so that no EOF arrives before the
    kernel has opened it). ``expected``: the case ids whose records complete the learner side's part."""

    def __init__(self, fifo: Path, job_path: Path, job: dict, expected: set[str]) -> None:
        self.fifo, self.job_path, self.expected = fifo, job_path, set(expected)
        for path in (fifo, job_path):
            path.unlink(missing_ok=True)
        fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(job, handle, ensure_ascii=False)
        os.mkfifo(fifo, 0o600)
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.pipe = BoundedPipe(MAX_RESULTS_BYTES, fds=(read_fd, os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)))
        self.seen: set[str] = set()
        self._parsed = 0  # bytes of pipe.data looked at for complete lines

    def _note_records(self) -> None:
        """The case ids of the complete lines read so far (a line too long or malformed is skipped)."""
        data = self.pipe.data
        while (end := data.find(b"\n", self._parsed)) >= 0:
            line = bytes(data[self._parsed : end])
            self._parsed = end + 1
            if len(line) > MAX_LINE_BYTES:
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and isinstance(record.get("case"), str):
                self.seen.add(record["case"])

    @property
    def complete(self) -> bool:
        return bool(self.expected) and self.expected <= self.seen

    def watch(self, exited_fd: int, deadline: float, grace: float, kill_kernel) -> tuple[bool, float]:
        """Read the results until ``exited_fd`` (nbgrader's exit) is readable: (True, lingered), or the hard
        ``deadline`` passes: (False, lingered). ``grace`` seconds after the last expected record the kernel is killed
        (``kill_kernel()``) if nbgrader is still running; ``lingered``: how long it had run on by then (0: never)."""
        complete_at, lingered = None, 0.0
        while True:
            now = time.monotonic()
            limit = deadline if complete_at is None or lingered else min(deadline, complete_at + grace)
            if now >= limit:
                if now >= deadline:
                    return False, lingered
                lingered = now - complete_at  # the learner side is done: its kernel goes, the points stand
                kill_kernel()
                continue
            watch = [exited_fd] + ([self.pipe.read_fd] if self.pipe.open else [])
            ready = select.select(watch, [], [], limit - now)[0]
            if self.pipe.open and self.pipe.read_fd in ready:
                self.pipe.take()
                self._note_records()
                if complete_at is None and self.complete:
                    complete_at = time.monotonic()
            if exited_fd in ready:
                return True, lingered

    def close(self) -> tuple[bytes, int]:
        """Stop holding the FIFO, read what is still in it (the kernel is gone by now), remove the FIFO and the job
        (the inputs do not outlive the notebook): (the results, bytes dropped past the limit)."""
        self.pipe.close_writer()
        pump([self.pipe], time.monotonic() + DRAIN_SECONDS)
        self.pipe.close()
        for path in (self.fifo, self.job_path):
            path.unlink(missing_ok=True)
        return bytes(self.pipe.data), self.pipe.dropped
