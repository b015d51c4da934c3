"""Per-job caps: the memory and the number of tasks of one job - a grading kernel (it runs the oracle's cases too), with
everything it forks - bounded as a whole, and a job that reaches a cap stopped with a reason.

``RLIMIT_AS`` (``GradingPipeline.memory_limit_mb``) bounds each process only: a learner's cell that forks a hundred
children, each below the limit, could take the machine. A run chooses one mechanism (``choose``):

``cgroup2`` (root, the unified hierarchy with the memory and pids controllers): a cgroup per slot (its kernel job)
    under ``/sys/fs/cgroup/grpo-grading-<pid>/`` with ``memory.max`` (``memory.swap.max`` 0,
    ``memory.oom.group`` 1) and ``pids.max``. A slot runs one job at a time and every job's processes are
    gone before the next starts (killed by its zygote's cleaner, or with its own bubblewrap), so the cgroup holds one
    job at a time: a cgroup per job.
``cgroup1`` (root, the memory and pids hierarchies, as on this project's CI machine): the same folders in each
    hierarchy, under the grader's own cgroup there; ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``
    where swap is accounted) and ``pids.max``.
``rlimit`` (not root: no cgroup to create without delegation; or ``c.GradingPipeline.job_caps = "rlimit"``): the
    task cap is ``RLIMIT_NPROC``, which counts per user: as root each job has its slot's leased uid, and an
    unprivileged grader's jobs each run in a user namespace of their own, where the kernel (5.14 and later) counts
    that namespace's tasks apart (``prlimit`` sets it inside bubblewrap, after the namespace exists). Memory: each
    process is bounded by ``RLIMIT_AS``; the job as a whole by this module's watcher, which adds up its processes'
    proportional set sizes (``Pss``, shared pages split between sharers) every ``POLL_SECONDS`` and stops it above
    the cap: an allocation between two looks can overshoot by what it touches in that time (each process still
    below ``RLIMIT_AS``); the job's tmpfs (working folder, ``/tmp``...) is bounded by its sizes only.

A job joins its cgroups before any learner code runs: the launcher of a fresh sandbox writes itself into them (their
``cgroup.procs``, opened on the host) before it becomes bubblewrap; a zygote gets them as descriptors (``for_zygote``)
and each forked job writes itself into them first (``sandbox._limits``). Everything a job forks stays
there. The watcher (one thread per run) looks at every running job every ``POLL_SECONDS``: a cgroup's ``oom_kill``
or ``pids.events`` ``max`` count that grew, or (``rlimit``) a job holding ``job_max_processes`` tasks or more
memory than its cap, stops the job (every process of it killed); ``SlotCaps.end`` gives the reason, and the notebook
keeps the points it earned before, as after any death of its kernel or driver.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
POLL_SECONDS = 0.2
KINDS = ("kernel",)  # the jobs of a slot: nbgrader's kernel (it also runs the oracle's cases)
MIB = 2**20


def memory_reason(cap_bytes: int) -> str:
    return f"内存超过每个作业的上限 {cap_bytes // MIB} MiB，作业已被终止，之前得到的分数保留（job memory cap）"


def process_reason(cap: int) -> str:
    return f"进程数超过每个作业的上限 {cap} 个（含线程），作业已被终止，之前得到的分数保留（job process cap）"


# ----------------------------------------------------------------------------- reading /proc and /sys
def _read(path: Path | str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _counter(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file (``memory.events``, ``pids.events``, ``memory.oom_control``)."""
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _own_cgroup(controller: str) -> str:
    """This process's cgroup in the v1 hierarchy of ``controller`` (``0::`` for the unified one)."""
    for line in _read("/proc/self/cgroup").splitlines():
        _id, names, path = line.split(":", 2)
        if (controller == "" and _id == "0") or controller in names.split(","):
            return path
    return "/"


