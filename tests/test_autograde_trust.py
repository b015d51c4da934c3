"""The trusted side trusts nothing a learner can touch: what a sandboxed driver sends back is read over
pipes the grader opened, with a size limit and a deadline; a results file (tests, drivers run by hand) is opened
without following links or blocking on FIFOs; notes carry only sanitised text; each learner's cases come from a
key of their own. The sample learners ``a01``/``a02`` (tests/test_autograde_class.py) attack the same end to end."""

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
from autograde.grpo_grader.transport import MAX_LINE_BYTES, MAX_RESULTS_BYTES, BoundedPipe, pump, sanitise


def test_results_files_are_never_followed_blocked_on_or_read_whole(tmp_path):
    """read_results: a symlink (to a secret), a FIFO without a writer, a directory, a missing file and a file
    larger than the limit each give a problem at once - never an exception, a hang or the target's contents."""
    secret = tmp_path / "seed"
    secret.write_text('{"case": "a", "status": "returned", "value": 1}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as handle:
        handle.write(b'{"case": "a", "status": "returned", "value": 1}\n')
        handle.truncate(MAX_RESULTS_BYTES + 2**20)
    started = time.monotonic()
    for path, reason in [
        (link, "no results"),
        (fifo, "not a regular file"),
        (folder, "not a regular file"),
        (tmp_path / "missing.jsonl", "no results"),
        (big, "too large"),
    ]:
        cases, cells, problem = judging.read_results(path)
        assert reason in problem, (path.name, problem)
        assert path is big or cases == cells == {}, path.name
    assert time.monotonic() - started < 5, "no read may block"
    cases, _cells, problem = judging.read_results(secret)  # the same file, not through a link: read
    assert cases["a"]["value"] == 1 and problem == ""


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


def test_pipes_keep_a_bounded_amount_and_stop_a_writer_that_never_stops():
    """BoundedPipe + pump: a writer that floods the results pipe gets its first MAX_RESULTS_BYTES kept, then the pipe
    is closed (the writer sees a broken pipe) and the reading ends well before the deadline; a stderr pipe keeps
    only its sanitised tail."""
    results, errors = BoundedPipe(MAX_RESULTS_BYTES), BoundedPipe(4096, tail=True)
    code = (
        "import os, sys\n"
        "os.write(2, b'\\x1b[2J\\x07 noise\\n' * 1000 + b'last line \\x00 here\\n')\n"
        "chunk = b'x' * 2**20\n"
        "try:\n"
        "    while True:\n"
        "        os.write(int(sys.argv[1]), chunk)\n"
        "except BrokenPipeError:\n"
        "    sys.exit(3)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(results.write_fd)], pass_fds=(results.write_fd,), stderr=errors.write_fd
    )
    results.close_writer()
    errors.close_writer()
    started = time.monotonic()
    assert pump([results, errors], started + 60)
    assert process.wait(timeout=30) == 3, "the writer saw the pipe closed"
    assert time.monotonic() - started < 30
    assert len(results.data) == MAX_RESULTS_BYTES and results.dropped > 0
    assert len(errors.data) <= 4096 and errors.text().endswith("last line  here")
    assert "\x1b" not in errors.text() and "\x07" not in errors.text()
    results.close()
    errors.close()


def test_pump_gives_up_at_the_deadline_on_a_silent_writer():
    """A process that holds the pipe open and writes nothing does not hold the grader past the deadline."""
    pipe = BoundedPipe(1024)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(pipe.write_fd,))
    pipe.close_writer()
    started = time.monotonic()
    try:
        assert not pump([pipe], started + 1.0)
        assert time.monotonic() - started < 3
    finally:
        process.kill()
        process.wait()
        pipe.close()


def test_sanitise_keeps_printable_text_of_the_last_two_lines():
    assert sanitise(b"one\ntwo\x1b[31m\nthree \x07four\n\n") == "two[31m three four"
    assert len(sanitise(("x" * 1000).encode())) == 200


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
    for report in (result["kernel"], result["oracle"]):
        assert report["readable"] and not report["network"], report
        assert report["imports"] and set(report["imports"].values()) == {"ok"}, report["imports"]


@pytest.mark.slow
def test_bwrap_sandbox_shows_only_its_allow_list():
    """`pipeline probe --sandbox bwrap` as this user (root in CI: kernel and driver are jobs of their zygotes, each
    dropped to a leased uid of its own): the course sources, gradebook, oracles and the other sandbox's sockets are
    absent, no network."""
    from autograde_helpers import run_probe

    result, _done = run_probe("--sandbox", "bwrap", "--imports", "find", seed="probe-seed-" + os.urandom(4).hex())
    _probe_says_all_hidden(result)
    kernel, oracle = result["kernel"]["uid"], result["oracle"]["uid"]
    if os.geteuid() == 0:  # as root the probe checks a job of each zygote: the view grading uses
        assert kernel != oracle and kernel >= 61000
        assert result["kernel"]["zygote"] and result["oracle"]["zygote"]


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
