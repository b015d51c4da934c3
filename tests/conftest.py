"""Shared fixtures of the test suite: every notebook execution happens at most once per test run.

``notebook_runs`` (session scope) executes a notebook at most once per test run and shares the result::

    def test_something(notebook_runs):
        nb = notebook_runs.solution("nb01_group_advantages")      # executed solution (nbgrader source) version
        nb = notebook_runs.learner("nb01_group_advantages")       # executed learner version (notebooks/)
        nb = notebook_runs.run(variant_nb, cwd=ROOT, env={...})  # any notebook (e.g. substituted answers)
        nb, seconds = notebook_runs.solution_timed(name)          # ... and the seconds of the one real run

Results are cached by the notebook's JSON, the working directory and the extra environment, so two tests that
ask for the same execution share one kernel run. Executed notebooks are returned as deep copies: a test may
modify what it gets. ``notebook_runs.count(key)`` says how often a given execution really ran in this process
(always 0 or 1); ``notebook_runs.key(nb, cwd, env)`` gives that key.

The cache is shared across pytest-xdist workers (``make test`` runs ``-n 2``): results live in a folder of the
test run (beside the workers' temporary folders) and a file lock per key makes the first worker execute while
the other waits and reads the result. Nothing is written into the repository: the solution version is built in
memory (``tools.chain.notebooks.build_notebook``) and executed with ``autograde/source/<a>/`` as working
directory, as nbgrader would.

Shorter spellings (function-scoped fixtures returning a callable):

- ``executed_solution(name)`` == ``notebook_runs.solution(name)``
- ``executed_learner(name)`` == ``notebook_runs.learner(name)``
- ``released_course`` (session): one released course per test run, ``{"course": Path, "notebooks": Path}``:
  ``tools.chain.notebooks.release_into`` of the whole series into a temporary course (source, release and
  gradebook), built once and shared by every test and worker. Copy it (``shutil.copytree``) before grading
  into it.

One execution per notebook, enforced: during the test run ``tools.chain.notebooks.execute`` is wrapped; a
direct call that executes a notebook already executed in this run (same JSON, working directory and extra
environment; by ``notebook_runs`` or by another direct call, in any worker) raises ``DuplicateExecution`` and so
fails the calling test. Convert such a call to ``notebook_runs.run(...)``. (Executions inside subprocesses, e.g.
``tools.cli.experiment`` or the grading pipeline, are not seen.)

Warm kernels: the executions of a worker (through ``tools.chain.notebooks.execute``) run in kernels forked from the
worker's kernel forkserver (``tests/kernel_forkserver.py``: torch, matplotlib and transformers imported once), unless
an environment variable that modules read at import time differs from the server's (then a fresh kernel starts).
``GRPO_TEST_WARM_KERNELS=0`` gives every execution a fresh kernel; ``tests/test_notebook_runs.py`` compares the two.
Learners' and the grader's kernels are not affected.

Converting a module: replace ``chain.execute(nb, cwd, ...)`` by ``notebook_runs.run(nb, cwd=cwd, ...)``, the
solution executions (``chain.execute_solution`` or ``chain.execute(chain.build_notebook(a), ...)``) by
``notebook_runs.solution(a)``, and put wrong-answer variants of one notebook into one execution (see
``tests/test_nb04_nb05.py``: one warm kernel runs every variant, then restores the correct answers).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kernel_forkserver  # tests/kernel_forkserver.py
import nbformat
import pytest
from filelock import FileLock

import tools.chain.notebooks as chain

# Lesson 7 trains for real; every notebook execution in the test session (kernels inherit the environment) runs
# its short RUN_MODE and writes its record under a scratch label (tests/test_nb07_online.py removes it).
os.environ.setdefault("GRPO_ONLINE_RUN_MODE", "smoke")
os.environ.setdefault("GRPO_ONLINE_RUN_LABEL", "pytest-scratch")
# The lessons' hidden tests (oracles.run_in_kernel) draw their cases from fresh entropy; the test session's kernels
# draw them from this public seed instead, so that a wrong answer fails on the same case in every run.
os.environ.setdefault("GRPO_KERNEL_CASES_SEED", "lesson-tests")

# Under pytest-xdist every worker (and each kernel or subprocess it starts) gets 1 torch/OpenMP thread: the workers
# already keep the cores busy, and N workers x `nproc` threads each only oversubscribe them (OpenMP threads spin while
# they wait). The grading pipeline sets its kernels' threads itself (cores / slots).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


class DuplicateExecution(RuntimeError):
    """A test executed a notebook that this test run had already executed: use ``notebook_runs``."""


def _key(nb: nbformat.NotebookNode, cwd: Path, env: dict[str, str] | None, parameters: dict | None = None) -> str:
    """One execution: the notebook, its folder, its environment and the papermill parameters injected into it."""
    text = json.dumps(nb, sort_keys=True) + "\0" + str(cwd) + "\0" + json.dumps(env or {}, sort_keys=True)
    if parameters:
        text += "\0" + json.dumps(parameters, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _locked(path: Path) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class ExecutionRegistry:
    """Which executions this test run has done (a folder shared by the xdist workers), and by which test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def claim(self, key: str, owner: str) -> None:
        """Record that ``owner`` executes ``key``; raise ``DuplicateExecution`` when it already ran."""
        path = self.folder / f"{key}.owner"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            first = path.read_text(encoding="utf-8") or "another test"
            raise DuplicateExecution(
                f"this notebook was already executed in this test run (by {first}); {owner} executes it again: "
                "use the session fixture `notebook_runs` (tests/conftest.py) to share one execution"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(owner)


class NotebookRuns:
    def __init__(self, cache: Path | None = None, registry: ExecutionRegistry | None = None, execute=None) -> None:
        self._done: dict[str, tuple[nbformat.NotebookNode, float]] = {}
        self.executions: dict[str, int] = {}
        self._cache = cache
        self._registry = registry
        self._execute = execute or chain.execute
        self.current_test = "a test"

    key = staticmethod(_key)

    def count(self, key: str) -> int:
        """How often the execution ``key`` really ran in this process (0 or 1)."""
        return self.executions.get(key, 0)

    def _really_run(self, key: str, nb, cwd: Path, timeout: int, env) -> tuple[nbformat.NotebookNode, float]:
        if self._registry is not None:
            self._registry.claim(key, f"notebook_runs ({self.current_test})")
        started = time.perf_counter()
        done = self._execute(nb, Path(cwd), timeout=timeout, env=env)
        seconds = time.perf_counter() - started
        self.executions[key] = self.executions.get(key, 0) + 1
        return done, seconds

    def run_timed(
        self, nb: nbformat.NotebookNode, cwd: Path = chain.ROOT, timeout: int = 600, env: dict[str, str] | None = None
    ) -> tuple[nbformat.NotebookNode, float]:
        """(executed copy, seconds of the one real execution, kernel start included)."""
        key = self.key(nb, Path(cwd), env)
        if key not in self._done:
            if self._cache is None:
                self._done[key] = self._really_run(key, nb, cwd, timeout, env)
            else:
                result = self._cache / f"{key}.json"
                with _locked(self._cache / f"{key}.lock"):
                    if result.exists():  # another worker executed it
                        saved = json.loads(result.read_text(encoding="utf-8"))
                        self._done[key] = (nbformat.from_dict(saved["notebook"]), saved["seconds"])
                    else:
                        done, seconds = self._really_run(key, nb, cwd, timeout, env)
                        _write_atomic(result, json.dumps({"notebook": done, "seconds": seconds}))
                        self._done[key] = (done, seconds)
        done, seconds = self._done[key]
        return copy.deepcopy(done), seconds

    def run(
        self, nb: nbformat.NotebookNode, cwd: Path = chain.ROOT, timeout: int = 600, env: dict[str, str] | None = None
    ) -> nbformat.NotebookNode:
        return self.run_timed(nb, cwd, timeout, env)[0]

    def solution_timed(self, assignment: str) -> tuple[nbformat.NotebookNode, float]:
        folder = chain.COURSE / "source" / assignment
        folder.mkdir(parents=True, exist_ok=True)  # the working directory nbgrader would use
        return self.run_timed(chain.build_notebook(assignment), folder)

    def solution(self, assignment: str) -> nbformat.NotebookNode:
        return self.solution_timed(assignment)[0]

    def learner_timed(self, assignment: str) -> tuple[nbformat.NotebookNode, float]:
        path = chain.NOTEBOOKS / assignment / f"{assignment}.ipynb"
        return self.run_timed(nbformat.read(path, as_version=4), path.parent)

    def learner(self, assignment: str) -> nbformat.NotebookNode:
        return self.learner_timed(assignment)[0]


def _run_folder(tmp_path_factory) -> Path:
    """A folder of this test run that every xdist worker sees (the parent of the workers' base temp)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class WarmKernels:
    """This worker's kernel forkserver (``tests/kernel_forkserver.py``), started at its first execution.

    ``GRPO_TEST_WARM_KERNELS=0`` turns it off: every execution then starts a fresh ``ipykernel_launcher``."""

    def __init__(self) -> None:
        self.enabled = os.environ.get("GRPO_TEST_WARM_KERNELS", "1") != "0"
        self._server: subprocess.Popen | None = None
        self._folder: str | None = None

    def _start(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="grpo-kfs-")
        socket_path = os.path.join(self._folder, "server.sock")
        kernel_forkserver.kernel_spec(self._folder, socket_path)
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # as chain.execute gives its kernels
        with open(os.path.join(self._folder, "server.log"), "ab") as log:
            self._server = subprocess.Popen(
                [sys.executable, kernel_forkserver.__file__, "serve", socket_path],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        Path(socket_path + ".pid").write_text(str(self._server.pid), encoding="utf-8")

    def options(self, env: dict[str, str] | None) -> tuple[dict[str, str] | None, dict]:
        """(env, extra chain.execute options) that run the notebook in a forked warm kernel."""
        if not self.enabled:
            return env, {}
        if self._server is None:
            self._start()
        path = os.pathsep.join(
            p for p in (self._folder, (env or {}).get("JUPYTER_PATH", os.environ.get("JUPYTER_PATH"))) if p
        )
        return {**(env or {}), "JUPYTER_PATH": path}, {"kernel_name": kernel_forkserver.NAME}

    def stop(self) -> None:
        if self._server is not None:
            self._server.kill()  # its kernels die with it (parent-death signal)
            self._server.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


# The long chains first. `make test` hands whole files to two pytest-xdist workers in collection order
# (`--dist loadfile --no-loadscope-reorder`), so these start at once and the short files fill the end (longest
# processing time first). It also keeps two workers from wanting one notebook execution at the same moment, where
# one would wait on the other's lock: test_nb07_online.py executes lesson 7 long before test_notebooks.py asks for
# it (in alphabetical order the two met, and a worker waited 15 s).
LONG_CHAINS = (
    "test_autograde_class.py",  # the sample class graded once, then regraded, exported and sharded
    "test_nb07_online.py",  # lesson 7 executed and trained
    "test_launch.py",  # the course's launch paths: simulated platform starts from a snapshot of the checkout
    "test_launch_local.py",  # lab servers, the local exchange
    "test_browser.py",  # JupyterLab in Chromium
    "test_benchmarks.py",  # every benchmark at tiny size
)
assert all((Path(__file__).parent / name).is_file() for name in LONG_CHAINS), "LONG_CHAINS names a missing file"


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONG_CHAINS)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_CHAINS)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def notebook_runs(tmp_path_factory) -> NotebookRuns:
    folder = _run_folder(tmp_path_factory) / "notebook-runs"
    registry = ExecutionRegistry(folder / "registry")
    original = chain.execute
    warm = WarmKernels()

    def warm_execute(nb, cwd, timeout=120, env=None, **options):
        if "kernel_name" in options:  # the caller chose its kernel
            return original(nb, cwd, timeout=timeout, env=env, **options)
        env, extra = warm.options(env)
        return original(nb, cwd, timeout=timeout, env=env, **options, **extra)

    def guarded_execute(nb, cwd, timeout=120, env=None, **options):
        if not getattr(guarded_execute, "inside", False):  # a direct call from a test
            registry.claim(_key(nb, Path(cwd), env, options.get("parameters")), runs.current_test)
        return warm_execute(nb, cwd, timeout=timeout, env=env, **options)

    def inner_execute(nb, cwd, timeout=120, env=None, **options):  # notebook_runs already claimed the key
        guarded_execute.inside = True
        try:
            return warm_execute(nb, cwd, timeout=timeout, env=env, **options)
        finally:
            guarded_execute.inside = False

    runs = NotebookRuns(cache=folder / "cache", registry=registry, execute=inner_execute)
    chain.execute = guarded_execute
    try:
        yield runs
    finally:
        chain.execute = original
        warm.stop()


@pytest.fixture(autouse=True)
def _name_current_test(request, notebook_runs):
    """Installs the duplicate-execution guard for every test and names the test it reports."""
    notebook_runs.current_test = request.node.nodeid
    yield


@pytest.fixture()
def executed_solution(notebook_runs):
    return notebook_runs.solution


@pytest.fixture()
def executed_learner(notebook_runs):
    return notebook_runs.learner


@pytest.fixture(scope="session")
def released_course(tmp_path_factory) -> dict[str, Path]:
    """One released course (source, release, gradebook) per test run, shared by all workers: do not modify it."""
    folder = _run_folder(tmp_path_factory) / "released-course"
    course, notebooks = folder / "autograde", folder / "notebooks"
    with _locked(folder.with_suffix(".lock")):
        if not (folder / "done").exists():
            course.mkdir(parents=True, exist_ok=True)
            (course / "nbgrader_config.py").write_bytes((chain.COURSE / "nbgrader_config.py").read_bytes())
            chain.release_into(course, notebooks)
            (folder / "done").write_text("ok", encoding="utf-8")
    return {"course": course, "notebooks": notebooks}
