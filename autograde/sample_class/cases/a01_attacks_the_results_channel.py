"""Worked answers (nb01) whose first answer cell also attacks the way results come back to the grader.
The kernel's results FIFO is one of its descriptors (the grader made the FIFO in a folder no sandbox sees and opened
it itself): the cell finds every descriptor open for writing on a FIFO above stderr and writes a forged results
line of 12 MB to it (longer than any line the grader parses: skipped with a reason), tries to reach the grader's
runtime folder through ``/proc`` (not in the view) and plants symlinks to the grading seed and ``/proc/1/cmdline``
in its working folder (the grader reads no file a sandbox can write), and writes a stream of control characters to
stderr. The answers are right and nothing reaches the grader: 17 of 17, status graded."""
ATTACK = '''
import os as _os
import stat as _stat


def _attack_the_results_channel():
    forged = b'{"case": "forged", "status": "returned", "value": [' + b"7," * (6 * 2**20) + b'7]}\\n'
    for name in _os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd < 3 or not _stat.S_ISFIFO(_os.fstat(fd).st_mode):
                continue
            with open(f"/proc/self/fdinfo/{fd}") as info:
                flags = int(info.read().split("flags:")[1].split()[0], 8)
            if flags & 3 == _os.O_WRONLY:
                _os.write(fd, forged)
        except (OSError, ValueError, IndexError):
            pass
    for path in ("/proc/1/cwd", "/proc/1/root/tmp", "/proc/2/cwd"):  # bubblewrap's init and the zygote: root's
        try:
            _os.listdir(path)
        except OSError:
            pass
    for name, target in (("results.jsonl", "/proc/1/cmdline"), ("stderr.txt", "/work/autograde/.grading_seed")):
        try:
            _os.symlink(target, name)
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
