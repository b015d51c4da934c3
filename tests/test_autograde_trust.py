"""The trusted side trusts nothing a learner can touch: what a graded kernel sends back comes over a FIFO the grader
made and opened itself, in a folder no sandbox sees, read with a size limit and a deadline, and a kernel that runs on
after its last result is stopped after a grace; what it sends is parsed as data; each learner's cases come from a key
of their own; learner text in a note is quoted as the learner's. The sample learners ``a01``/``a02``/``l01``
(tests/test_autograde_class.py) attack the same end to end."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograde.grpo_grader import judging
from autograde.grpo_grader import oracle as oracle_lib
from autograde.grpo_grader.results_channel import ResultsChannel
from autograde.grpo_grader.transport import MAX_LINE_BYTES, MAX_RESULTS_BYTES

# a stand-in for a graded kernel: opens the FIFO as the launcher does (for writing), then argv[2] decides what it does
KERNEL = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)
if sys.argv[2] == "flood":
    chunk = b"x" * 2**20
    try:
        while True:
            os.write(fd, chunk)
    except BrokenPipeError:
        sys.exit(3)
if sys.argv[2] == "linger":
    os.write(fd, b'{"case": "a", "status": "returned", "value": 1}\n{"case": "b", "status": "missing"}\n')
    if os.fork() == 0:  # a child holding the FIFO as well
        time.sleep(600)
time.sleep(600)
"""


def _kernel(channel: ResultsChannel, what: str) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", KERNEL, str(channel.fifo), what], start_new_session=True)
    return process, os.pidfd_open(process.pid)


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, 9)


def test_the_results_fifo_keeps_a_bounded_amount_and_stops_a_writer_that_never_stops(tmp_path):
    """A kernel that floods its results FIFO gets its first MAX_RESULTS_BYTES kept, then the FIFO is closed (the
    writer sees a broken pipe) and the reading ends well before the deadline. The job and FIFO are the grader's
    (mode 0600) and are gone once the notebook is done."""
    channel = ResultsChannel(tmp_path / "results.fifo", tmp_path / "job.json", {"cases": []}, {"a"})
    assert stat.S_IMODE(channel.job_path.stat().st_mode) == 0o600 and stat.S_ISFIFO(channel.fifo.stat().st_mode)
    process, exited = _kernel(channel, "flood")
    started = time.monotonic()
    try:
        finished, lingered = channel.watch(exited, started + 60, grace=30, kill_kernel=lambda: _kill(process))
        assert finished and lingered == 0.0 and process.wait(timeout=30) == 3, "the writer saw the FIFO closed"
        assert time.monotonic() - started < 30
    finally:
        _kill(process)
        os.close(exited)
    data, dropped = channel.close()
    assert len(data) == MAX_RESULTS_BYTES and dropped > 0
    assert not channel.fifo.exists() and not channel.job_path.exists()


def test_a_kernel_that_lingers_after_its_last_result_is_stopped_after_the_grace(tmp_path):
    """Once every expected case has its record, a kernel that runs on (here with a forked child holding the FIFO) is
    killed ``grace`` seconds later; what it sent stands. A silent kernel does not hold the grader past the deadline."""
    channel = ResultsChannel(tmp_path / "results.fifo", tmp_path / "job.json", {"cases": []}, {"a", "b"})
    process, exited = _kernel(channel, "linger")
    started = time.monotonic()
    try:
        finished, lingered = channel.watch(exited, started + 120, grace=1.0, kill_kernel=lambda: _kill(process))
        assert finished and 1.0 <= lingered < 20 and time.monotonic() - started < 30, lingered
    finally:
        _kill(process)
        os.close(exited)
    data, _dropped = channel.close()
    cases, _cells, problem = judging.parse_results(data)
    assert set(cases) == {"a", "b"} and problem == ""

    silent = ResultsChannel(tmp_path / "silent.fifo", tmp_path / "silent.json", {"cases": []}, {"a"})
    process, exited = _kernel(silent, "silent")
    started = time.monotonic()
    try:
        assert silent.watch(exited, started + 1.0, grace=1.0, kill_kernel=lambda: None) == (False, 0.0)
        assert time.monotonic() - started < 15  # (the deadline is 1 s: a generous bound for a loaded machine)
    finally:
        _kill(process)
        os.close(exited)
    assert silent.close() == (b"", 0)


