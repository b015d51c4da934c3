"""Per-job caps (autograde/grpo_grader/job_caps.py): a job - a process and everything it forks - is stopped when it
reaches its task or memory cap, with the reason, while a job of the same run that stays below finishes; under caps
raised above the workload the same jobs run to the end (the mutation: the caps, not the workload, stop them). Real
cgroups where this machine gives them (root; CI), the ``rlimit`` watcher everywhere. About a second each.

The whole pipeline with the caps (the sample class's fork bomb ``j1`` and memory hog ``j2`` graded beside the other
learners, as root and as an unprivileged grader) is in tests/test_autograde_class.py and tests/test_autograde_trust.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograde.grpo_grader import job_caps, sandbox
from autograde.grpo_grader.uids import lease_uids

# A job: joins its cgroups and sets its limits as a launcher does (sandbox._limits), writes its pid file, then forks FORKS
# sleeping children (retrying a fork that fails) each holding MIB MiB, and says so once they have all existed for a
# second.
JOB = """
import json, os, sys, time
sys.path.insert(0, {sandbox_dir!r})
from sandbox import _limits
spec = json.loads(sys.argv[1])
_limits(spec)
with open(spec["pidfile"], "w") as handle:
    json.dump({{"supervisor": os.getpid()}}, handle)
started = 0
while started < {forks}:
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end); os.close(write_end)
        time.sleep(0.01)
        continue
    if pid == 0:
        block = b"\\x01" * ({mib} * 2**20)
        os.write(write_end, b"1")
        time.sleep(60 + 0 * len(block))
        os._exit(0)
    os.close(write_end)
    started += os.read(read_end, 1) == b"1"
    os.close(read_end)
time.sleep(1.0)  # holding it all for a second (a watcher looks every POLL_SECONDS)
with open(spec["pidfile"] + ".done", "w") as handle:
    handle.write("all started")