def _processes() -> dict[int, tuple[int, int, int]]:
    """{pid: (parent pid, uid, tasks)} of every process this one can see."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            fields = _read(f"/proc/{entry}/stat").rsplit(")", 1)[1].split()
            found[int(entry)] = (int(fields[1]), uid, int(fields[17]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _pss(pid: int) -> int:
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ----------------------------------------------------------------------------- the mechanism of a run
@dataclass
class Mechanism:
    name: str  # cgroup2 | cgroup1 | rlimit
    parents: dict[str, Path] = field(default_factory=dict)  # controller ("" for cgroup2) -> where the run folder goes
    why: str = ""  # why not a cgroup (rlimit)

    def describe(self, memory_bytes: int, tasks: int) -> str:
        caps = f"{memory_bytes // MIB} MiB, {tasks} tasks per job"
        if self.name == "cgroup2":
            return f"job caps: cgroup v2 (memory.max, pids.max) - {caps}"
        if self.name == "cgroup1":
            return f"job caps: cgroup v1 (memory, pids) - {caps}"
        return (
            f"job caps: RLIMIT_NPROC per job and the watcher's sum of each job's Pss - {caps} ({self.why}); "
            "each process also under RLIMIT_AS"
        )


def _unified() -> bool:
    return (CGROUP_ROOT / "cgroup.controllers").is_file()


def choose(setting: str = "auto") -> Mechanism:
    """The mechanism this machine allows (``setting`` ``rlimit`` asks for no cgroup)."""
    if setting == "rlimit":
        return Mechanism("rlimit", why="c.GradingPipeline.job_caps = 'rlimit'")
    if os.geteuid() != 0:
        return Mechanism("rlimit", why="not root: no cgroup of our own to create (no delegation)")
    if _unified():
        available = set(_read(CGROUP_ROOT / "cgroup.controllers").split())
        if set(CONTROLLERS) <= available:
            return Mechanism("cgroup2", {"": CGROUP_ROOT})
        return Mechanism("rlimit", why=f"cgroup v2 without the {' and '.join(CONTROLLERS)} controllers")
    parents = {}
    for controller in CONTROLLERS:
        top = CGROUP_ROOT / controller
        if not (top / "cgroup.procs").is_file():
            return Mechanism("rlimit", why=f"no cgroup v1 {controller} hierarchy at {top}")
        parents[controller] = top / _own_cgroup(controller).lstrip("/")
    return Mechanism("cgroup1", parents)


# ----------------------------------------------------------------------------- one job kind of one slot
class JobGroup:
    """The cgroups (or, ``rlimit``, the uid or launcher) of one kind of job in one slot, and what its jobs did."""

    def __init__(self, caps: JobCaps, name: str, uid: int | None, pidfile: Path) -> None:
        self.caps, self.name, self.uid, self.pidfile = caps, name, uid, pidfile
        self.folders: dict[str, Path] = {}
        self.active = False
        self.hit: str | None = None
        self._start: dict[str, int] = {}
        if caps.mechanism.name.startswith("cgroup"):
            self._make()

    def _make(self) -> None:
        memory, tasks = self.caps.memory_bytes, self.caps.max_tasks
        for controller, run in self.caps.run_folders.items():
            folder = run / self.name
            folder.mkdir(exist_ok=True)
            self.folders[controller] = folder
        if self.caps.mechanism.name == "cgroup2":
            folder = self.folders[""]
            for name, value in (
                ("memory.max", memory),
                ("memory.swap.max", 0),
                ("memory.oom.group", 1),
                ("pids.max", tasks),
            ):
                if (folder / name).exists():
                    (folder / name).write_text(str(value))
        else:
            memory_folder, pids_folder = self.folders["memory"], self.folders["pids"]
            (memory_folder / "memory.limit_in_bytes").write_text(str(memory))
            if (memory_folder / "memory.memsw.limit_in_bytes").exists():  # swap accounted: no swap beyond the cap
                (memory_folder / "memory.memsw.limit_in_bytes").write_text(str(memory))
            (pids_folder / "pids.max").write_text(str(tasks))

    # -- what a sandbox spec carries
    def procs_files(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders.values()]

    # -- the counters
    def _counters(self) -> dict[str, int]:
        if self.caps.mechanism.name == "cgroup2":
            folder = self.folders[""]
            return {
                "memory": _counter(folder / "memory.events", "oom_kill"),
                "pids": _counter(folder / "pids.events", "max"),
            }
        if self.caps.mechanism.name == "cgroup1":
            return {
                "memory": _counter(self.folders["memory"] / "memory.oom_control", "oom_kill"),
                "pids": _counter(self.folders["pids"] / "pids.events", "max"),
            }
        return {}

    def _members(self, table: dict[int, tuple[int, int, int]]) -> list[int]:
        """``rlimit``: the job's processes - its uid's (root: a leased uid per slot and kind), else the descendants
        of its launcher (each unprivileged job is a bubblewrap of its own)."""
        if self.uid is not None and os.geteuid() == 0:
            return [pid for pid, (_parent, uid, _tasks) in table.items() if uid == self.uid]
        try:
            import json

            launcher = int(json.loads(_read(self.pidfile))["supervisor"])
        except (ValueError, KeyError, TypeError):
            return []
        children: dict[int, list[int]] = {}
        for pid, (parent, _uid, _tasks) in table.items():
            children.setdefault(parent, []).append(pid)
        found, todo = [], list(children.get(launcher, []))
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def begin(self) -> None:
        self.hit = None
        self._start = self._counters()
        self.active = True

    def poll(self, table: dict[int, tuple[int, int, int]] | None) -> None:
        """Look once; stop the job when it reached a cap."""
        if not self.active or self.hit:
            return
        if self.caps.mechanism.name.startswith("cgroup"):
            now = self._counters()
            if now.get("memory", 0) > self._start.get("memory", 0):
                self.hit = memory_reason(self.caps.memory_bytes)
            elif now.get("pids", 0) > self._start.get("pids", 0):
                self.hit = process_reason(self.caps.max_tasks)
            if self.hit:
                self.stop()
            return
        members = self._members(table or {})
        if members:
            if sum(table[pid][2] for pid in members) >= self.caps.max_tasks:
                self.hit = process_reason(self.caps.max_tasks)
            elif sum(_pss(pid) for pid in members) > self.caps.memory_bytes:
                self.hit = memory_reason(self.caps.memory_bytes)
            if self.hit:
                _kill(members)

    def stop(self) -> None:
        """Kill every process of the job (a cgroup's members, until none is left)."""
        if self.caps.mechanism.name == "cgroup2" and (self.folders[""] / "cgroup.kill").exists():
            try:
                (self.folders[""] / "cgroup.kill").write_text("1")
                return
            except OSError:
                pass
        for _ in range(100):
            pids = {int(p) for folder in self.folders.values() for p in _read(folder / "cgroup.procs").split()}
            if not pids:
                return
            _kill(pids)
            time.sleep(0.01)

    def end(self) -> str | None:
        """The reason the job was stopped (None: it stayed within its caps); the job's counters stop here."""
        if self.active and not self.hit:
            self.poll(_processes() if not self.folders else None)
        self.active = False
        return self.hit

    def remove(self) -> None:
        self.active = False
        if self.folders:
            self.stop()
        _remove_folders(self.folders.values())


class SlotCaps:
    """The caps of one slot's jobs (one kind: the kernel's)."""

    def __init__(self, caps: JobCaps, slot: str, uids: dict[str, int | None], pidfiles: dict[str, Path]) -> None:
        self.caps = caps
        self.groups = {kind: JobGroup(caps, f"{slot}-{kind}", uids.get(kind), pidfiles[kind]) for kind in KINDS}

    def spec(self, kind: str, rlimits: dict) -> dict:
        """What a sandbox spec of ``kind`` carries for its jobs: the cgroups to join (``job_cgroups``, their
        ``cgroup.procs``) and the task cap: ``RLIMIT_NPROC`` in ``rlimits`` for a root grader (it counts the slot's
        leased uid), ``in_userns`` for an unprivileged one (``prlimit``, which bubblewrap runs inside each job's user
        namespace before the job's command)."""
        import shutil

        group = self.groups[kind]
        # beside a cgroup, RLIMIT_NPROC stays above pids.max: the cgroup refuses the fork first and counts it
        nproc = self.caps.max_tasks + 16 if group.folders else self.caps.max_tasks
        if os.geteuid() == 0:
            return {"job_cgroups": group.procs_files(), "rlimits": {**rlimits, "NPROC": nproc}}
        return {"job_cgroups": [], "in_userns": [shutil.which("prlimit") or "prlimit", f"--nproc={nproc}", "--"]}

    def begin(self) -> None:
        for group in self.groups.values():
            group.begin()
        self.caps.wake()

    def end(self) -> str | None:
        """The reason a job of this notebook was stopped at a cap, or None."""
        reasons = [group.end() for group in self.groups.values()]
        return next((reason for reason in reasons if reason), None)


class JobCaps:
    """The caps of a run: its mechanism, the run's cgroup folders, the watcher thread."""

    def __init__(self, mechanism: Mechanism, memory_bytes: int, max_tasks: int) -> None:
        self.mechanism, self.memory_bytes, self.max_tasks = mechanism, memory_bytes, max_tasks
        self.run_folders: dict[str, Path] = {}
        self.slots: list[SlotCaps] = []
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if mechanism.name.startswith("cgroup"):
            self._make_run_folders()

    def _make_run_folders(self) -> None:
        name = f"grpo-grading-{os.getpid()}"
        for controller, parent in self.mechanism.parents.items():
            _remove_stale(parent)
            folder = parent / name
            folder.mkdir(exist_ok=True)
            self.run_folders[controller] = folder
            if controller == "":  # cgroup2: the slots' cgroups get both controllers
                (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))

    def describe(self) -> str:
        return self.mechanism.describe(self.memory_bytes, self.max_tasks)

    def slot(self, name: str, uids: dict[str, int | None], pidfiles: dict[str, Path]) -> SlotCaps:
        caps = SlotCaps(self, name, uids, pidfiles)
        self.slots.append(caps)
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="job-caps", daemon=True)
            self._thread.start()
        return caps

    def wake(self) -> None:
        self._wake.set()

    def _watch(self) -> None:
        while not self._closed.is_set():
            groups = [g for slot in list(self.slots) for g in slot.groups.values() if g.active]
            if not groups:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            table = _processes() if self.mechanism.name == "rlimit" else None
            for group in groups:
                try:
                    group.poll(table)
                except OSError:
                    pass
            self._closed.wait(POLL_SECONDS)

    def close(self) -> None:
        """Stop watching, kill what is left in the run's cgroups and remove them."""
        self._closed.set()
        self._wake.set()
        for slot in self.slots:
            for group in slot.groups.values():
                group.remove()
        _remove_folders(self.run_folders.values())