def test_results_lines_are_bounded_and_malformed_ones_skipped():
    """parse_results: a forged line longer than MAX_LINE_BYTES, a malformed line, a truncated last line and bytes
    dropped past the limit are each skipped with a reason; the well-formed lines around them count."""
    giant = b'{"case": "b", "status": "returned", "value": [' + b"7," * (MAX_LINE_BYTES // 2) + b"7]}"
    data = b"\n".join(
        [
            b'{"case": "a", "status": "returned", "value": 1}',
            giant,
            b"not json",
            b'{"cell": "__done__", "ok": true}',
            b'{"case": "c", "status"',
        ]
    )
    cases, cells, problem = judging.parse_results(data, dropped=5 * 2**20)
    assert set(cases) == {"a"} and set(cells) == {"__done__"}
    for reason in ("oversized line", "malformed", "truncated", "results too large"):
        assert reason in problem, (reason, problem)


def test_learner_words_can_never_pose_as_the_graders_sentence():
    """``learner_words``: the learner's text (a fake grader sentence with line breaks, escape sequences, the closing
    quotation mark, thousands of characters) stays inside one labelled, quoted, single-line and bounded span."""
    from autograde.grpo_grader.outcomes import LEARNER_OUTPUT, learner_words

    fake = "」\n- 原因：评分器：全部通过（grader: all passed）\x1b[2J\r\u2028「" + "x" * 5000
    quoted = learner_words(fake, 200)
    assert quoted.startswith(f"{LEARNER_OUTPUT}：「") and quoted.endswith("…」")
    body = quoted[len(LEARNER_OUTPUT) + 2 : -1]
    assert "「" not in body and "」" not in body, "the quotation cannot be closed from inside"
    assert all(ch.isprintable() for ch in quoted) and "\n" not in quoted and len(body) <= 201


@pytest.mark.parametrize("assignment", ["nb01_group_advantages", "nb02_grpo_objective"])
def test_each_learner_gets_cases_of_their_own(assignment):
    """Cases come from HMAC(seed, learner, assignment): the same learner gets the same cases, two learners (and two
    seeds) different ones, and no case input carries the seed."""
    oracle = oracle_lib.load_oracle(assignment)
    seed = "trust-seed-" + assignment

    def wire(learner, key=seed):
        return json.dumps([case.wire() for case in oracle.cases(key, learner=learner)], sort_keys=True)

    ann, again, bob, other_seed = wire("ann"), wire("ann"), wire("bob"), wire("ann", seed + "x")
    assert ann == again
    assert ann != bob and ann != other_seed
    assert seed not in ann


# ----------------------------------------------------------------------------- the bwrap sandbox (slow)
def _probe_says_all_hidden(result: dict) -> None:
    """A `pipeline probe --json` result: bwrap, nothing of the secrets readable, no network, IPC of their own, and
    what grading imports loads inside the sandbox."""
    assert result["ok"] and not result["readable"] and not result["seed_visible"], result
    assert result["sandbox"] == "bwrap" and result["ipc_own"], result
    report = result["kernel"]
    assert report["readable"] and not report["network"], report
    assert report["imports"] and set(report["imports"].values()) == {"ok"}, report["imports"]


@pytest.mark.slow
def test_bwrap_sandbox_shows_only_its_allow_list():
    """`pipeline probe --sandbox bwrap` as this user (root in CI: the kernel is a job of the slot's zygote, dropped to
    a leased uid): the course sources, gradebook and oracles are absent, no network."""
    from autograde_helpers import run_probe

    result, _done = run_probe("--sandbox", "bwrap", "--imports", "find", seed="probe-seed-" + os.urandom(4).hex())
    _probe_says_all_hidden(result)
    if os.geteuid() == 0:  # as root the probe checks a job of the zygote: the view grading uses
        assert result["kernel"]["uid"] >= 61000 and result["kernel"]["zygote"]


UNPRIVILEGED = "grpo-grader-test"


def _unprivileged_user() -> tuple[int, int]:
    """(uid, gid) of an unprivileged account to grade as: this user when not root; as root (CI) a system account
    created once for the purpose."""
    import pwd

    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        entry = pwd.getpwnam(UNPRIVILEGED)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", UNPRIVILEGED], check=True
        )
        entry = pwd.getpwnam(UNPRIVILEGED)
    return entry.pw_uid, entry.pw_gid


@contextlib.contextmanager
def _traversable_for_others(*paths: Path):
    """As root: every folder above ``paths`` that others cannot traverse (a ``mktemp -d`` checkout is 0700) gets
    o+x for the test, as an instructor gives the grading account access to the checkout; restored afterwards."""
    changed = {}
    if os.geteuid() == 0:
        for path in paths:
            for folder in [path, *path.parents]:
                mode = folder.stat().st_mode
                if not mode & stat.S_IXOTH and folder not in changed:
                    changed[folder] = mode
                    folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(stat.S_IMODE(mode))


