"""Run a command as an unprivileged account where ``user.max_user_namespaces`` is 0 - for that command only.

    python tests/userns_limit.py UID GID -- COMMAND...   (as root)

The limit is per user namespace and holds for every namespace below: this process enters a user namespace of its
own (every uid mapped to itself, so files and accounts look as outside), sets the limit there to 0, drops to
``UID``/``GID`` and runs ``COMMAND``, which then cannot create a user namespace (``ENOSPC``), exactly as on a machine
with ``sysctl -w user.max_user_namespaces=0``, while the rest of the machine (other tests) keeps its limit.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000


def main(argv: list[str]) -> int:
    uid, gid = int(argv[0]), int(argv[1])
    command = argv[argv.index("--") + 1 :]
    ready_read, ready_write = os.pipe()
    mapped_read, mapped_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_read)
        os.close(mapped_write)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, f"unshare: {os.strerror(ctypes.get_errno())}\n".encode())
            os._exit(97)
        os.write(ready_write, b"x")
        if os.read(mapped_read, 1) != b"x":
            os._exit(97)
        with open("/proc/sys/user/max_user_namespaces", "w") as knob:
            knob.write("0")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        os.execvp(command[0], command)
    os.close(ready_write)
    os.close(mapped_read)
    if os.read(ready_read, 1) == b"x":
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{child}/{name}", "w") as handle:
                handle.write("0 0 4294967295\n")
        os.write(mapped_write, b"x")
    _pid, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
