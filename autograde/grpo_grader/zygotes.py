"""A slot's zygotes (as root): one bubblewrap sandbox per kind (nbgrader's kernels, the oracle's drivers), started once
per slot, that has imported torch & co and forks every job warm (``sandbox.zygote_main`` runs inside).

``SlotZygotes`` is the zygote half of ``slots.Slot``: starting a zygote and waiting until it serves, asking it whether
it is still usable, running one oracle driver job in it, stopping it. The slot's folders, spec and oracle spec come
from ``Slot``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import job_caps, sandbox
from .processes import stop
from .sandbox import _environment, bwrap_args
from .transport import DRAIN_SECONDS, MAX_RESULTS_BYTES, STDERR_TAIL_BYTES, BoundedPipe, DriverRun, pump, read_capped

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
WARM = {
    "kernel": ("torch", *KERNEL_INIT, "matplotlib.pyplot"),
    "oracle": ("torch", "IPython.core.interactiveshell", "matplotlib.pyplot"),
}
# A zygote's warm-up (imports, lesson 7's grading policy; seconds, longer on a busy machine) is the grader's time: a
# slot waits up to this long for a new zygote to answer before the time limits of the learner's notebook or driver
# start counting (the first learners of a run once lost points to the warm-ups of four zygotes on two cores).
ZYGOTE_READY_SECONDS = 180


@dataclass(frozen=True)
class ZygoteWarm:
    """What a slot's zygotes prepare before they fork, beyond what every zygote imports (``WARM``): what the
    lessons of the run import and build (their oracle modules' ``ZYGOTE_IMPORTS`` and ``ZYGOTE_WARM``), so that a
    run of lesson 1 alone does not import transformers in each zygote."""

    kernel: tuple[str, ...] = ()  # modules the kernel zygote imports
    oracle: tuple[str, ...] = ()  # modules the oracle zygote imports
    calls: tuple[str, ...] = ()  # "module:function" calls the oracle zygote makes once (lesson 7's grading policy)


NOTHING_WARM = ZygoteWarm()  # a run whose zygotes prepare nothing beyond WARM


def zygote_command(spec: dict) -> list[str]:
    """bubblewrap running ``sandbox.py`` as the slot's zygote of ``spec["zygote"]`` (kernel or oracle); its text goes
    in with ``-c`` (the checkout is not in the view). Its stdin must be the listening socket of its requests."""
    source = Path(sandbox.__file__).read_text(encoding="utf-8")
    return bwrap_args(spec, zygote=True) + [spec["python"], "-X", "utf8", "-c", source, "--zygote", json.dumps(spec)]


class SlotZygotes:
    """The zygotes of one slot (mixed into ``slots.Slot``, whose ``_setup`` makes the folders and specs used here)."""

    @property
    def zygote_enabled(self) -> bool:
        return self.zygotes and self.sandbox.mode == "bwrap" and self.settings.oracle_zygote and self.uid is not None

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
            spec = {**json.loads(self.spec_path.read_text()), "warm_imports": [*WARM["kernel"], *self.warm.kernel]}
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
        """Stop both zygotes (the oracle's and the kernels')."""
        stop(self.kernel_zygote)
        self.kernel_zygote = None
        self._close_alive("kernel")
        self._stop_oracle_zygote()
        for kind in ("kernel", "oracle"):
            (self.sockets / kind).unlink(missing_ok=True)
        if self.sockets.name.startswith("grpo-z-"):
            shutil.rmtree(self.sockets, ignore_errors=True)

    def _stop_oracle_zygote(self) -> None:
        stop(self.zygote)
        self.zygote = None
        self._close_alive("oracle")

    def _close_alive(self, kind: str) -> None:
        if kind in self.alive_pipes:
            os.close(self.alive_pipes.pop(kind))

    def _run_in_zygote(self, job_dir: Path, timeout: float, warm: bool = True) -> DriverRun:
        """One driver job in the oracle zygote: its source and job.json go in as a memfd, its results and stderr come
        back over pipes. At ``timeout`` (or when it died) the zygote is stopped with the job, and the next job starts
        a fresh one; after each job the zygote has killed every process of the oracle's uid and removed its files."""
        import socket

        if self.zygote is None or self.zygote.poll() is not None:
            self._stop_oracle_zygote()
            spec = {
                **self._oracle_spec(),
                "warm_calls": list(self.warm.calls),
                "warm_imports": [*WARM["oracle"], *self.warm.oracle],
            }
            self.zygote = self.oracle_process = self._start_zygote("oracle", spec, warm)
            self._answers(self.zygote, "oracle", ZYGOTE_READY_SECONDS)
        started = time.monotonic()  # the job's clock starts at a zygote that serves (see ZYGOTE_READY_SECONDS)
        job = {
            name: (job_dir / name).read_text(encoding="utf-8") if (job_dir / name).is_file() else ""
            for name in ("driver.py", "job.json")
        }
        memfd = os.memfd_create("job")
        os.write(memfd, json.dumps(job).encode())
        os.lseek(memfd, 0, os.SEEK_SET)
        results, errors = BoundedPipe(MAX_RESULTS_BYTES), BoundedPipe(STDERR_TAIL_BYTES, tail=True)
        devnull = os.open(os.devnull, os.O_RDWR)
        answer, timed_out = b"", False
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel.settimeout(120)  # a warm zygote takes the connection once it has imported (first job: seconds)
            channel.connect(str(self.sockets / "oracle"))
            socket.send_fds(
                channel,
                [json.dumps({"driver": True}).encode()],
                [devnull, devnull, errors.write_fd, results.write_fd, memfd],
            )
            results.close_writer()  # only the job holds them now: the pipes close when it is gone
            errors.close_writer()
            if pump([results, errors], started + timeout, stop_fd=channel.fileno()):
                answer = channel.recv(4096)
            else:
                timed_out = True
        except OSError:
            pass
        finally:
            channel.close()
            results.close_writer()
            errors.close_writer()
            for fd in (devnull, memfd):
                os.close(fd)
        code, clean = -1, False
        try:
            reply = json.loads(answer)
            code, clean = int(reply["exit"]), reply.get("clean") is True
        except (ValueError, KeyError, TypeError):
            pass
        if not clean:  # dead, timed out, or it could not clean up after the job: the next job gets a fresh zygote
            self._stop_oracle_zygote()
        pump([results, errors], time.monotonic() + DRAIN_SECONDS)
        results.close()
        errors.close()
        tail = errors.text()
        if code == -1 and not timed_out:
            tail += read_capped(self.runtime / "oracle-zygote-stderr.txt", STDERR_TAIL_BYTES)
        return DriverRun(code, timed_out, time.monotonic() - started, tail, bytes(results.data), results.dropped)
