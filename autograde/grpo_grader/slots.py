"""Grading slots: one private nbgrader course and one kernel sandbox per parallel worker.

A slot is a folder under the run's temporary base folder::

    slotK/nbgrader/    nbgrader course root (the course's nbgrader_config.py, pointed here by command-line options:
                       ``Slot.nbgrader_options``), gradebook.db (a copy of the course gradebook without
                       learners), submitted/<learner>/, autograded/<learner>/
    slotK/kernel/      the course copy a sandbox sees read-only (``kernel_files``: course.toml, tools/,
                       checkpoints; what else it sees is declared in ``view.py``)
    slotK/jupyter/     kernels/python3/kernel.json -> sandbox.py (JUPYTER_PATH points here)
    slotK/runtime/     connection files, the sandbox spec, the launcher's pid file, the zygote's stderr, and while a
                       notebook is graded its oracle job (``grading-job.json``) and results FIFO (``results.fifo``)

Each slot grades one learner at a time with ``nbgrader autograde`` in its own course, so slots never share a SQLite
file; the pipeline merges the results into the course gradebook, one learner at a time. One execution per notebook:
the kernel nbgrader drives also runs the oracle's cases at each test cell (``case_runner.py``) and sends the results
over the FIFO, which the slot reads while nbgrader runs, with a size limit and a deadline (``run_nbgrader``). As root
each slot has a leased uid (``uids.py``) and, where it grades more than one notebook, a zygote (``zygotes.py``,
``sandbox.py``): a bubblewrap sandbox started once that forks every kernel warm. ``sandbox_choice.py`` probes one slot
before a run grades anything.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import nbgrader_forkserver, probe, view
from .course import ROOT, GradingPipeline, venv_env
from .processes import kill, kill_group
from .results_channel import GradedRun, ResultsChannel
from .zygotes import NOTHING_WARM, SlotZygotes, ZygoteWarm

if TYPE_CHECKING:
    from .isolation import Sandbox

SANDBOX_SCRIPT = Path(__file__).resolve().parent / "sandbox.py"


def visible_lessons(assignment: str) -> list[str]:
    """The saved lesson modules a grading kernel of ``assignment`` may import: those of earlier lessons (by name)."""
    return sorted(path.stem for path in (ROOT / "tools" / "lessons").glob("nb*.py") if path.stem < assignment)


class Slot(SlotZygotes):
    """One parallel worker: its folders and sandbox spec, nbgrader's runs (their results channel), its probes; the
    zygote it forks kernels from (root) is ``SlotZygotes``."""

    def __init__(
        self,
        base: Path,
        name: str,
        settings: GradingPipeline,
        sandbox: Sandbox,
        uid: int | None = None,
        threads: int = 1,
        ipc: Path | None = None,
        zygotes: bool = True,
        warm: ZygoteWarm = NOTHING_WARM,
    ):
        self.settings = settings
        self.zygotes = zygotes  # False: no zygote for this slot even where the settings allow one (one kernel only)
        self.warm = warm  # what the zygotes import and build for the lessons of the run
        self.sandbox = sandbox
        self.dir = base / name
        self.nbgrader = self.dir / "nbgrader"
        self.kernel = self.dir / "kernel"
        self.work = self.kernel / "work"
        self.runtime = self.dir / "runtime"
        self.jupyter = self.dir / "jupyter"
        self.ipc = ipc or (self.dir / "ipc")  # the kernel's unix sockets (the kernel has no network)
        self.spec_path = self.runtime / "sandbox.json"
        self.pidfile = self.runtime / "kernel.pid"
        self.job_path = self.runtime / "grading-job.json"  # a graded notebook's oracle job (sandbox._grading_fds)
        self.fifo_path = self.runtime / "results.fifo"  # its results, read by the grader
        self.uid = uid
        self.kernel_zygote: subprocess.Popen | None = None  # nbgrader's kernels'
        self.alive_pipes: dict[str, int] = {}  # kind -> the grader's end of the pipe its zygote watches
        self.sockets = self.runtime  # the zygotes' sockets; AF_UNIX paths are short: else a private folder of their own
        if len(os.fsencode(self.runtime / "kernel")) > 100:
            self.sockets = Path(tempfile.mkdtemp(prefix="grpo-z-"))
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self.stopped = False
        caps = getattr(sandbox, "caps", None)  # the run's job caps (job_caps.py); none for a probe's slot
        self.caps = caps.slot(name, {"kernel": uid}, {"kernel": self.pidfile}) if caps is not None else None
        self._setup()

    # -- layout
    def _copy_kernel_files(self) -> None:
        if self.kernel.exists():
            shutil.rmtree(self.kernel)
        self.kernel.mkdir(parents=True)
        for name in self.settings.kernel_files:
            source = ROOT / name
            if source.is_dir():
                (self.kernel / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copytree(
                    source,
                    self.kernel / name,
                    symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"),
                )
            elif source.is_file():
                shutil.copy2(source, self.kernel / name)
            else:
                raise FileNotFoundError(f"GradingPipeline.kernel_files: {source} does not exist")
        view.scrub_course_copy(self.kernel)  # no learner id or name reaches a kernel (course.toml's roster)
        # readable by the kernel's uid whatever the source modes were (save_pretrained writes model.safetensors
        # 0600: the grading kernels of lessons 5 and 7 could not load their checkpoints)
        for folder, _dirs, files in os.walk(self.kernel):
            os.chmod(folder, 0o755)
            for name in files:
                path = os.path.join(folder, name)
                os.chmod(path, os.stat(path).st_mode & 0o777 | 0o444)
        self.work.mkdir()

    def stage_lessons(self, assignment: str) -> list[str]:
        """Give the kernel the ``#@save`` modules (tools/lessons/) of the lessons before ``assignment`` only: a lesson
        imports its predecessors' graded functions from there, and never sees its own answers (or later ones)."""
        target = self.kernel / "tools" / "lessons"
        shutil.rmtree(target, ignore_errors=True)
        names = visible_lessons(assignment)
        if not (self.kernel / "tools").is_dir():
            return []
        target.mkdir()
        for name in ["__init__.py"] + [f"{n}.py" for n in names]:
            source = ROOT / "tools" / "lessons" / name
            if source.is_file():
                shutil.copy2(source, target / name)
        return names

    def _setup(self) -> None:
        for folder in (
            self.nbgrader,
            self.runtime,
            self.jupyter / "kernels" / "python3",
            self.dir / "config",
            self.dir / "logs",
        ):
            folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self._copy_kernel_files()
        self.reset_work()
        python = str(Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name)
        if not os.path.exists(python):
            python = os.path.realpath(sys.executable)
        limits = {"AS": self.settings.memory_limit_bytes(), "FSIZE": 1 << 30, "CORE": 0}
        if self.uid is not None:
            limits["NPROC"] = 512
        spec = {
            "mode": self.sandbox.mode,
            "python": python,
            "uid": self.uid,
            "gid": self.uid,
            **view.spec_view(),  # what the sandbox sees besides its binds (view.py: the one declaration)
            "keep": view.kernel_binds(
                self.sandbox.paths.get("bind", []),
                self.kernel,
                self.ipc,
                view.never_bound(self.settings, self.dir.parent),
            ),
            "course": str(self.kernel),
            "workdir": str(self.work),
            "pidfile": str(self.pidfile),
            "rlimits": limits,
            "threads": self.threads,
            "grading": {"job": str(self.job_path), "results": str(self.fifo_path)},
            "env": {str(k): str(v) for k, v in self.settings.kernel_env.items()},
            "bwrap": shutil.which("bwrap") or "/usr/bin/bwrap",
            "setpriv": shutil.which("setpriv") or "setpriv",
        }
        if self.caps is not None:  # the kernel's job caps: its cgroups, RLIMIT_NPROC (job_caps.SlotCaps.spec)
            spec.update(self.caps.spec("kernel", spec["rlimits"]))
        if self.sandbox.paths.get("pythonpath"):
            spec["env"]["PYTHONPATH"] = os.pathsep.join([str(self.kernel), *self.sandbox.paths["pythonpath"]])
        if self.kernel_zygote_enabled:  # the launcher asks the slot's kernel zygote for the kernel (sandbox.py)
            spec["zygote_socket"] = str(self.sockets / "kernel")
        self.spec_path.write_text(json.dumps(spec, indent=1))
        kernel_json = {
            "argv": [
                os.path.realpath(sys.executable),
                "-I",
                str(SANDBOX_SCRIPT),
                str(self.spec_path),
                "-f",
                "{connection_file}",
            ],
            "display_name": "Python 3 (grading sandbox)",
            "language": "python",
            "interrupt_mode": "signal",
            "metadata": {"debugger": False},
        }
        (self.jupyter / "kernels" / "python3" / "kernel.json").write_text(json.dumps(kernel_json, indent=1))

    def reset_course(self, template_db: Path, assignments: list[str]) -> None:
        for name in ("submitted", "autograded", "source"):
            shutil.rmtree(self.nbgrader / name, ignore_errors=True)
        for assignment in assignments:
            (self.nbgrader / "source" / assignment).mkdir(parents=True, exist_ok=True)
        shutil.copy2(template_db, self.nbgrader / "gradebook.db")

    def reset_work(self) -> None:
        """An empty socket folder (the kernel's uid's); without a sandbox also a fresh course copy and working folder
        (bubblewrap gives every kernel a tmpfs of its own there)."""
        if self.sandbox.mode == "none":
            self._copy_kernel_files()  # the kernel could have written into its course copy
        _empty_folder(self.ipc)  # emptied, not replaced: a running kernel zygote's view binds the socket folder
        if self.uid is not None:
            os.chown(self.ipc, self.uid, self.uid)
        os.chmod(self.ipc, 0o700)

    # -- processes
    def env(self) -> dict[str, str]:
        return venv_env(
            {
                "JUPYTER_PATH": str(self.jupyter),
                "JUPYTER_RUNTIME_DIR": str(self.runtime),
                "JUPYTER_CONFIG_DIR": str(self.dir / "config"),
                "JUPYTER_CONFIG_PATH": str(self.settings.config_file.parent),  # the course's nbgrader_config.py
                "JUPYTER_DATA_DIR": str(self.jupyter),
                "JUPYTER_PLATFORM_DIRS": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )

    def kill_kernels(self) -> None:
        """Kill what the last kernel left behind: its launcher (a zygote then kills the kernel and cleans up; a fresh
        bubblewrap takes its namespaces down with it)."""
        self._kill_launcher(self.pidfile)

    def _kill_launcher(self, pidfile: Path) -> None:
        try:
            pid = int(json.loads(pidfile.read_text())["supervisor"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        try:
            if str(self.dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                kill_group(pid) if self.sandbox.mode == "none" else kill(pid)
        except OSError:
            pass
        pidfile.unlink(missing_ok=True)

    def nbgrader_options(self, oracle_tests: Sequence[str] = (), case_seconds: int = 0) -> list[str]:
        """nbgrader's settings for this slot, as command-line options over the course's ``nbgrader_config.py`` (which
        nbgrader finds on ``JUPYTER_CONFIG_PATH``, ``env()``): this slot's course and gradebook, the cell limit, and
        ``oracle_tests``, the test cells whose cases the kernel runs for the oracle (``StripHiddenTests.tests``:
        nbgrader gets their names, so it never imports the oracles, nor torch with them), each with ``case_seconds``
        more time."""
        options = {
            "CourseDirectory.root": str(self.nbgrader),
            "CourseDirectory.db_url": "sqlite:///" + str(self.nbgrader / "gradebook.db"),
            "Execute.timeout": int(self.settings.cell_timeout),
            "Execute.shutdown_kernel": "immediate",  # outputs are in; kill_kernels() cleans up after nbgrader
        }
        if self.sandbox.mode != "none":  # the kernel has no network: unix sockets in its working folder
            options.update({"KernelManager.transport": "ipc", "KernelManager.ip": str(self.ipc / "kernel")})
        if oracle_tests:
            options["StripHiddenTests.case_seconds"] = int(case_seconds)
        # a List trait: each repeated option appends one grade_id
        return [f"--{name}={value}" for name, value in options.items()] + [
            f"--StripHiddenTests.tests={grade_id}" for grade_id in oracle_tests
        ]

    def run_nbgrader(
        self,
        assignment: str,
        learner: str,
        notebook: str,
        log: Path,
        oracle_tests: Sequence[str] = (),
        job: dict | None = None,
        expected: Sequence[str] = (),
        case_seconds: int = 0,
    ) -> GradedRun:
        """``nbgrader autograde`` of one notebook in this slot, killed as a whole at the hard limit. ``oracle_tests``:
        the test cells the assignment's oracle grades, whose cases (``job``: the case runner and the inputs, ids
        ``expected``) the kernel runs in place of their hidden tests; their results come back over the slot's FIFO,
        read while nbgrader runs (``results_channel.py``: a size limit, the hard limit, and ``grace_after_results``
        seconds for the kernel once the last expected result is in)."""
        if self.stopped:
            raise RuntimeError("grading was stopped")
        self.stage_lessons(assignment)
        self.ensure_kernel_zygote()
        arguments = [
            "autograde",
            assignment,
            f"--student={learner}",
            f"--notebook={notebook}",
            "--force",
            "--log-level=INFO",
            *self.nbgrader_options(oracle_tests, case_seconds),
        ]
        channel = ResultsChannel(self.fifo_path, self.job_path, job, set(expected)) if job is not None else None
        started = time.monotonic()
        deadline = started + self.settings.notebook_timeout
        lingered, finished = 0.0, False
        try:
            if nbgrader_forkserver.available():  # forked from a process that has imported nbgrader
                process = self.process = nbgrader_forkserver.start(arguments, str(self.nbgrader), self.env(), str(log))
                exited = process.sentinel
            else:
                with open(log, "wb") as handle:
                    process = self.process = subprocess.Popen(
                        [sys.executable, "-m", "nbgrader", *arguments],
                        cwd=self.nbgrader,
                        env=self.env(),
                        stdout=handle,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                exited = os.pidfd_open(process.pid)
            try:
                if channel is None:
                    finished = bool(select.select([exited], [], [], max(0.0, deadline - time.monotonic()))[0])
                else:
                    grace = self.settings.grace_after_results
                    finished, lingered = channel.watch(exited, deadline, grace, self.kill_kernels)
            finally:
                if not isinstance(process, nbgrader_forkserver.WarmProcess):
                    os.close(exited)
            if not finished:
                kill_group(process.pid)
            process.wait()
        finally:
            self.kill_kernels()
            results, dropped = channel.close() if channel is not None else (b"", 0)
        return GradedRun(process.returncode, not finished, time.monotonic() - started, results, dropped, lingered)

    def abort(self) -> None:
        """Stop this slot now (Ctrl-C): no new notebook, the running one killed with its kernel."""
        self.stopped = True
        if self.process is not None and self.process.poll() is None:
            kill_group(self.process.pid)
        self.kill_kernels()

    def _launcher(self, name: str, spec: dict) -> list[str]:
        """The sandbox launcher's command line for ``spec``, written as ``runtime/<name>.json`` with an empty
        connection file beside it (only a kernel started by Jupyter has a real one)."""
        spec_path = self.runtime / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        connection = self.runtime / f"{name}-connection.json"
        connection.write_text("{}")
        return [os.path.realpath(sys.executable), "-I", str(SANDBOX_SCRIPT), str(spec_path), "-f", str(connection)]

    def run_sandboxed_code(
        self, code: str, args: list[str], zygote: bool = True, timeout: float = 60, warm: bool = True
    ) -> subprocess.CompletedProcess:
        """``python -c code args`` in this slot's kernel sandbox (a job of the kernel zygote where there is one and
        ``zygote``; else a fresh bubblewrap)."""
        spec = json.loads(self.spec_path.read_text())
        if not zygote:
            spec.pop("zygote_socket", None)
        elif "zygote_socket" in spec:
            self.ensure_kernel_zygote(warm)
        spec["command"] = [spec["python"], "-c", code, *args]
        try:
            return subprocess.run(
                self._launcher("probe", spec),
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self.runtime,
                env=self.env(),
            )
        finally:
            self.kill_kernels()

    def probe(self, paths: list[str], zygote: bool = True, imports: list[str] = (), import_mode: str = "find") -> dict:
        """Start the sandbox with the probe (probe.py) instead of a kernel (``zygote``: as a job of the zygote where
        there is one, the view a kernel really gets, else a fresh bubblewrap of the same view); report what it can
        read and whether ``imports`` load (``import_mode``)."""
        request = json.dumps(
            {
                "paths": paths,
                "environ": list(view.SECRET_ENVIRON),
                "masked": view.masks_of(json.loads(self.spec_path.read_text())["keep"]),
                "imports": list(imports),
                "import_mode": import_mode,
            }
        )
        done = self.run_sandboxed_code(
            probe.source(), [request], zygote, warm=False, timeout=60 if import_mode == "find" else 300
        )
        self.reset_work()
        report = probe.parse_output(done.stdout)
        if report is not None:
            return {**report, "zygote": self.kernel_zygote_enabled and zygote}
        raise RuntimeError(f"sandbox probe failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")


def _empty_folder(folder: Path) -> None:
    """Make ``folder`` exist and hold nothing (the folder itself is kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in list(folder.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def mount_socket_tmpfs(folder: Path) -> bool:
    """Root: the kernels' socket folders live on one small tmpfs for the run, so that the only host folder a kernel
    may write to cannot fill the disk (util-linux ``mount``). Returns whether it was mounted."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"mode=0755,size={view.SOCKETS_SIZE // view.MIB}m,nosuid,nodev",
            "tmpfs",
            str(folder),
        ],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, timeout=30)
