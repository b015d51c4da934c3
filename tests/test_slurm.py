"""A real scheduler: a single-node Slurm cluster (munged, slurmctld, slurmd of Debian's slurm-wlm, started here
with a configuration of their own) grades three learners of the sample class as a 3-task job array of
autograde/slurm_grade.sh (`make autograde SHARD=$((SLURM_ARRAY_TASK_ID+1))/3`), then `make merge-shards` and
`make grades`: grades.csv holds the sample class's hand-written scores. Skipped, with the reason, where Slurm and
munge are not installed (`apt-get install slurm-wlm munge`) or the test does not run as root (slurmd needs it)."""

from __future__ import annotations

import csv
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from autograde_helpers import pipeline_env  # tests/autograde_helpers.py

from autograde.grpo_grader import sample as sample_class

ROOT = Path(__file__).resolve().parents[1]
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")
ASSIGNMENT = "nb01_group_advantages"
LEARNERS = ("s11_visible_fixture_values", "s04_bug_only_hidden_tests_catch", "s01_worked_answers")  # shards 1, 2, 3


def _missing() -> str | None:
    absent = [name for name in DAEMONS if not (shutil.which(name) or Path(f"/usr/sbin/{name}").exists())]
    if absent:
        return f"Slurm / munge not installed ({', '.join(absent)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "slurmd runs jobs as their users only as root: run the test as root (CI does)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@pytest.fixture()
def slurm_cluster(tmp_path):
    """munged + slurmctld + slurmd on this machine, in ``tmp_path``; yields the environment that reaches them."""
    folder = tmp_path / "slurm"
    (folder / "munge").mkdir(parents=True)
    (folder / "state").mkdir()
    (folder / "spool").mkdir()
    key = folder / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    sock = folder / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    conf = folder / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=grpotest",
                f"SlurmctldHost={host}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                f"AuthInfo=socket={sock}",
                "CredType=cred/munge",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"StateSaveLocation={folder / 'state'}",
                f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}",
                f"SlurmctldLogFile={folder / 'slurmctld.log'}",
                f"SlurmdLogFile={folder / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SlurmdParameters=config_overrides",
                "ReturnToService=2",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                f"PlugStackConfig={folder / 'plugstack.conf'}",
                f"NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN",
                "PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        ),
        encoding="utf-8",
    )
    (folder / "plugstack.conf").write_text("", encoding="utf-8")
    env = dict(pipeline_env(), SLURM_CONF=str(conf))
    daemons = []
    logs = []

    def start(*command):
        log = open(folder / f"{Path(command[0]).name}.out", "w")
        logs.append(log)
        daemons.append(subprocess.Popen(list(command), env=env, stdout=log, stderr=subprocess.STDOUT))

    try:
        start(
            _binary("munged"),
            "-F",
            "-f",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={folder / 'munge' / 'munged.pid'}",
            f"--seed-file={folder / 'munge' / 'seed'}",
            f"--log-file={folder / 'munge' / 'munged.log'}",
        )
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        start(_binary("slurmctld"), "-D", "-i")  # slurmd after munged and slurmctld
        time.sleep(1)
        start(_binary("slurmd"), "-D")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if state.stdout.strip() == "idle":
                break
            time.sleep(1)
        else:
            pytest.fail(
                "the Slurm node did not become idle:\n" + "\n".join(p.read_text()[-1500:] for p in folder.glob("*.out"))
            )
        yield env
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
        for daemon in reversed(daemons):
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        for log in logs:
            log.close()


@pytest.mark.slow
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_slurm_job_array_grades_like_the_sample_class_expects(slurm_cluster, released_course, tmp_path):
    course = tmp_path / "autograde"
    shutil.copytree(released_course["course"], course, ignore=shutil.ignore_patterns("submitted", "shards"))
    for learner in LEARNERS:
        shutil.copytree(sample_class.SUBMITTED / learner / ASSIGNMENT, course / "submitted" / learner / ASSIGNMENT)
    env = dict(slurm_cluster, GRPO_GRADING_SEED="slurm-" + secrets.token_hex(4), ARGS=f"--course {course} --workers 1")
    started = time.monotonic()
    done = subprocess.run(
        [
            "sbatch",
            "--array=0-2",
            "--wait",
            f"--output={tmp_path}/task_%a.log",
            str(ROOT / "autograde" / "slurm_grade.sh"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    logs = "\n".join(f"--- {p.name}\n" + p.read_text()[-2500:] for p in sorted(tmp_path.glob("task_*.log")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    shards = sorted(p.name for p in (course / "shards").iterdir())
    assert shards == ["1-of-3", "2-of-3", "3-of-3"], (shards, logs)  # each task graded its own learner
    for command in ("merge-shards", "grades"):
        merged = subprocess.run(
            [sys.executable, "-m", "autograde.pipeline", command, "--course", str(course)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert merged.returncode == 0, merged.stdout + merged.stderr
    assert not (course / "shards").exists() or not any((course / "shards").iterdir())
    with open(course / "grades.csv", encoding="utf-8") as handle:
        rows = {(r["learner"], r["assignment"]): r for r in csv.DictReader(handle)}
    expected = sample_class.expected()
    for learner in LEARNERS:
        row, want = rows[(learner, ASSIGNMENT)], expected[learner][ASSIGNMENT]
        assert (float(row["score"]), row["status"]) == (float(want["score"]), want["status"]), (learner, row, logs)
    print(f"3-task Slurm array graded {len(LEARNERS)} learners in {time.monotonic() - started:.1f} s; shards {shards}")
