"""A single-node Slurm cluster for one test: munged, slurmctld and slurmd started as root in a private folder.

Debian's ``slurm-wlm`` and ``munge`` (``.ci/run`` installs them with apt). Everything the daemons write lives
in the folder given (config, key, state, spool, logs, pid files, munge's socket), the daemons listen on free
loopback ports, and ``stop()`` shuts them down, so the machine's own Slurm or munge (if any) is not touched.
``unavailable()`` says why a cluster cannot be started here (missing binaries, not root), or "".
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")


def unavailable() -> str:
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a private single-node Slurm cluster needs root (slurmd runs jobs as their submitting users)"
    return ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Cluster:
    def __init__(self, folder: Path, cpus: int = 2):
        self.folder = folder
        self.cpus = cpus
        self.node = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.munge_socket = folder / "munge" / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's commands (sbatch, squeue, ...) that talks to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_files(self) -> None:
        for name in ("munge", "state", "spool", "log"):
            (self.folder / name).mkdir(mode=0o755, parents=True, exist_ok=True)
        key = self.folder / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        settings = {
            "ClusterName": "grpo-test",
            "SlurmctldHost": self.node,
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "AuthType": "auth/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "StateSaveLocation": self.folder / "state",
            "SlurmdSpoolDir": self.folder / "spool",
            "SlurmctldPidFile": self.folder / "slurmctld.pid",
            "SlurmdPidFile": self.folder / "slurmd.pid",
            "SlurmctldPort": _free_port(),
            "SlurmdPort": _free_port(),
            "SlurmctldLogFile": self.folder / "log" / "slurmctld.log",
            "SlurmdLogFile": self.folder / "log" / "slurmd.log",
            "ProctrackType": "proctrack/linuxproc",
            "TaskPlugin": "task/none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_CPU",
            "ReturnToService": 2,
            "MpiDefault": "none",
            "JobCompType": "jobcomp/none",
            "AccountingStorageType": "accounting_storage/none",
        }
        lines = [f"{key}={value}" for key, value in settings.items()]
        lines.append(f"NodeName={self.node} CPUs={self.cpus} State=UNKNOWN")
        lines.append("PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES")
        self.conf.write_text("\n".join(lines) + "\n")

    def start(self, timeout: float = 30.0) -> None:
        self._write_files()
        munge = self.folder / "munge"
        subprocess.run(
            ["munged", "--force", f"--socket={self.munge_socket}", f"--key-file={munge / 'munge.key'}",
             f"--log-file={self.folder / 'log' / 'munged.log'}", f"--pid-file={munge / 'munged.pid'}",
             f"--seed-file={munge / 'munged.seed'}"],
            check=True,
        )  # fmt: skip
        subprocess.run(["slurmctld", "-c"], env=self.env, check=True)
        subprocess.run(["slurmd", "-c"], env=self.env, check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if done.returncode == 0 and done.stdout.strip() in ("idle", "mix", "alloc"):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the test cluster did not come up in {timeout:.0f} s: {self.logs()}")

    def logs(self) -> str:
        parts = []
        for path in sorted((self.folder / "log").glob("*.log")):
            parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """``scontrol shutdown`` (both Slurm daemons), then SIGTERM and SIGKILL for whatever still runs."""
        subprocess.run(["scontrol", "shutdown"], env=self.env, capture_output=True)
        slurm = _pids(self.folder / "slurmd.pid", self.folder / "slurmctld.pid")
        munge = _pids(self.folder / "munge" / "munged.pid")
        for signal_number, pids in ((0, slurm), (15, slurm + munge), (9, slurm + munge)):
            alive = []  # 0: give the shutdown time; then ask (munged has no other stop); then insist
            for pid in pids:
                try:
                    os.kill(pid, signal_number)
                    alive.append(pid)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while alive and time.monotonic() < deadline:
                alive = [pid for pid in alive if _running(pid)]
                time.sleep(0.1)
            gone = set(pids) - set(alive)
            slurm = [pid for pid in slurm if pid not in gone]
            munge = [pid for pid in munge if pid not in gone]


def _pids(*pidfiles: Path) -> list[int]:
    pids = []
    for pidfile in pidfiles:
        try:
            pids.append(int(pidfile.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
