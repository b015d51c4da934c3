"""Grading slots: one private nbgrader course and one kernel sandbox per parallel worker.

A slot is a folder under the run's temporary base folder::

    slotK/nbgrader/    nbgrader course root: nbgrader_config.py (loads the course's), gradebook.db (a copy
                       of the course gradebook without learners), submitted/<learner>/, autograded/<learner>/
    slotK/kernel/      what the kernel may read: course.toml + tools/ (copied from the checkout); read-only
                       for the kernel
    slotK/kernel/work/ the kernel's working folder and HOME, fresh for every notebook
    slotK/jupyter/     kernels/python3/kernel.json -> sandbox.py (JUPYTER_PATH points here)
    slotK/runtime/     connection files, the sandbox spec and the kernel's pid file

Each slot grades one learner at a time with ``nbgrader autograde`` in its own course, so slots never
share a SQLite file; the pipeline merges the results into the course gradebook, one learner at a time.
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
from dataclasses import dataclass, field
from pathlib import Path

from . import nbgrader_forkserver
from . import probe as preflight
from .course import AUTOGRADE, ROOT, GradingPipeline, prepare_kernel_files, venv_env
from .transport import DRAIN_SECONDS, MAX_RESULTS_BYTES, STDERR_TAIL_BYTES, BoundedPipe, DriverRun, pump, read_capped

SANDBOX_SCRIPT = Path(__file__).resolve().parent / "sandbox.py"
SCRATCH = [["/tmp", "256m"], ["/var/tmp", "16m"], ["/dev/shm", "64m"]]
WORKDIR_SIZE = "256m"   # the kernel's private working folder (and HOME), a tmpfs of its own
NEVER_HIDE = {"/", "/usr", "/usr/local", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev",
              "/var", "/opt", "/tmp", "/run", "/boot", "/srv", "/mnt", "/media", "/home"}

def visible_lessons(assignment: str) -> list[str]:
    """The saved lesson modules a grading kernel of ``assignment`` may import: those of earlier lessons (by name)."""
    return sorted(path.stem for path in (ROOT / "tools" / "lessons").glob("nb*.py") if path.stem < assignment)


# ----------------------------------------------------------------------------- what to hide
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


SYSTEM_TOP = {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sys", "/dev",
              "/var", "/run", "/boot", "/tmp"}
PRUNE = {".git", ".venv", "venv", "node_modules", "site-packages", "__pycache__", ".cache", "proc"}


def other_checkouts(max_depth: int = 4) -> set[Path]:
    """Other copies of the course on this machine (a folder holding ``course.toml``), found by a shallow
    walk of the non-system top-level folders and the home folder: a clone the grader does not know of
    (another checkout, a CI clone, a download) would otherwise expose its solutions to the kernel."""
    found: set[Path] = set()
    roots = {str(Path.home())}
    try:
        roots.update(entry.path for entry in os.scandir("/") if entry.is_dir(follow_symlinks=False)
                     and entry.path not in SYSTEM_TOP)
    except OSError:
        pass
    for root in sorted(roots):
        base_depth = root.rstrip("/").count("/")
        for folder, dirs, files in os.walk(root, onerror=lambda _error: None):
            if "course.toml" in files:
                found.add(Path(folder))
                dirs[:] = []
                continue
            if folder.count("/") - base_depth >= max_depth:
                dirs[:] = []
            else:
                dirs[:] = [d for d in dirs if d not in PRUNE]
    return found


def hidden_paths(settings: GradingPipeline, base: Path) -> list[str]:
    """Folders covered by an empty tmpfs in the kernel's view.

    Every course checkout the grader can find (this one, its git worktrees, the one holding the
    virtual environment), the git object store, the nbgrader course (gradebook, sources, other learners'
    work), the run's grading folder, the home folders, and ``hidden_paths`` from the config.
    """
    found = {ROOT, settings.course, base, Path.home(), Path("/root")}
    for line in _git(["worktree", "list", "--porcelain"]):
        if line.startswith("worktree "):
            found.add(Path(line.split(" ", 1)[1]))
    for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]):
        found.add(Path(line.strip()))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        found.add(venv_checkout)
    found.update(other_checkouts())
    found.update(Path(p) for p in settings.hidden_paths)
    out = set()
    for path in found:
        try:
            real = str(path.resolve())
        except OSError:
            continue
        if real not in NEVER_HIDE and os.path.isdir(real):
            out.add(real)
    return sorted(out)


def secret_probe_paths(settings: GradingPipeline, slot_db: Path) -> list[str]:
    """Paths a sandboxed kernel must not be able to read (checked by the probe)."""
    paths = [ROOT / "solutions", settings.course / "gradebook.db", settings.course / "source",
             settings.course / "autograded", settings.course / "submitted", AUTOGRADE / "sample_class", slot_db,
             AUTOGRADE / "grpo_grader" / "oracles", settings.course / ".grading_seed", AUTOGRADE / ".grading_seed"]
    paths += sorted((ROOT / "solutions").glob("*.py"))[:1]
    for line in _git(["rev-parse", "--path-format=absolute", "--git-common-dir"]):
        paths.append(Path(line.strip()))
    venv_checkout = _checkout_of(Path(sys.prefix).resolve())
    if venv_checkout:
        paths.append(venv_checkout / "solutions")
    return [str(p) for p in paths if p.exists()]


# ----------------------------------------------------------------------------- processes
def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            members.append(int(entry))
    return members


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
    mode: str                     # bwrap | isolated | userns | none
    hide: list[str]
    uids: list[int] = field(default_factory=list)   # isolated: one leased uid per slot
    probe: dict = field(default_factory=dict)      # what a kernel sees; "oracle": what the driver beside it sees
    problems: list[str] = field(default_factory=list)
    leases: list = field(default_factory=list)      # open lock files holding the uids
    # folders outside the virtual environment the interpreter's sys.path needs (probe.interpreter_paths): bound
    # read-only into every sandbox ("bind"), the ones a kernel does not find itself on its PYTHONPATH ("pythonpath")
    paths: dict = field(default_factory=dict)

    def describe(self) -> str:
        if self.mode == "bwrap":
            who = f"uid {', '.join(map(str, self.uids))}" if self.uids else "the grader's uid in a user namespace"
            return (f"bwrap: kernels run as {who} in bubblewrap's allow-list view (interpreter, virtual environment, "
                    f"course copy, private tmpfs), private mount/PID/IPC/network namespaces")
        if self.mode == "isolated":
            return (f"isolated: kernels run as uid {', '.join(map(str, self.uids))} in private mount/PID namespaces; "
                    f"{len(self.hide)} folders hidden (checkouts, gradebook, sources, homes)")
        if self.mode == "userns":
            return (f"userns: kernels run in private user/mount/PID namespaces without capabilities; "
                    f"{len(self.hide)} folders hidden (checkouts, gradebook, sources, homes)")
        return "none: kernels run as the grader's own user and can read whatever it can read"


class Slot:
    def __init__(self, base: Path, name: str, settings: GradingPipeline, sandbox: Sandbox, uid: int | None = None,
                 threads: int = 1, ipc: Path | None = None, oracle_uid: int | None = None, zygotes: bool = True):
        self.settings = settings
        self.zygotes = zygotes  # False: no zygote for this slot even where the settings allow one (one kernel only)
        self.sandbox = sandbox
        self.dir = base / name
        self.nbgrader = self.dir / "nbgrader"
        self.kernel = self.dir / "kernel"
        self.work = self.kernel / "work"
        self.runtime = self.dir / "runtime"
        self.jupyter = self.dir / "jupyter"
        self.ipc = ipc or (self.dir / "ipc")   # the kernel's unix sockets (the kernel has no network)
        self.spec_path = self.runtime / "sandbox.json"
        self.pidfile = self.runtime / "kernel.pid"
        self.oracle_pidfile = self.runtime / "oracle.pid"
        self.uid = uid
        # isolated mode: the oracle's driver runs as a uid of its own, so that it can run while nbgrader's kernel
        # does (run_oracle) and each can be killed without touching the other
        self.oracle_uid = oracle_uid if oracle_uid is not None else uid
        self.oracle_process = None
        self.zygote: subprocess.Popen | None = None
        self.zygote_channel = None  # the grader's end of the zygote's request socket
        self.kernel_zygote: subprocess.Popen | None = None
        self.kernel_socket = self.runtime / "kernel-zygote.sock"
        if len(os.fsencode(self.kernel_socket)) > 100:  # AF_UNIX paths are short: a private folder of its own
            self.kernel_socket = Path(tempfile.mkdtemp(prefix="grpo-kz-")) / "kernel-zygote.sock"
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
                shutil.copytree(source, self.kernel / name, symlinks=False,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints"))
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
        for folder in (self.nbgrader, self.runtime, self.jupyter / "kernels" / "python3", self.dir / "config",
                       self.dir / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        if self.uid is not None:
            self.kill_kernels()  # nothing of an earlier, crashed run may still run under these uids
            self.kill_oracle()
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
        if self.sandbox.mode == "isolated" or (self.sandbox.mode == "bwrap" and self.uid is not None):
            limits["NPROC"] = 512
        spec = {
            "mode": self.sandbox.mode, "python": python, "uid": self.uid, "gid": self.uid,
            "hide": self.sandbox.hide, "scratch": SCRATCH, "keep": keep,
            "course": str(self.kernel), "workdir": str(self.work), "pidfile": str(self.pidfile),
            "rlimits": limits, "threads": self.threads, "isolate_network": self.sandbox.mode != "none",
            "workdir_size": WORKDIR_SIZE, "env": {str(k): str(v) for k, v in self.settings.kernel_env.items()},
        }
        if self.sandbox.paths.get("pythonpath"):
            spec["env"]["PYTHONPATH"] = os.pathsep.join([str(self.kernel), *self.sandbox.paths["pythonpath"]])
        if self.sandbox.mode == "bwrap":
            spec.update(bwrap=shutil.which("bwrap") or "/usr/bin/bwrap", setpriv=shutil.which("setpriv") or "setpriv")
        if self.kernel_zygote_enabled:  # the launcher asks the slot's kernel zygote for the kernel (sandbox.py)
            spec["kernel_zygote"] = str(self.kernel_socket)
        self.spec_path.write_text(json.dumps(spec, indent=1))
        kernel_json = {
            "argv": [os.path.realpath(sys.executable), "-I", str(SANDBOX_SCRIPT), str(self.spec_path),
                     "-f", "{connection_file}"],
            "display_name": "Python 3 (grading sandbox)", "language": "python", "interrupt_mode": "signal",
            "metadata": {"debugger": False},
        }
        (self.jupyter / "kernels" / "python3" / "kernel.json").write_text(json.dumps(kernel_json, indent=1))
        config = (
            "# generated by autograde/grpo_grader/slots.py: the course's config, pointed at this slot\n"
            "c = get_config()  # noqa: F821\n"
            f"load_subconfig({str(self.settings.config_file)!r})  # noqa: F821\n"
            f"c.CourseDirectory.root = {str(self.nbgrader)!r}\n"
            f"c.CourseDirectory.db_url = {'sqlite:///' + str(self.nbgrader / 'gradebook.db')!r}\n"
            f"c.Execute.timeout = {int(self.settings.cell_timeout)}\n"
            "c.Execute.shutdown_kernel = 'immediate'  # outputs are in; kill_kernels() cleans up after nbgrader\n"
            "c.StripHiddenTests.enabled = True  # the oracle grades these test cells outside the kernel\n"
        )
        if self.sandbox.mode != "none":  # the kernel has no network: unix sockets in its working folder
            config += ('c.KernelManager.transport = "ipc"\n'
                       f"c.KernelManager.ip = {str(self.ipc / 'kernel')!r}\n")
        (self.nbgrader / "nbgrader_config.py").write_text(config)

    def reset_course(self, template_db: Path, assignments: list[str]) -> None:
        for name in ("submitted", "autograded", "source"):
            shutil.rmtree(self.nbgrader / name, ignore_errors=True)
        for assignment in assignments:
            (self.nbgrader / "source" / assignment).mkdir(parents=True, exist_ok=True)
        shutil.copy2(template_db, self.nbgrader / "gradebook.db")

    def reset_work(self) -> None:
        """A fresh working folder (in the namespace modes only a mount point for the kernel's own tmpfs)
        and an empty socket folder."""
        if self.sandbox.mode == "none":
            self._copy_kernel_files()  # the kernel could have written into its course copy
        for folder in (self.work, self.ipc):
            _empty_folder(folder)  # emptied, not replaced: a running kernel zygote's view binds the socket folder
            if self.uid is not None:
                os.chown(folder, self.uid, self.uid)
            os.chmod(folder, 0o700)

    # -- processes
    def env(self) -> dict[str, str]:
        return venv_env({
            "JUPYTER_PATH": str(self.jupyter),
            "JUPYTER_RUNTIME_DIR": str(self.runtime),
            "JUPYTER_CONFIG_DIR": str(self.dir / "config"),
            "JUPYTER_DATA_DIR": str(self.jupyter),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        })

    @property
    def concurrent_oracle(self) -> bool:
        """Whether the oracle's driver may run while nbgrader's kernel runs: in the namespace modes each has its
        own private working folder, /tmp and IPC namespace, and (isolated) its own uid; without a sandbox both
        would share the slot's working folder."""
        return self.sandbox.mode != "none" and (self.uid is None or self.oracle_uid != self.uid)

    def kill_kernels(self) -> None:
        """Kill what the last kernel left behind: the launcher, the kernel (and so its PID namespace)."""
        self._kill_sandboxed(self.pidfile, self.uid)

    def kill_oracle(self) -> None:
        """The same for the oracle's driver."""
        self._kill_sandboxed(self.oracle_pidfile, self.oracle_uid)

    def _kill_sandboxed(self, pidfile: Path, uid: int | None) -> None:
        pids: set[int] = set()
        try:
            record = json.loads(pidfile.read_text())
            pids = {int(record["supervisor"]), int(record["init"])}
        except (OSError, ValueError, KeyError):
            pass
        for pid in sorted(pids):
            if str(self.dir) in _cmdline(pid):
                if self.sandbox.mode == "none":
                    for member in _session_members(pid):
                        _kill(member)
                _kill(pid)
        pidfile.unlink(missing_ok=True)
        kill_uid_processes(uid)

    def _wait_or_kill(self, process: subprocess.Popen, timeout: float, cleanup=None) -> bool:
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
            (cleanup or self.kill_kernels)()
        return timed_out

    def run_nbgrader(self, assignment: str, learner: str, notebook: str, log: Path) -> tuple[int, bool, float]:
        """``nbgrader autograde`` of one notebook in this slot, killed as a whole at the hard limit."""
        if self.stopped:
            raise RuntimeError("grading was stopped")
        self.stage_lessons(assignment)
        self.ensure_kernel_zygote()
        arguments = ["autograde", assignment, f"--student={learner}", f"--notebook={notebook}", "--force",
                     "--log-level=INFO"]
        started = time.monotonic()
        if nbgrader_forkserver.available():  # forked from a process that has imported nbgrader already (nbgrader_forkserver.py)
            process = self.process = nbgrader_forkserver.start(arguments, str(self.nbgrader), self.env(), str(log))
            timed_out = self._wait_or_kill(process, self.settings.notebook_timeout)
        else:
            with open(log, "wb") as handle:
                process = self.process = subprocess.Popen(
                    [sys.executable, "-m", "nbgrader", *arguments], cwd=self.nbgrader, env=self.env(),
                    stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
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
        """The kernel's sandbox spec for the oracle's driver: its own uid and pid file, and the kernel's view
        without the kernel's socket folder (the driver needs none, and shares nothing with a kernel that may run
        at the same time), plus ``extra_keep``."""
        spec = json.loads(self.spec_path.read_text())
        spec.pop("kernel_zygote", None)
        spec["keep"] = [k for k in spec["keep"] if k[0] != str(self.ipc)] + extra_keep
        spec["uid"] = spec["gid"] = self.oracle_uid
        spec["pidfile"] = str(self.oracle_pidfile)
        return spec

    def _driver_spec(self, job_dir: Path) -> dict:
        spec = self._oracle_spec([[str(job_dir), "ro"]])  # the driver writes only to its private tmpfs folders
        spec["rlimits"] = {**spec["rlimits"], "FSIZE": 128 * 2**20}
        spec["env"] = {**spec.get("env", {}), "MPLBACKEND": "Agg"}
        return spec

    def _hand_over(self, job_dir: Path) -> None:
        """The job folder readable by the oracle's uid only (where there is one); the driver cannot write it."""
        if self.oracle_uid is not None:
            os.chown(job_dir, self.oracle_uid, self.oracle_uid)
        os.chmod(job_dir, 0o500)

    def oracle_job_dir(self) -> Path:
        """The oracle's job folder, emptied and the grader's again; the folder itself stays (a running zygote's view
        binds it)."""
        folder = self.dir / "oracle"
        if folder.exists():
            os.chown(folder, os.getuid(), os.getgid())
            os.chmod(folder, 0o700)
        _empty_folder(folder)
        return folder

    # -- the zygote (isolated mode): the driver forked per job from a sandboxed process that imported torch once
    @property
    def zygote_enabled(self) -> bool:
        return (self.zygotes and self.sandbox.mode == "isolated" and self.settings.oracle_zygote
                and self.oracle_uid is not None)

    def _launcher(self, name: str, spec: dict) -> list[str]:
        """The sandbox launcher's command line for ``spec``, written as ``runtime/<name>.json`` with an empty
        connection file beside it (only a kernel started by Jupyter has a real one)."""
        spec_path = self.runtime / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        connection = self.runtime / f"{name}-connection.json"
        connection.write_text("{}")
        return [os.path.realpath(sys.executable), "-I", str(SANDBOX_SCRIPT), str(spec_path), "-f", str(connection)]

    def _zygote_start(self, job_dir: Path, warm: bool = True) -> None:
        """The zygote reads one request per message on a socket only the grader holds the other end of; each request
        carries the job's results and stderr pipes (SCM_RIGHTS), and the answer (the job's exit code) comes back
        on the same socket."""
        import socket

        spec = self._driver_spec(job_dir)
        spec["zygote"] = True
        spec["warm"] = warm
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(self.runtime / "zygote-stderr.txt", "wb") as errors:
                self.zygote = self.oracle_process = subprocess.Popen(
                    self._launcher("zygote", spec), cwd=self.runtime, env=self.env(), stdin=theirs.fileno(),
                    stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.zygote_channel = ours

    def stop_zygote(self) -> None:
        """Stop both zygotes (the oracle's and the kernels')."""
        self._stop_oracle_zygote()
        self.stop_kernel_zygote()

    def _stop_oracle_zygote(self) -> None:
        _stop(self.zygote)
        self.zygote = None
        if self.zygote_channel is not None:
            self.zygote_channel.close()
            self.zygote_channel = None
        self.kill_oracle()

    def _run_in_zygote(self, job_dir: Path, timeout: float, warm: bool = True) -> DriverRun:
        """One job in the zygote; at ``timeout`` (or when it died) the zygote is killed with the job, and the next
        job starts a fresh one. Every process of the oracle's uid is killed after the job."""
        import socket

        started = time.monotonic()
        deadline = started + timeout
        if self.zygote is None or self.zygote.poll() is not None:
            self._stop_oracle_zygote()
            self._zygote_start(job_dir, warm)
        self._hand_over(job_dir)
        results, errors = BoundedPipe(MAX_RESULTS_BYTES), BoundedPipe(STDERR_TAIL_BYTES, tail=True)
        answer, timed_out = b"", False
        try:
            try:
                socket.send_fds(self.zygote_channel, [json.dumps({"job": str(job_dir)}).encode()],
                                [results.write_fd, errors.write_fd])
            finally:
                results.close_writer()
                errors.close_writer()
            channel = self.zygote_channel.fileno()
            if pump([results, errors], deadline, stop_fd=channel):
                answer = self.zygote_channel.recv(4096)
            else:
                timed_out = True
        except OSError:
            pass
        code = -1
        try:
            code = int(json.loads(answer)["exit"])
        except (ValueError, KeyError, TypeError):
            self._stop_oracle_zygote()
        else:
            kill_uid_processes(self.oracle_uid)  # the zygote has cleared its PID namespace; and anything else of the uid
        pump([results, errors], time.monotonic() + DRAIN_SECONDS)
        results.close()
        errors.close()
        tail = errors.text()
        if code == -1 and not timed_out:
            tail += read_capped(self.runtime / "zygote-stderr.txt", STDERR_TAIL_BYTES)
        return DriverRun(code, timed_out, time.monotonic() - started, tail, bytes(results.data), results.dropped)

    # -- the kernel zygote (isolated mode): nbgrader's kernels forked from a sandboxed process that imported
    # ipykernel, torch, matplotlib and transformers once; the kernel spec's launcher asks it over a unix socket
    @property
    def kernel_zygote_enabled(self) -> bool:
        return (self.zygotes and self.sandbox.mode == "isolated" and self.settings.kernel_zygote
                and self.uid is not None)

    def ensure_kernel_zygote(self, warm: bool = True) -> None:
        """Start the kernel zygote unless it runs (it is started once per slot; a dead one is replaced). ``warm``:
        False for a probe, whose zygote builds the same view but imports nothing."""
        if not self.kernel_zygote_enabled:
            return
        if self.kernel_zygote is not None and self.kernel_zygote.poll() is None:
            return
        self.stop_kernel_zygote()
        import socket

        spec = json.loads(self.spec_path.read_text())
        spec.pop("kernel_zygote")
        spec["zygote"] = "kernel"
        spec["warm"] = warm
        spec["pidfile"] = str(self.runtime / "kernel-zygote.pid")
        self.kernel_socket.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.bind(str(self.kernel_socket))
            os.chmod(self.kernel_socket, 0o600)
            listener.listen(16)
            with open(self.runtime / "kernel-zygote-stderr.txt", "wb") as errors:
                self.kernel_zygote = subprocess.Popen(
                    self._launcher("kernel-zygote", spec), cwd=self.runtime, env=self.env(),
                    stdin=listener.fileno(), stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True)
        finally:
            listener.close()  # the zygote holds it: when it dies, a launcher's connect fails at once

    def stop_kernel_zygote(self) -> None:
        _stop(self.kernel_zygote)
        self.kernel_zygote = None
        self.kernel_socket.unlink(missing_ok=True)
        if self.kernel_socket.parent.name.startswith("grpo-kz-"):
            shutil.rmtree(self.kernel_socket.parent, ignore_errors=True)

    def run_oracle(self, job_dir: Path, timeout: float) -> DriverRun:
        """Run ``driver.py`` on ``job_dir`` in this slot's sandbox (the kernel's view, with ``job_dir`` bound
        read-only and a smaller file-size limit); killed as a whole after ``timeout`` seconds. Its results and stderr
        come back over pipes the grader opened (never a file the sandbox could have replaced), read with a size
        limit and a deadline."""
        if self.stopped:
            raise RuntimeError("grading was stopped")
        if self.zygote_enabled:
            return self._run_in_zygote(job_dir, timeout)
        results, errors = BoundedPipe(MAX_RESULTS_BYTES), BoundedPipe(STDERR_TAIL_BYTES, tail=True)
        spec = self._driver_spec(job_dir)
        spec["command"] = [spec["python"], "-X", "utf8", str(job_dir / "driver.py"), str(job_dir),
                           str(results.write_fd)]
        command = self._launcher("oracle", spec)
        self._hand_over(job_dir)
        started = time.monotonic()
        try:
            process = self.oracle_process = subprocess.Popen(
                command, cwd=self.runtime, env=self.env(), stdout=subprocess.DEVNULL, stderr=errors.write_fd,
                pass_fds=(results.write_fd,), start_new_session=True)
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
        return DriverRun(process.returncode, timed_out, time.monotonic() - started, errors.text(),
                         bytes(results.data), results.dropped)

    def run_sandboxed_code(self, code: str, args: list[str], oracle: bool = False, zygote: bool = True,
                           timeout: float = 60, warm: bool = True) -> subprocess.CompletedProcess:
        """``python -c code args`` in this slot's kernel sandbox (a job of the kernel zygote where there is one and
        ``zygote``; else the launcher builds the same view itself), or in the oracle driver's (``oracle``: started
        afresh, not from its zygote); what it leaves is killed after."""
        spec = self._oracle_spec([]) if oracle else json.loads(self.spec_path.read_text())
        if oracle or not zygote:
            spec.pop("kernel_zygote", None)
        elif "kernel_zygote" in spec:
            self.ensure_kernel_zygote(warm)
        spec["command"] = [spec["python"], "-c", code, *args]
        try:
            return subprocess.run(self._launcher("probe", spec), capture_output=True, text=True, timeout=timeout,
                                  cwd=self.runtime, env=self.env())
        finally:
            if oracle:
                self.kill_oracle()
            else:
                self.kill_kernels()

    def probe(self, paths: list[str], oracle: bool = False, zygote: bool = True, imports: list[str] = (),
              import_mode: str = "find") -> dict:
        """Start the sandbox with the probe (probe.py) instead of a kernel (``oracle``: the oracle driver's sandbox;
        ``zygote``: as a job of the zygote where there is one, the view a kernel really gets, else the view the
        zygote's is built on); report what it can read and whether ``imports`` load (``import_mode``)."""
        request = json.dumps({"paths": paths, "oracle": oracle, "imports": list(imports), "import_mode": import_mode})
        if oracle and self.zygote_enabled:  # a job of the zygote: the view the driver really gets
            job = self.oracle_job_dir()
            (job / "driver.py").write_text(
                "import os, sys\n"
                "sys.stdout = os.fdopen(int(sys.argv[2]), 'w')\n"
                f"sys.argv = ['probe', {request!r}]\n" + preflight.source() + "sys.stdout.flush()\n")
            run = self._run_in_zygote(job, 120, warm=False)
            self._stop_oracle_zygote()
            self.oracle_job_dir()
            report = preflight.parse_output(run.results.decode(errors="replace"))
            if report is not None:
                return {**report, "zygote": True}
            raise RuntimeError(f"sandbox probe (zygote job) failed (exit {run.code}): {run.stderr.strip()[-800:]}")
        done = self.run_sandboxed_code(preflight.source(), [request], oracle, zygote, warm=False,
                                       timeout=60 if import_mode == "find" else 300)
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
    """isolated mode: the kernels' socket folders live on one small tmpfs for the run, so that the only
    place on disk a kernel may write to cannot fill the disk. Returns whether it was mounted."""
    from .sandbox import MS_NODEV, MS_NOSUID, mount

    folder.mkdir(parents=True, exist_ok=True)
    try:
        mount("tmpfs", str(folder), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=8m")
    except OSError:
        return False
    return True


def unmount(folder: Path) -> None:
    from .sandbox import _enc, _libc

    _libc.umount2(_enc(str(folder)), 2)  # MNT_DETACH


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid``, and ``pid`` itself (it may not lead its group yet)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(process: subprocess.Popen | None) -> None:
    """Kill a zygote's launcher and its process group, and reap it (its PID namespace dies with it)."""
    if process is None:
        return
    _kill_group(process.pid)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def kill_uid_processes(uid: int | None) -> None:
    """Kill every process of ``uid`` (a leased sandbox uid; None: nothing to do), in a helper that drops to it."""
    if uid is not None:
        subprocess.run([os.path.realpath(sys.executable), "-I", str(SANDBOX_SCRIPT), "--kill-uid", str(uid), str(uid)],
                       timeout=30, check=False)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


SANDBOX_MODES = ("bwrap", "isolated", "userns", "none")


def check_bwrap() -> None:
    """Raise ``probe.ProbeFailure`` naming the cause and the exact fix when bubblewrap cannot build a grading sandbox
    here: not installed; root without CAP_SYS_ADMIN or under a container's seccomp/AppArmor profile; not root where
    user namespaces are blocked (sysctl, Ubuntu 24.04's AppArmor restriction, a container)."""
    problems = preflight.namespace_problems(str(ROOT))
    if problems:
        raise preflight.ProbeFailure(problems, "bwrap")


def choose_sandbox(settings: GradingPipeline, base: Path, slots: int = 1, probe_driver: bool = False,
                   import_mode: str = "find") -> Sandbox:
    """Try the strongest sandbox this machine allows (or the configured one) and probe it (``probe_driver``: the
    oracle driver's view too, and in isolated mode each through a job of its zygote - `pipeline.py probe` does; a
    grading run only probes the kernel's view as the launcher builds it, which the zygotes' jobs are built on).

    The kernel files are built first when missing (the tiny checkpoint, lesson 7's warm start): every slot, the
    probe's included, copies them into its read-only course copy.

    The probe also tries what grading needs (probe.py): torch, ipykernel, nbformat and the graded lessons' imports
    (``import_mode`` ``find``: their top-level packages found on ``sys.path``, a grading run's cheap check;
    ``import``: each imported, `pipeline.py probe`); a failure raises ``probe.ProbeFailure`` naming cause and fix
    before any notebook is graded. The folders outside the virtual environment the interpreter's ``sys.path`` needs
    are bound read-only into the sandbox (``Sandbox.paths``)."""
    prepare_kernel_files(settings)
    hide = hidden_paths(settings, base)
    homes = [str(Path.home().resolve()), "/root"]
    shown = [str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve()), "/usr"]
    paths = preflight.interpreter_paths(shown, hide, homes, [str(p) for p in settings.extra_readonly_paths])
    imports = preflight.probe_imports(ROOT, top_level=import_mode == "find")
    failures: list[preflight.Problem] = [
        preflight.Problem("extra-path-refused", f"c.GradingPipeline.extra_readonly_paths 里的 {path} 不能放进沙箱："
                          f"{why}（refused）", "只列出装有 Python 包的目录（如某个 site-packages），不要列课程目录或它的上级目录")
        for path, why in paths["refused"].items() if path in settings.extra_readonly_paths]
    wanted = settings.sandbox
    if wanted == "auto":  # never falls back to "none" by itself: that must be asked for
        modes = ["isolated"] if os.geteuid() == 0 else ["userns"]
    elif wanted in SANDBOX_MODES:
        modes = [wanted]
    else:
        raise ValueError(f"GradingPipeline.sandbox must be auto or one of {', '.join(SANDBOX_MODES)}, not {wanted!r}")
    problems = []
    for mode in modes:
        sandbox = Sandbox(mode=mode, hide=[] if mode == "bwrap" else hide, paths=paths)  # bwrap: an allow-list
        probe_dir = base / "probe"
        slot = None
        try:
            if mode == "bwrap" or (mode == "userns" and shutil.which("bwrap")):  # userns: the same namespaces
                check_bwrap()
            if mode == "isolated" or (mode == "bwrap" and os.geteuid() == 0):
                # two per slot: nbgrader's kernel and the oracle's driver, which run side by side
                sandbox.uids, sandbox.leases = lease_uids(settings.sandbox_uid_base, 2 * slots)
            slot = Slot(base, "probe", settings, sandbox, uid=sandbox.uids[0] if sandbox.uids else None,
                        oracle_uid=sandbox.uids[1] if sandbox.uids else None)
            decoy = slot.nbgrader / "gradebook.db"
            decoy.write_text("decoy")
            # a grading run probes the view the zygotes' jobs are built on (their imports would cost seconds here)
            report = slot.probe(secret_probe_paths(settings, decoy), zygote=probe_driver, imports=imports,
                                import_mode=import_mode)
            if probe_driver and slot.concurrent_oracle:  # the driver beside the kernel: nor the kernel's sockets
                (slot.ipc / "kernel-socket").write_text("")
                report["oracle"] = slot.probe(secret_probe_paths(settings, decoy) + [str(slot.ipc)], oracle=True,
                                              imports=preflight.ALWAYS_IMPORTED[:1], import_mode=import_mode)
        except preflight.ProbeFailure as failure:  # the machine does not allow this mode: the cause and the fix
            failures += failure.problems
            problems.append(f"{mode}: " + "; ".join(problem.code for problem in failure.problems))
            for handle in sandbox.leases:
                handle.close()
            continue
        except Exception as error:  # this mode is not available here: try the next one
            problems.append(f"{mode}: {error}")
            for handle in sandbox.leases:
                handle.close()
            continue
        finally:
            if slot is not None:
                slot.stop_zygote()
            shutil.rmtree(probe_dir, ignore_errors=True)
        if not str(report.get("tools", "")).startswith(str(base)) and mode != "none":
            problems.append(f"{mode}: the kernel's course copy is not importable ({report.get('tools')})")
            continue
        missing = preflight.import_problems(report, "评分内核（kernel）", paths, str(settings.config_file))
        missing += preflight.import_problems(report.get("oracle", {}), "oracle 进程（oracle driver）", paths,
                                             str(settings.config_file))
        if missing or failures:
            for handle in sandbox.leases:
                handle.close()
            raise preflight.ProbeFailure(failures + missing, mode)
        sandbox.probe = report
        sandbox.problems = problems
        return sandbox
    if not failures and shutil.which("bwrap"):  # isolated/userns failed: name the machine's cause where there is one
        failures = preflight.namespace_problems(str(ROOT))
    if failures:
        raise preflight.ProbeFailure(failures, ", ".join(modes))
    where = ("where unprivileged user namespaces are allowed" if os.geteuid() == 0 else
             "as root (sudo -E make autograde) or where unprivileged user namespaces are allowed")
    raise RuntimeError(
        "no usable kernel sandbox (" + "; ".join(problems) + f"). Grade {where}; to grade without isolation anyway, "
        "pass --sandbox none or set c.GradingPipeline.sandbox = 'none' (kernels can then read the answers): "
        "see autograde/README.md")
