"""Leased sandbox uids: as root, each slot's kernels run as a uid of their own that no account owns, no process runs
as, and no other grading run on the machine holds."""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import tempfile
from pathlib import Path

UID_LOCKS = Path(tempfile.gettempdir()) / "grpo-grading-uids"


def _uid_taken(uid: int) -> bool:
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def _uids_running() -> set[int]:
    running = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                running.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                pass
    return running


def lease_uids(start: int, count: int) -> tuple[list[int], list]:
    """``count`` kernel uids that no account owns, no process runs as, and no other grading run holds.

    Each uid is held through an exclusive ``flock`` on ``<tmp>/grpo-grading-uids/<uid>.lock`` for as long as
    the returned handles stay open (until the run ends, even if it crashes): two runs never share a uid,
    so one run's "kill every process of my uid" never touches the other's kernels.
    """
    UID_LOCKS.mkdir(mode=0o755, exist_ok=True)
    running = _uids_running()
    uids, handles = [], []
    uid = start
    while len(uids) < count:
        if uid > start + 100_000:
            raise RuntimeError(f"no free sandbox uid in {start}..{uid}")
        if not _uid_taken(uid) and uid not in running:
            handle = open(UID_LOCKS / f"{uid}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
            else:
                uids.append(uid)
                handles.append(handle)
        uid += 1
    return uids, handles