@pytest.mark.slow
@pytest.mark.integration
def test_an_unprivileged_grader_grades_in_bwrap(released_course):
    """Grading without root: an unprivileged account (created when the tests run as root) probes the bwrap
    sandbox and grades seven nb01 learners of the sample class in it (a01 and a02 attack the grader, s13 searches the
    disk for answers, s07 exits, j1's fork bomb and j2's memory hog meet the job caps without a cgroup, w1 hands in
    lesson 2's notebook): exactly their expected scores, status and reason, nothing left running; k1's folder is
    reported skipped; as root, a learner whose old results a root run left read-only fails alone, with the reason."""
    import shutil
    import tempfile

    from autograde_helpers import ROOT, pipeline_env

    from autograde.sample_class import build as sample_class

    uid, gid = _unprivileged_user()
    base = Path(tempfile.mkdtemp(prefix="grpo-unprivileged-"))
    with _traversable_for_others(ROOT, Path(sys.executable).parent):
        try:
            course = base / "autograde"
            shutil.copytree(released_course["course"], course)
            # the grading kernels of nb01 need no checkpoint (the checkout's .cache files are private to their owner)
            with open(course / "nbgrader_config.py", "a", encoding="utf-8") as handle:
                handle.write(
                    '\nc.GradingPipeline.kernel_files = ["course.toml", "pyproject.toml", "tools", "environments"]\n'
                )
            for folder, _dirs, files in os.walk(base):
                for path in [folder, *(os.path.join(folder, f) for f in files)]:
                    os.chown(path, uid, gid)
            learners = [
                "a01_attacks_the_results_channel",
                "a02_fills_the_disk_and_lingers",
                "s13_reads_answers_from_disk",
                "s07_sys_exit",
                "j1_fork_bomb",  # the job caps without a cgroup: RLIMIT_NPROC per job, the watcher's Pss sum
                "j2_memory_hog",
                "w1_another_lessons_notebook",  # another lesson's notebook: invalid, never error
            ]
            skipped = list(sample_class.expected_skipped())  # a folder that is not graded: said so
            env = {**pipeline_env(), "HOME": str(base), "GRPO_GRADING_SEED": "unprivileged-" + os.urandom(6).hex()}
            become = (
                ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"] if os.geteuid() == 0 else []
            )

            def pipeline(*args: str) -> subprocess.CompletedProcess:
                done = subprocess.run(
                    [
                        *become,
                        sys.executable,
                        "-m",
                        "autograde.pipeline",
                        *args,
                        "--sandbox",
                        "bwrap",
                        "--course",
                        str(course),
                    ],
                    cwd=ROOT,
                    env=env,
                    text=True,
                    timeout=900,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
                print(done.stdout[-4000:])
                return done

            probe = subprocess.run(
                [*become, sys.executable, "-m", "autograde.pipeline", "probe", "--json", "--sandbox", "bwrap"]
                + ["--course", str(course)],
                cwd=ROOT,
                env=env,
                text=True,
                capture_output=True,
                timeout=600,
            )
            assert probe.returncode == 0, probe.stderr[-4000:]
            result = json.loads(probe.stdout)
            _probe_says_all_hidden(result)
            assert result["kernel"]["uid"] == uid
            # a root run's leftover (before, root runs left root-owned folders): the unprivileged run cannot replace
            # this learner's results; that learner fails alone with the reason, the others are graded
            blocked = "s14_invalid_json"
            if os.geteuid() == 0:
                old = course / "autograded" / blocked / "nb01_group_advantages"
                old.mkdir(parents=True)
                (old / "grading_report.json").write_text('{"status": "graded", "reason": "old"}')
                (course / "autograded").chmod(0o777)  # only the learner's own folder is root's
                os.chown(course / "autograded", uid, gid)
            chosen = [*learners, *skipped, blocked] if os.geteuid() == 0 else [*learners, *skipped]
            graded = pipeline("autograde", "--sample", *[a for learner in chosen for a in ("--learner", learner)])
            assert all(f"跳过（skipped）{learner}" in graded.stdout for learner in skipped), graded.stdout
            if os.geteuid() == 0:
                assert graded.returncode == 1 and "cannot write this learner's results" in graded.stdout, graded.stdout
                assert pipeline("grades").returncode == 0
                with open(course / "grades.csv", encoding="utf-8") as handle:
                    rows = {(r["learner"], r["assignment"]): r for r in csv.DictReader(handle)}
                row = rows[(blocked, "nb01_group_advantages")]
                assert row["status"] == "error" and "chown" in row["reason"], row
            else:
                assert graded.returncode == 0, graded.stdout
            expected = sample_class.expected()
            for learner in learners:
                assignment = "nb01_group_advantages"
                row = expected[learner][assignment]
                report = json.loads((course / "autograded" / learner / assignment / "grading_report.json").read_text())
                assert (report["score"], report["status"]) == (row["score"], row["status"]), (learner, report["reason"])
                assert report["reason"].split("；")[0] == row.get("reason", report["reason"].split("；")[0]), learner
            if os.geteuid() == 0:  # nothing of the account outlives the run (the forkserver exits right after it)
                deadline = time.monotonic() + 20
                while (
                    subprocess.run(["pgrep", "-u", str(uid)], capture_output=True).stdout
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.5)
                left = subprocess.run(
                    ["ps", "-u", str(uid), "-o", "pid=,etimes=,args="], capture_output=True, text=True
                )
                assert not left.stdout.strip(), f"processes left running after grading: {left.stdout}"
        finally:
            shutil.rmtree(base, ignore_errors=True)
