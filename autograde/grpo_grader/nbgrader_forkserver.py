"""``nbgrader autograde`` without paying nbgrader's imports per notebook.

A slot used to start ``python -m nbgrader autograde`` for every notebook: about 1.5 s of interpreter start and
imports (nbgrader, nbconvert, jupyter_client, sqlalchemy) before the first cell ran. Here one forkserver per
grading run imports them once; every notebook is graded in a fresh child forked from it, so each run still
gets its own process (its own config, environment, working folder, log and process group, killed as a
whole at the limit), exactly as the command line would, only started warm.

Nothing of the learner runs in these processes: they are nbgrader itself, talking to the sandboxed kernel.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

from .sandbox import exit_like_an_interpreter

PRELOAD = [
    "nbgrader.apps.nbgraderapp",
    "nbgrader.apps.autogradeapp",
    "nbgrader.converters.autograde",
    "nbgrader.preprocessors",
    "nbgrader.api",
    "nbconvert.preprocessors",
    "nbclient",
    "jupyter_client.manager",
    "jupyter_client.asynchronous",
    "sqlalchemy",
    "sqlalchemy.dialects.sqlite",
    "sqlite3",
    "ipykernel.kernelspec",
    "IPython.display",
    "autograde.grpo_grader.preprocessors",
]  # no oracle and no torch: StripHiddenTests gets the oracle's test cells as an option (Slot.nbgrader_options)
# compiled validators, configured mappers, then gc.freeze: imported after every other preload
WARM_UP = "autograde.grpo_grader.nbgrader_forkserver_preload"

_context = None
_lock = threading.Lock()


def _get_context():
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            # each child re-runs the parent's main module (multiprocessing's spawn preparation, e.g. the pipeline):
            # importing it here first makes that a re-run of module-level definitions, every import already done.
            # The main module only, not every module the parent has loaded since: those include the oracles, and
            # with them torch, which no nbgrader child needs (~1.9 CPU-s of a forkserver's start)
            main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
            extra = [main] if main and main.startswith("autograde.") and not main.endswith(".__main__") else []
            context.set_forkserver_preload(PRELOAD + extra + [WARM_UP])
            _context = context
        return _context


def _child(argv: list[str], cwd: str, env: dict[str, str], log: str) -> None:
    """The body of one ``nbgrader`` run, in a child of the forkserver."""
    os.setsid()  # its own process group: the slot kills it and what it started as a whole
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["nbgrader", *argv]

    def body() -> None:
        from nbgrader.apps.nbgraderapp import main

        main()

    exit_like_an_interpreter(body)  # errors are reported in the log, as the command line would


class WarmProcess:
    """The part of ``subprocess.Popen``'s interface the slots use, for a forked nbgrader run."""

    def __init__(self, process) -> None:
        self._process = process
        self.pid = process.pid
        self.sentinel = process.sentinel  # readable once the run has ended (select)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("nbgrader autograde", timeout)
        return self._process.exitcode


def prewarm() -> None:
    """Start the forkserver now (it imports nbgrader and the pipeline once, ~2-3 s), while the caller does other
    set-up work; the first ``start`` then finds it ready."""
    if available():
        from multiprocessing import forkserver

        _get_context()
        forkserver.ensure_running()


def available() -> bool:
    return sys.platform.startswith("linux") and "forkserver" in multiprocessing.get_all_start_methods()


def start(argv: list[str], cwd: str, env: dict[str, str], log: str) -> WarmProcess:
    """Start ``nbgrader <argv>`` in ``cwd`` with exactly ``env``, its stdout and stderr into ``log``."""
    process = _get_context().Process(target=_child, args=(argv, cwd, env, log), daemon=False)
    process.start()
    return WarmProcess(process)
