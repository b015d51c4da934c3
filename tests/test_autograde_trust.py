"""The trusted side trusts nothing a learner can touch (issue 26): what a sandboxed driver sends back is read over
pipes the grader opened, with a size limit and a deadline; a results file (tests, drivers run by hand) is opened
without following links or blocking on FIFOs; notes carry only sanitised text; each learner's cases come from a
key of their own. The sample learners ``a01``/``a02`` (tests/test_autograde_class.py) attack the same end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

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
        cases, cells, problem = oracle_lib.read_results(path)
        assert reason in problem, (path.name, problem)
        assert path is big or cases == cells == {}, path.name
    assert time.monotonic() - started < 5, "no read may block"
    cases, _cells, problem = oracle_lib.read_results(secret)  # the same file, not through a link: read
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
    cases, cells, problem = oracle_lib.parse_results(data, dropped=5 * 2**20)
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
