"""Grading slots: one private nbgrader course and one kernel sandbox per parallel worker.

A slot is a folder under the run's temporary base folder::

    slotK/nbgrader/    nbgrader course root (the course's nbgrader_config.py, pointed here by command-line options:
                       ``Slot.nbgrader_options``), gradebook.db (a copy of the course gradebook without
                       learners), submitted/<learner>/, autograded/<learner>/
    slotK/kernel/      what the kernel may read: course.toml + tools/ + checkpoints (copied from the checkout);
                       read-only for the kernel
    slotK/jupyter/     kernels/python3/kernel.json -> sandbox.py (JUPYTER_PATH points here)
    slotK/runtime/     connection files, the sandbox specs, the launchers' pid files, the zygotes' stderr
    slotK/oracle/      the oracle's job (driver.py, job.json), written by the grader, sent to the driver

Each slot grades one learner at a time with ``nbgrader autograde`` in its own course, so slots never share a SQLite
file; the pipeline merges the results into the course gradebook, one learner at a time. As root each slot has two
leased uids (nbgrader's kernel, the oracle's driver beside it) and, where it grades more than one notebook, two
zygotes (sandbox.py): bubblewrap sandboxes started once that fork every kernel and every driver warm.
"""

from __future__ import annotations

import fcntl
import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import nbgrader_forkserver
from . import probe as preflight
from .course import AUTOGRADE, ROOT, GradingPipeline, prepare_kernel_files, venv_env
from .sandbox import _environment, zygote_command
from .transport import DRAIN_SECONDS, MAX_RESULTS_BYTES, STDERR_TAIL_BYTES, BoundedPipe, DriverRun, pump, read_capped

SANDBOX_SCRIPT = Path(__file__).resolve().parent / "sandbox.py"
SCRATCH = [["/tmp", "256m"], ["/var/tmp", "16m"], ["/dev/shm", "64m"]]
# A zygote's warm-up (imports, lesson 7's grading policy; seconds, longer on a busy machine) is the grader's time: a
# slot waits up to this long for a new zygote to answer before the time limits of the learner's notebook or driver
# start counting (the first learners of a run once lost points to the warm-ups of four zygotes on two cores).
ZYGOTE_READY_SECONDS = 180
WORKDIR_SIZE = "256m"  # the kernel's private working folder (and HOME), a tmpfs of its own


@dataclass(frozen=True)
class ZygoteWarm:
    """What a slot's zygotes prepare before they fork, beyond what every zygote imports (``sandbox.WARM``): what the
    lessons of the run import and build (their oracle modules' ``ZYGOTE_IMPORTS`` and ``ZYGOTE_WARM``), so that a
    run of lesson 1 alone does not import transformers in each zygote."""

    kernel: tuple[str, ...] = ()  # modules the kernel zygote imports
    oracle: tuple[str, ...] = ()  # modules the oracle zygote imports
    calls: tuple[str, ...] = ()  # "module:function" calls the oracle zygote makes once (lesson 7's grading policy)


def visible_lessons(assignment: str) -> list[str]:
    """The saved lesson modules a grading kernel of ``assignment`` may import: those of earlier lessons (by name)."""
    return sorted(path.stem for path in (ROOT / "tools" / "lessons").glob("nb*.py") if path.stem < assignment)


def _git(args: list[str]) -> list[str]:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []


def _checkout_of(path: Path) -> Path | None:
    for folder in [path, *path.parents]:
        if (folder / "course.toml").is_file():
            return folder
    return None


def secret_probe_paths(settings: GradingPipeline, slot_db: Path) -> list[str]:
    """Paths a sandboxed kernel must not be able to read (checked by the probe)."""
    paths = [
        ROOT / "solutions",
        settings.course / "gradebook.db",
        settings.course / "source",
        settings.course / "autograded",
        settings.course / "submitted",
        AUTOGRADE / "sample_class",
        slot_db,
        AUTOGRADE / "grpo_grader" / "oracles",
        settings.course / ".grading_seed",
        AUTOGRADE / ".grading_seed",
    ]
    paths += sorted((ROOT / "solutions").glob("*.py"))[:1]
    for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]):
        paths.append(Path(line.strip()))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        paths.append(venv_checkout / "solutions")
    return [str(p) for p in paths if p.exists()]