def _remove_stale(parent: Path) -> None:
    """The empty cgroup folders of grading runs whose process is gone (a run that was killed)."""
    for folder in parent.glob("grpo-grading-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_folders([p for p in folder.iterdir() if p.is_dir()] + [folder])


def _remove_folders(folders) -> None:
    """Remove each (empty) cgroup folder; one that still holds a process stays."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def open_caps(setting: str, memory_bytes: int, max_tasks: int) -> JobCaps:
    """The run's caps: the mechanism ``setting`` (``auto`` | ``rlimit``) allows here; a cgroup mechanism that fails
    to set up falls back to ``rlimit`` with the reason."""
    mechanism = choose(setting)
    try:
        return JobCaps(mechanism, memory_bytes, max_tasks)
    except OSError as error:
        why = f"{mechanism.name} could not be set up: {error}"
        return JobCaps(Mechanism("rlimit", why=why), memory_bytes, max_tasks)


# ----------------------------------------------------------------------------- a zygote's descriptors
def for_zygote(spec: dict) -> tuple[dict, list[int]]:
    """A zygote's spec with its jobs' cgroups opened here (it cannot see ``/sys/fs/cgroup``): ``job_cgroups`` becomes
    the descriptors the zygote inherits (``pass_fds``), which each forked job writes itself into. Close the returned
    descriptors once the zygote has started."""
    fds = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in spec.get("job_cgroups") or ()]
    return {**spec, "job_cgroups": fds}, fds
