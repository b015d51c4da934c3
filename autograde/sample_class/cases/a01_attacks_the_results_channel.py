"""Worked answers (nb01) whose first answer cell also attacks the way results come back to the grader.
In the oracle's driver (``sys.argv`` = driver, job folder, results fd) it tries to replace the job folder's
``results.jsonl`` and ``stderr.txt`` by symlinks to the grading seed and ``/proc/1/cmdline``, a FIFO and a
directory (the job folder is read-only: nothing is created, and the grader reads no file there anyway), writes
a forged results line of 12 MB straight to the results pipe (longer than any line the grader parses: skipped
with a reason) and a stream of control characters to stderr. The answers are right and nothing reaches the
grader: 17 of 17, status graded."""
ATTACK = '''
import os as _os
import sys as _sys


def _attack_the_results_channel():
    if len(_sys.argv) != 3 or not _sys.argv[2].isdigit():
        return  # the learner's kernel (nbgrader): nothing to attack here
    job = _sys.argv[1]
    for name, target in (("results.jsonl", "/proc/1/cmdline"), ("stderr.txt", "/work/autograde/.grading_seed"),
                         ("seed", "/root/.grading_seed")):
        try:
            _os.unlink(_os.path.join(job, name))
        except OSError:
            pass
        try:
            _os.symlink(target, _os.path.join(job, name))
        except OSError:
            pass
    for make in (lambda: _os.mkfifo(_os.path.join(job, "results.jsonl")),
                 lambda: _os.mkdir(_os.path.join(job, "results.jsonl"))):
        try:
            make()
        except OSError:
            pass
    forged = b'{"case": "forged", "status": "returned", "value": [' + b"7," * (6 * 2**20) + b'7]}\\n'
    try:
        _os.write(int(_sys.argv[2]), forged)
    except OSError:
        pass
    try:
        _os.write(2, b"\\x1b[2J\\x07" * 10000 + b"\\n")
    except OSError:
        pass


_attack_the_results_channel()


'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"compute_group_advantages": [
        ("def compute_group_advantages(", ATTACK + "def compute_group_advantages("),
    ]}},
}