# ----------------------------------------------------------------------------- uids
UID_LOCKS = Path(tempfile.gettempdir()) / "grpo-grading-uids"


def _uid_taken(uid: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _uids_running() -> set[int]:
    running = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                running.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                pass
    return running


def lease_uids(start: int, count: int) -> tuple[list[int], list]:
    """``count`` kernel uids that no account owns, no process runs as, and no other grading run holds.

    Each uid is held through an exclusive ``flock`` on ``<tmp>/grpo-grading-uids/<uid>.lock`` for as long as
    the returned handles stay open (until the run ends, even if it crashes): two runs never share a uid,
    so one run's "kill every process of my uid" never touches the other's kernels.
    """
    UID_LOCKS.mkdir(mode=0o755, exist_ok=True)
    running = _uids_running()
    uids, handles = [], []
    uid = start
    while len(uids) < count:
        if uid > start + 100_000:
            raise RuntimeError(f"no free sandbox uid in {start}..{uid}")
        if not _uid_taken(uid) and uid not in running:
            handle = open(UID_LOCKS / f"{uid}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
            else:
                uids.append(uid)
                handles.append(handle)
        uid += 1
    return uids, handles


# ----------------------------------------------------------------------------- a slot
@dataclass
class Sandbox:
    mode: str  # bwrap | none
    uids: list[int] = field(default_factory=list)  # root: two leased uids per slot (kernel, oracle driver)
    probe: dict = field(default_factory=dict)  # what a kernel sees; "oracle": what the driver beside it sees
    problems: list[str] = field(default_factory=list)
    leases: list = field(default_factory=list)  # open lock files holding the uids
    # folders outside the virtual environment the interpreter's sys.path needs (probe.interpreter_paths): bound
    # read-only into every sandbox ("bind"), the ones a kernel does not find itself on its PYTHONPATH ("pythonpath")
    paths: dict = field(default_factory=dict)

    def describe(self) -> str:
        if self.mode == "bwrap":
            who = f"uid {', '.join(map(str, self.uids))}" if self.uids else "the grader's uid in a user namespace"
            return (
                f"bwrap: kernels run as {who} in bubblewrap's allow-list view (interpreter, virtual environment, "
                f"course copy, private tmpfs), private mount/PID/IPC/network namespaces"
            )
        return "none: kernels run as the grader's own user and can read whatever it can read"


class Slot:
    def __init__(
        self,
        base: Path,
        name: str,
        settings: GradingPipeline,
        sandbox: Sandbox,
        uid: int | None = None,
        threads: int = 1,
        ipc: Path | None = None,
        oracle_uid: int | None = None,
        zygotes: bool = True,
        warm: ZygoteWarm = ZygoteWarm(),
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
        self.oracle_pidfile = self.runtime / "oracle.pid"
        self.uid = uid
        # the oracle's driver runs as a uid of its own (root), so that it can run while nbgrader's kernel does
        self.oracle_uid = oracle_uid if oracle_uid is not None else uid
        self.oracle_process = None
        self.zygote: subprocess.Popen | None = None  # the oracle drivers'
        self.kernel_zygote: subprocess.Popen | None = None  # nbgrader's kernels'
        self.alive_pipes: dict[str, int] = {}  # kind -> the grader's end of the pipe its zygote watches
        self.sockets = self.runtime  # the zygotes' sockets; AF_UNIX paths are short: else a private folder of their own
        if len(os.fsencode(self.runtime / "kernel")) > 100:
            self.sockets = Path(tempfile.mkdtemp(prefix="grpo-z-"))
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self.stopped = False
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
        keep = [[str(Path(sys.prefix).resolve()), "ro"]]
        base_prefix = str(Path(sys.base_prefix).resolve())
        if base_prefix not in ("/usr", "/usr/local") and base_prefix != keep[0][0] and os.access(base_prefix, os.X_OK):
            keep.append([base_prefix, "ro"])
        keep += [[path, "ro"] for path in self.sandbox.paths.get("bind", [])]
        keep += [[str(self.kernel), "ro"], [str(self.ipc), "rw"]]
        limits = {"AS": self.settings.memory_limit_bytes(), "FSIZE": 1 << 30, "CORE": 0}
        if self.uid is not None:
            limits["NPROC"] = 512
        spec = {
            "mode": self.sandbox.mode,
            "python": python,
            "uid": self.uid,
            "gid": self.uid,
            "scratch": SCRATCH,
            "keep": keep,
            "course": str(self.kernel),
            "workdir": str(self.work),
            "pidfile": str(self.pidfile),
            "rlimits": limits,
            "threads": self.threads,
            "workdir_size": WORKDIR_SIZE,
            "env": {str(k): str(v) for k, v in self.settings.kernel_env.items()},
            "bwrap": shutil.which("bwrap") or "/usr/bin/bwrap",
            "setpriv": shutil.which("setpriv") or "setpriv",
        }
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

    @property
    def concurrent_oracle(self) -> bool:
        """Whether the oracle's driver may run while nbgrader's kernel runs: under bubblewrap each has its own view,
        working folder, /tmp, IPC namespace and (root) uid; without a sandbox both would share the working folder."""
        return self.sandbox.mode != "none" and (self.uid is None or self.oracle_uid != self.uid)

    def kill_kernels(self) -> None:
        """Kill what the last kernel left behind: its launcher (a zygote then kills the kernel and cleans up; a fresh
        bubblewrap takes its namespaces down with it)."""
        self._kill_launcher(self.pidfile)

    def kill_oracle(self) -> None:
        """The same for the oracle's driver."""
        self._kill_launcher(self.oracle_pidfile)

    def _kill_launcher(self, pidfile: Path) -> None:
        try:
            pid = int(json.loads(pidfile.read_text())["supervisor"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        try:
            if str(self.dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                _kill_group(pid) if self.sandbox.mode == "none" else _kill(pid)
        except OSError:
            pass
        pidfile.unlink(missing_ok=True)

    def _wait_or_kill(self, process, timeout: float) -> bool:
        """Wait for ``process`` (a session leader); at ``timeout`` kill its whole process group. Either way the
        kernels it left are killed afterwards. Returns whether it was killed at the limit."""
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process.pid)
            process.wait()
        finally:
            self.kill_kernels()
        return timed_out

    def nbgrader_options(self, oracle_tests: Sequence[str] = ()) -> list[str]:
        """nbgrader's settings for this slot, as command-line options over the course's ``nbgrader_config.py`` (which
        nbgrader finds on ``JUPYTER_CONFIG_PATH``, ``env()``): this slot's course and gradebook, the cell limit, and
        ``oracle_tests``, the test cells the oracle grades outside the kernel (``StripHiddenTests.tests``: nbgrader
        gets their names, so it never imports the oracles, nor torch with them)."""
        options = {
            "CourseDirectory.root": str(self.nbgrader),
            "CourseDirectory.db_url": "sqlite:///" + str(self.nbgrader / "gradebook.db"),
            "Execute.timeout": int(self.settings.cell_timeout),
            "Execute.shutdown_kernel": "immediate",  # outputs are in; kill_kernels() cleans up after nbgrader
        }
        if self.sandbox.mode != "none":  # the kernel has no network: unix sockets in its working folder
            options.update({"KernelManager.transport": "ipc", "KernelManager.ip": str(self.ipc / "kernel")})
        # a List trait: each repeated option appends one grade_id
        return [f"--{name}={value}" for name, value in options.items()] + [
            f"--StripHiddenTests.tests={grade_id}" for grade_id in oracle_tests
        ]

    def run_nbgrader(
        self, assignment: str, learner: str, notebook: str, log: Path, oracle_tests: Sequence[str] = ()
    ) -> tuple[int, bool, float]:
        """``nbgrader autograde`` of one notebook in this slot, killed as a whole at the hard limit; ``oracle_tests``:
        the test cells the assignment's oracle grades (their hidden tests do not run in the kernel)."""
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
            *self.nbgrader_options(oracle_tests),
        ]
        started = time.monotonic()
        if nbgrader_forkserver.available():  # forked from a process that has imported nbgrader (nbgrader_forkserver.py)
            process = self.process = nbgrader_forkserver.start(arguments, str(self.nbgrader), self.env(), str(log))
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
        timed_out = self._wait_or_kill(process, self.settings.notebook_timeout)
        return process.returncode, timed_out, time.monotonic() - started

    def stop_oracle(self) -> None:
        """Kill the running oracle driver (run_oracle then returns at once)."""
        process = self.oracle_process
        if process is not None and process.poll() is None:
            _kill_group(process.pid)

    def abort(self) -> None:
        """Stop this slot now (Ctrl-C): no new notebook, the running one killed with its kernel."""
        self.stopped = True
        for process in (self.process, self.oracle_process):
            if process is not None and process.poll() is None:
                _kill_group(process.pid)
        self.kill_kernels()
        self.kill_oracle()

    def _oracle_spec(self, extra_keep: list[list[str]]) -> dict:
        """The kernel's sandbox spec for the oracle's driver: its own uid and pid file, the kernel's view without the
        kernel's socket folder (it shares nothing with a kernel that may run at the same time), plus ``extra_keep``;
        a smaller file-size limit and a non-interactive plot backend."""
        spec = json.loads(self.spec_path.read_text())
        spec.pop("zygote_socket", None)
        spec["keep"] = [k for k in spec["keep"] if k[0] != str(self.ipc)] + extra_keep
        spec["uid"] = spec["gid"] = self.oracle_uid
        spec["pidfile"] = str(self.oracle_pidfile)
        spec["rlimits"] = {**spec["rlimits"], "FSIZE": 128 * 2**20}
        spec["env"] = {**spec.get("env", {}), "MPLBACKEND": "Agg"}
        return spec

    def oracle_job_dir(self) -> Path:
        """The oracle's job folder, emptied and the grader's again."""
        folder = self.dir / "oracle"
        if folder.exists():
            os.chown(folder, os.getuid(), os.getgid())
            os.chmod(folder, 0o700)
        _empty_folder(folder)
        return folder

    def _launcher(self, name: str, spec: dict) -> list[str]:
        """The sandbox launcher's command line for ``spec``, written as ``runtime/<name>.json`` with an empty
        connection file beside it (only a kernel started by Jupyter has a real one)."""
        spec_path = self.runtime / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        connection = self.runtime / f"{name}-connection.json"
        connection.write_text("{}")
        return [os.path.realpath(sys.executable), "-I", str(SANDBOX_SCRIPT), str(spec_path), "-f", str(connection)]

    # -- the zygotes (root): kernels and drivers forked from a bubblewrap sandbox that imported torch & co once
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
        spec = {**spec, "zygote": kind, "warm": warm, "grader_fd": alive}
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
                    pass_fds=(alive,),
                    start_new_session=True,
                )
        finally:
            listener.close()  # the zygote holds it: when it dies, a connect fails at once
            os.close(alive)

    def ensure_kernel_zygote(self, warm: bool = True) -> None:
        """Start the kernel zygote unless it runs and answers (once per slot; a dead one, or one that could not clean
        up after the last kernel, is replaced). Its answer also means the last kernel is gone and cleaned up.
        ``warm``: False for a probe, whose zygote builds the same view but imports nothing."""
        if self.kernel_zygote_enabled and not (self.kernel_zygote is not None and self._answers(self.kernel_zygote)):
            _stop(self.kernel_zygote)
            self._close_alive("kernel")
            spec = {**json.loads(self.spec_path.read_text()), "warm_imports": list(self.warm.kernel)}
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
        _stop(self.kernel_zygote)
        self.kernel_zygote = None
        self._close_alive("kernel")
        self._stop_oracle_zygote()
        for kind in ("kernel", "oracle"):
            (self.sockets / kind).unlink(missing_ok=True)
        if self.sockets.name.startswith("grpo-z-"):
            shutil.rmtree(self.sockets, ignore_errors=True)

    def _stop_oracle_zygote(self) -> None:
        _stop(self.zygote)
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
                **self._oracle_spec([]),
                "warm_calls": list(self.warm.calls),
                "warm_imports": list(self.warm.oracle),
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

    def run_oracle(self, job_dir: Path, timeout: float) -> DriverRun:
        """Run ``driver.py`` on ``job_dir`` in this slot's oracle sandbox (a zygote's job, or a fresh bubblewrap with
        ``job_dir`` bound read-only); killed as a whole after ``timeout`` seconds. Its results and stderr come back
        over pipes the grader opened (never a file the sandbox could have replaced), read with a size limit and a
        deadline."""
        if self.stopped:
            raise RuntimeError("grading was stopped")
        if self.zygote_enabled:
            return self._run_in_zygote(job_dir, timeout)
        results, errors = BoundedPipe(MAX_RESULTS_BYTES), BoundedPipe(STDERR_TAIL_BYTES, tail=True)
        spec = self._oracle_spec([[str(job_dir), "ro"]])
        spec["command"] = [
            spec["python"],
            "-X",
            "utf8",
            str(job_dir / "driver.py"),
            str(job_dir),
            str(results.write_fd),
        ]
        command = self._launcher("oracle", spec)
        if self.oracle_uid is not None:  # the job folder readable by the oracle's uid only; the driver cannot write it
            os.chown(job_dir, self.oracle_uid, self.oracle_uid)
        os.chmod(job_dir, 0o500)
        started = time.monotonic()
        try:
            process = self.oracle_process = subprocess.Popen(
                command,
                cwd=self.runtime,
                env=self.env(),
                stdout=subprocess.DEVNULL,
                stderr=errors.write_fd,
                pass_fds=(results.write_fd,),
                start_new_session=True,
            )
        finally:
            results.close_writer()
            errors.close_writer()
        exited = os.pidfd_open(process.pid)
        try:
            timed_out = not pump([results, errors], started + timeout, stop_fd=exited)
        finally:
            os.close(exited)
        if timed_out:
            _kill_group(process.pid)
        process.wait()
        self.kill_oracle()
        pump([results, errors], time.monotonic() + DRAIN_SECONDS)
        results.close()
        errors.close()
        return DriverRun(
            process.returncode,
            timed_out,
            time.monotonic() - started,
            errors.text(),
            bytes(results.data),
            results.dropped,
        )

    def run_sandboxed_code(
        self,
        code: str,
        args: list[str],
        oracle: bool = False,
        zygote: bool = True,
        timeout: float = 60,
        warm: bool = True,
    ) -> subprocess.CompletedProcess:
        """``python -c code args`` in this slot's kernel sandbox (a job of the kernel zygote where there is one and
        ``zygote``; else a fresh bubblewrap), or in the oracle driver's (``oracle``: a fresh one)."""
        spec = self._oracle_spec([]) if oracle else json.loads(self.spec_path.read_text())
        if oracle or not zygote:
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
            self.kill_oracle() if oracle else self.kill_kernels()

    def probe(
        self,
        paths: list[str],
        oracle: bool = False,
        zygote: bool = True,
        imports: list[str] = (),
        import_mode: str = "find",
    ) -> dict:
        """Start the sandbox with the probe (probe.py) instead of a kernel (``oracle``: the oracle driver's sandbox;
        ``zygote``: as a job of the zygote where there is one, the view a kernel really gets, else a fresh
        bubblewrap of the same view); report what it can read and whether ``imports`` load (``import_mode``)."""
        request = json.dumps({"paths": paths, "oracle": oracle, "imports": list(imports), "import_mode": import_mode})
        if oracle and self.zygote_enabled and zygote:  # a job of the zygote: the view the driver really gets
            job = self.oracle_job_dir()
            (job / "driver.py").write_text(
                "import os, sys\n"
                "sys.stdout = os.fdopen(int(sys.argv[2]), 'w')\n"
                f"sys.argv = ['probe', {request!r}]\n" + preflight.source() + "sys.stdout.flush()\n"
            )
            run = self._run_in_zygote(job, 120 if import_mode == "find" else 300, warm=False)
            self._stop_oracle_zygote()
            self.oracle_job_dir()
            report = preflight.parse_output(run.results.decode(errors="replace"))
            if report is not None:
                return {**report, "zygote": True}
            raise RuntimeError(f"sandbox probe (zygote job) failed (exit {run.code}): {run.stderr.strip()[-800:]}")
        done = self.run_sandboxed_code(
            preflight.source(), [request], oracle, zygote, warm=False, timeout=60 if import_mode == "find" else 300
        )
        self.reset_work()
        report = preflight.parse_output(done.stdout)
        if report is not None:
            return {**report, "zygote": self.kernel_zygote_enabled and zygote and not oracle}
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
        ["mount", "-t", "tmpfs", "-o", "mode=0755,size=8m,nosuid,nodev", "tmpfs", str(folder)],
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "--lazy", str(folder)], capture_output=True, timeout=30)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``, and ``pid`` itself (it may not lead its group yet)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill(pid)


def _stop(process: subprocess.Popen | None) -> None:
    """Kill a zygote's bubblewrap and its process group, and reap it (its PID namespace dies with it)."""
    if process is None:
        return
    _kill_group(process.pid)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


SANDBOX_MODES = ("bwrap", "none")


def check_bwrap() -> None:
    """Raise ``probe.ProbeFailure`` naming the cause and the exact fix when bubblewrap cannot build a grading sandbox
    here: not installed; root without CAP_SYS_ADMIN or under a container's seccomp/AppArmor profile; not root where
    user namespaces are blocked (sysctl, Ubuntu 24.04's AppArmor restriction, a container)."""
    problems = preflight.namespace_problems(str(ROOT))
    if problems:
        raise preflight.ProbeFailure(problems, "bwrap")


def _never_bound(settings: GradingPipeline, base: Path) -> list[str]:
    """Folders no sandbox may show, whatever ``sys.path`` or ``extra_readonly_paths`` says: this checkout, the course,
    the run's folder, the git object store, the checkout holding the virtual environment (probe.refusal)."""
    found = {ROOT, settings.course, base}
    found.update(Path(line.strip()) for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        found.add(venv_checkout)
    return sorted({str(path.resolve()) for path in found})


def choose_sandbox(
    settings: GradingPipeline, base: Path, slots: int = 1, probe_driver: bool = False, import_mode: str = "find"
) -> Sandbox:
    """The configured sandbox (``auto``: bubblewrap, root or not; ``none`` only when asked for), probed
    (``probe_driver``: the oracle driver's view too, and as root each through a job of its zygote - `pipeline.py
    probe` does; a grading run probes the kernel's view in a fresh bubblewrap, which the zygotes' jobs share).

    The kernel files are built first when missing (the tiny checkpoint, lesson 7's warm start): every slot, the
    probe's included, copies them into its read-only course copy.

    The probe also tries what grading needs (probe.py): torch, ipykernel, nbformat and the graded lessons' imports
    (``import_mode`` ``find``: their top-level packages found on ``sys.path``, a grading run's cheap check;
    ``import``: each imported, `pipeline.py probe`); a failure raises ``probe.ProbeFailure`` naming cause and fix
    before any notebook is graded. The folders outside the virtual environment the interpreter's ``sys.path`` needs
    are bound read-only into the sandbox (``Sandbox.paths``)."""
    prepare_kernel_files(settings)
    homes = [str(Path.home().resolve()), "/root"]
    shown = [str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve()), "/usr"]
    paths = preflight.interpreter_paths(
        shown, _never_bound(settings, base) + homes, homes, [str(p) for p in settings.extra_readonly_paths]
    )
    imports = preflight.probe_imports(ROOT, top_level=import_mode == "find")
    failures: list[preflight.Problem] = [
        preflight.Problem(
            "extra-path-refused",
            f"c.GradingPipeline.extra_readonly_paths 里的 {path} 不能放进沙箱：{why}（refused）",
            "只列出装有 Python 包的目录（如某个 site-packages），不要列课程目录或它的上级目录",
        )
        for path, why in paths["refused"].items()
        if path in settings.extra_readonly_paths
    ]
    mode = "bwrap" if settings.sandbox == "auto" else settings.sandbox
    if mode not in SANDBOX_MODES:
        raise ValueError(f"GradingPipeline.sandbox must be auto or one of {', '.join(SANDBOX_MODES)}, not {mode!r}")
    sandbox = Sandbox(mode=mode, paths=paths)
    slot = None
    try:
        if mode == "bwrap":
            check_bwrap()
            if os.geteuid() == 0:  # two per slot: nbgrader's kernel and the oracle's driver, which run side by side
                sandbox.uids, sandbox.leases = lease_uids(settings.sandbox_uid_base, 2 * slots)
        slot = Slot(
            base,
            "probe",
            settings,
            sandbox,
            uid=sandbox.uids[0] if sandbox.uids else None,
            oracle_uid=sandbox.uids[1] if sandbox.uids else None,
        )
        decoy = slot.nbgrader / "gradebook.db"
        decoy.write_text("decoy")
        report = slot.probe(
            secret_probe_paths(settings, decoy), zygote=probe_driver, imports=imports, import_mode=import_mode
        )
        if probe_driver and slot.concurrent_oracle:  # the driver beside the kernel: nor the kernel's sockets
            (slot.ipc / "kernel-socket").write_text("")
            report["oracle"] = slot.probe(
                secret_probe_paths(settings, decoy) + [str(slot.ipc)],
                oracle=True,
                imports=preflight.ALWAYS_IMPORTED[:1],
                import_mode=import_mode,
            )
    except preflight.ProbeFailure as failure:  # the machine does not allow bubblewrap: the cause and the fix
        for handle in sandbox.leases:
            handle.close()
        raise preflight.ProbeFailure(failures + failure.problems, mode) from None
    except Exception as error:
        for handle in sandbox.leases:
            handle.close()
        raise RuntimeError(
            f"no usable kernel sandbox ({mode}: {error}); to grade without isolation anyway, pass --sandbox none or "
            "set c.GradingPipeline.sandbox = 'none' (kernels can then read the answers): see autograde/README.md"
        ) from error
    finally:
        if slot is not None:
            slot.stop_zygote()
        shutil.rmtree(base / "probe", ignore_errors=True)
    problems = []
    if not str(report.get("tools", "")).startswith(str(base)) and mode != "none":
        problems.append(f"the kernel's course copy is not importable ({report.get('tools')})")
    missing = preflight.import_problems(report, "评分内核（kernel）", paths, str(settings.config_file))
    missing += preflight.import_problems(
        report.get("oracle", {}), "oracle 进程（oracle driver）", paths, str(settings.config_file)
    )
    if missing or failures:
        for handle in sandbox.leases:
            handle.close()
        raise preflight.ProbeFailure(failures + missing, mode)
    if problems:
        for handle in sandbox.leases:
            handle.close()
        raise RuntimeError(f"no usable kernel sandbox ({mode}: {problems[0]})")
    sandbox.probe = report
    return sandbox
