"""A slot's zygote (as root): one bubblewrap sandbox for nbgrader's kernels, started once per slot, that has imported
torch & co and forks every kernel warm (``sandbox.zygote_main`` runs inside).

``SlotZygotes`` is the zygote half of ``slots.Slot``: starting the zygote and waiting until it serves, asking it
whether it is still usable, stopping it. The slot's folders and spec come from ``Slot``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import job_caps, sandbox
from .processes import stop
from .sandbox import _environment, bwrap_args

# What ipykernel imports while a kernel starts (its debugger, IPython's, history's sqlite3, tornado's loop): ~0.13 s of
# each forked kernel's start when the parent has not imported them (the tests' kernel forkserver imports them too)
KERNEL_INIT = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",
    "IPython.core.debugger",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "sqlite3",
    "tornado.platform.asyncio",
    "tornado.queues",
)
# What every zygote imports before it forks; a run adds what the lessons it grades import (their oracle modules'
# ZYGOTE_IMPORTS: transformers' Qwen2 model, ~3 s, for lessons 5 and 7); the spec's "warm_imports" carries both
WARM = ("torch", *KERNEL_INIT, "matplotlib.pyplot")
# A zygote's warm-up (imports, lesson 7's grading policy; seconds, longer on a busy machine) is the grader's time: a
# slot waits up to this long for a new zygote to answer before the time limit of the learner's notebook starts
# counting (the first learners of a run once lost points to the warm-ups of four zygotes on two cores).
ZYGOTE_READY_SECONDS = 180


@dataclass(frozen=True)
class ZygoteWarm:
    """What a slot's zygote prepares before it forks, beyond what every zygote imports (``WARM``): what the lessons
    of the run import and build (their oracle modules' ``ZYGOTE_IMPORTS`` and ``ZYGOTE_WARM``), so that a run of
    lesson 1 alone does not import transformers in each zygote."""

    imports: tuple[str, ...] = ()  # modules the zygote imports
    calls: tuple[str, ...] = ()  # "module:function" calls the zygote makes once (lesson 7's grading policy)


NOTHING_WARM = ZygoteWarm()  # a run whose zygotes prepare nothing beyond WARM


def zygote_command(spec: dict) -> list[str]:
    """bubblewrap running ``sandbox.py`` as the slot's zygote; its text goes in with ``-c`` (the checkout is not in the
    view). Its stdin must be the listening socket of its requests."""
    source = Path(sandbox.__file__).read_text(encoding="utf-8")
    return bwrap_args(spec, zygote=True) + [spec["python"], "-X", "utf8", "-c", source, "--zygote", json.dumps(spec)]


class SlotZygotes:
    """The zygote of one slot (mixed into ``slots.Slot``, whose ``_setup`` makes the folders and spec used here)."""

    @property
    def kernel_zygote_enabled(self) -> bool:
        return self.zygotes and self.sandbox.mode == "bwrap" and self.settings.kernel_zygote and self.uid is not None

    def _start_zygote(self, kind: str, spec: dict, warm: bool) -> subprocess.Popen:
        """bubblewrap running the ``kind`` zygote of ``spec``, listening on ``<sockets>/<kind>`` (0600, the grader's)."""
        import socket

        alive, self.alive_pipes[kind] = os.pipe()  # the zygote's sign that the grader's process lives
        spec, cgroup_fds = job_caps.for_zygote({**spec, "zygote": kind, "warm": warm, "grader_fd": alive})
        spec.pop("zygote_socket", None)
        path = self.sockets / kind
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(16)
            with open(self.runtime / f"{kind}-zygote-stderr.txt", "wb") as errors:
                return subprocess.Popen(
                    zygote_command(spec),
                    cwd=self.runtime,
                    env=_environment(spec),
                    stdin=listener.fileno(),
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    pass_fds=(alive, *cgroup_fds),
                    start_new_session=True,
                )
        finally:
            listener.close()  # the zygote holds it: when it dies, a connect fails at once
            for fd in (alive, *cgroup_fds):
                os.close(fd)

    def ensure_kernel_zygote(self, warm: bool = True) -> None:
        """Start the kernel zygote unless it runs and answers (once per slot; a dead one, or one that could not clean
        up after the last kernel, is replaced). Its answer also means the last kernel is gone and cleaned up.
        ``warm``: False for a probe, whose zygote builds the same view but imports nothing."""
        if self.kernel_zygote_enabled and not (self.kernel_zygote is not None and self._answers(self.kernel_zygote)):
            stop(self.kernel_zygote)
            self._close_alive("kernel")
            spec = {
                **json.loads(self.spec_path.read_text()),
                "warm_imports": [*WARM, *self.warm.imports],
                "warm_calls": list(self.warm.calls),
            }
            self.kernel_zygote = self._start_zygote("kernel", spec, warm)
            self._answers(self.kernel_zygote, "kernel", ZYGOTE_READY_SECONDS)  # warm before a notebook's clock starts

    def _answers(self, zygote: subprocess.Popen, kind: str = "kernel", timeout: float = 60) -> bool:
        """Whether the ``kind`` zygote serves: it answers a ping once it has warmed up and cleaned up after its last
        job (within ``timeout`` seconds)."""
        import socket

        if zygote.poll() is not None:
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as channel:
            try:
                channel.settimeout(timeout)
                channel.connect(str(self.sockets / kind))
                channel.send(json.dumps({"ping": True}).encode())
                return channel.recv(64) == b'{"pong": true}'
            except OSError:
                return False

    def stop_zygote(self) -> None:
        """Stop the zygote."""
        stop(self.kernel_zygote)
        self.kernel_zygote = None
        self._close_alive("kernel")
        (self.sockets / "kernel").unlink(missing_ok=True)
        if self.sockets.name.startswith("grpo-z-"):
            shutil.rmtree(self.sockets, ignore_errors=True)

    def _close_alive(self, kind: str) -> None:
        if kind in self.alive_pipes:
            os.close(self.alive_pipes.pop(kind))