os._exit(0)
"""


def _start(spec: dict, forks: int, mib: int, uid: int | None, sandbox_dir: Path) -> subprocess.Popen:
    code = JOB.format(sandbox_dir=str(sandbox_dir), forks=forks, mib=mib)
    become = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if uid is not None else []
    return subprocess.Popen(
        [*become, sys.executable, "-c", code, json.dumps(spec)],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def _finish(process: subprocess.Popen, pidfile: Path, timeout: float = 30) -> str:
    """What the job wrote once all its children existed ("" if it was stopped before); its children killed."""
    try:
        process.wait(timeout=timeout)
    finally:
        try:
            os.killpg(process.pid, 9)  # the sleeping children of a job that finished
        except ProcessLookupError:
            pass
    done = Path(f"{pidfile}.done")
    return done.read_text() if done.exists() else ""


def _run_jobs(caps: job_caps.JobCaps, jobs: dict[str, tuple[int, int]]) -> dict[str, tuple[str, str]]:
    """Each named job (forks, MiB per child) in a slot of its own of ``caps``, all at once: {name: (reason, what it
    wrote)}. Without a cgroup each job runs as a leased uid of its own, as a root grader's jobs do (RLIMIT_NPROC
    counts per uid)."""
    slots, processes, uids = {}, {}, {}
    handles = []
    if caps.mechanism.name == "rlimit":
        leased, handles = lease_uids(62000, len(jobs))
        uids = dict(zip(jobs, leased))
    folder = Path(tempfile.mkdtemp(prefix="grpo-job-caps-"))  # (pytest's tmp_path is private to its owner)
    folder.chmod(0o777)
    # the jobs import sandbox.py from here: a leased uid may not traverse the checkout's path (a mktemp clone)
    shutil.copy(sandbox.__file__, folder / "sandbox.py")
    (folder / "sandbox.py").chmod(0o644)
    try:
        for name, (forks, mib) in jobs.items():
            pidfile = folder / f"{name}.pid"
            uid = uids.get(name)
            slots[name] = caps.slot(name, {"kernel": uid}, {"kernel": pidfile})
            spec = {**slots[name].spec("kernel", {}), "pidfile": str(pidfile)}
            slots[name].begin()
            processes[name] = _start(spec, forks, mib, uid, folder)
        out = {name: _finish(process, folder / f"{name}.pid") for name, process in processes.items()}
        return {name: (slots[name].end(), out[name]) for name in jobs}
    finally:
        for handle in handles:
            handle.close()
        shutil.rmtree(folder, ignore_errors=True)


def _mechanism(setting: str) -> job_caps.Mechanism:
    if setting == "rlimit":
        if os.geteuid() != 0:
            pytest.skip("jobs under uids of their own need root (the unprivileged path: test_autograde_trust.py)")
        return job_caps.choose("rlimit")
    return _cgroups_here()


def _cgroups_here() -> job_caps.Mechanism:
    mechanism = job_caps.choose()
    if not mechanism.name.startswith("cgroup"):
        pytest.skip(f"no cgroup for the grader here: {mechanism.why}")
    return mechanism


@pytest.mark.parametrize("setting", ["cgroup", "rlimit"])
def test_a_job_at_its_cap_is_stopped_with_the_reason_and_the_others_finish(setting, tmp_path):
    mechanism = _mechanism(setting)
    caps = job_caps.JobCaps(mechanism, memory_bytes=96 * 2**20, max_tasks=24)
    try:
        result = _run_jobs(
            caps,
            {"bomb": (60, 1), "hog": (8, 24), "honest": (3, 8)},  # 60 tasks; 8 x 24 MiB = 192 MiB; 3 x 8 MiB
        )
    finally:
        caps.close()
    assert result["bomb"][0] == job_caps.process_reason(24) and "all started" not in result["bomb"][1]
    assert result["hog"][0] == job_caps.memory_reason(96 * 2**20) and "all started" not in result["hog"][1]
    assert result["honest"] == (None, "all started")
    assert "job process cap" in result["bomb"][0] and "job memory cap" in result["hog"][0]
    for folder in caps.run_folders.values():  # the run's cgroups are gone with it
        assert not folder.exists()


@pytest.mark.parametrize("setting", ["cgroup", "rlimit"])
def test_the_same_jobs_run_to_the_end_under_caps_above_them(setting, tmp_path):
    """The mutation of the test above: with caps above the workload nothing is stopped, so there it was the caps."""
    mechanism = _mechanism(setting)
    caps = job_caps.JobCaps(mechanism, memory_bytes=1024 * 2**20, max_tasks=512)
    try:
        result = _run_jobs(caps, {"bomb": (60, 1), "hog": (8, 24)})
    finally:
        caps.close()
    assert result == {"bomb": (None, "all started"), "hog": (None, "all started")}


def test_a_sandbox_spec_carries_the_caps_of_its_kind(tmp_path, monkeypatch):
    """As root a spec names the job's cgroups and RLIMIT_NPROC (above pids.max beside a cgroup, so that the cgroup
    refuses and counts the fork); an unprivileged grader's bubblewrap sets the task cap inside the job's own user
    namespace (prlimit after `--`), where the kernel counts that namespace's tasks apart."""
    caps = job_caps.JobCaps(job_caps.choose("rlimit"), memory_bytes=2**30, max_tasks=100)
    slot = caps.slot("slot0", {"kernel": 61000}, {"kernel": tmp_path / "k"})
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert slot.spec("kernel", {"AS": 1}) == {"job_cgroups": [], "rlimits": {"AS": 1, "NPROC": 100}}
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    spec = slot.spec("kernel", {"AS": 1})
    assert spec["in_userns"][1:] == ["--nproc=100", "--"] and "rlimits" not in spec
    view = {"system": [], "system_files": [], "devices": [], "scratch": [], "keep": [], "workdir_size": 1}
    args = sandbox.bwrap_args({**view, **spec, "bwrap": "bwrap", "workdir": "/w", "uid": None})
    assert args[-4:] == ["--", spec["in_userns"][0], "--nproc=100", "--"] and args[-3].endswith("prlimit")
    caps.close()


def test_the_mechanism_is_a_cgroup_only_for_root_and_says_why_not(monkeypatch):
    assert job_caps.choose("rlimit").name == "rlimit"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    chosen = job_caps.choose()
    assert chosen.name == "rlimit" and "not root" in chosen.why
    assert "RLIMIT_NPROC" in chosen.describe(2**30, 64) and "64 tasks per job" in chosen.describe(2**30, 64)


def test_a_zygote_gets_its_cgroups_as_descriptors(tmp_path):
    """A zygote cannot see /sys/fs/cgroup: it inherits each cgroup.procs opened for writing, and a job forked from it
    writes itself into them (here a plain file stands for cgroup.procs)."""
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    spec, fds = job_caps.for_zygote({"job_cgroups": [str(procs)], "other": 1})
    try:
        assert spec["other"] == 1 and spec["job_cgroups"] == fds and all(isinstance(fd, int) for fd in fds)
        pid = os.fork()
        if pid == 0:
            sandbox._limits({"job_cgroups": [os.dup(fds[0])]})
            os._exit(0)
        os.waitpid(pid, 0)
        assert procs.read_text() == "0"
    finally:
        for fd in fds:
            os.close(fd)
