"""The kernel sandbox used while autograding (Linux).

nbgrader starts one Jupyter kernel per submitted notebook. The grading pipeline points the kernel spec
``python3`` at this file, so every learner kernel is started as::

    python sandbox.py <spec.json> -f <connection file> [kernel arguments]

and this launcher builds the kernel's world before it execs ``ipykernel_launcher``:

``isolated`` (run as root): new mount, PID and network namespaces; every known course checkout (with its
    ``solutions/``, ``autograde/`` gradebook and sources, ``.git``), the home folders and the grading
    folders are covered by empty tmpfs mounts; the interpreter, the virtual environment and the
    kernel's course copy (``course.toml`` + ``tools/``, read-only) are bound back; ``/tmp``,
    ``/var/tmp`` and ``/dev/shm`` are fresh and private; ``/proc`` shows only the kernel's own
    processes; there is no network (the kernel speaks to nbgrader over unix sockets); then the kernel
    drops to a dedicated unprivileged uid (one per grading slot, no
    supplementary groups, ``no_new_privs``).
``userns`` (not root, unprivileged user namespaces available): the same view, built inside a user
    namespace; the kernel keeps the instructor's uid but loses every capability at exec, so it cannot
    undo the mounts.
``none`` (neither available): only the course copy, a private working folder and the resource limits.

In every mode: resource limits (address space, file size, core dumps, processes), a scrubbed
environment (no tokens or credentials of the instructor's shell), a fresh working folder that is also
``HOME``, a thread count that fits the number of grading slots, and a pid file that lets the pipeline
kill the whole kernel (and, in the namespace modes, everything it started) at the hard time limit.

``zygote`` (isolated mode, the oracle's driver): the launcher builds the same view, then execs this file as a
    root zygote in it (scrubbed environment) that imports torch and IPython once and, per job, forks a child
    that makes fresh private ``/tmp``, ``/var/tmp``, ``/dev/shm``, working folder, IPC and network
    namespaces, drops to the slot's oracle uid with the same limits and runs ``driver.py`` in-process: a job
    starts without paying the interpreter's and torch's import. Between jobs the zygote kills every process
    left in its PID namespace. It never runs learner code itself and never reads a job.
``kernel zygote`` (isolated mode, nbgrader's kernels): the same for kernels. The slot starts it once with a
    listening unix socket as its stdin; it imports ipykernel, torch, matplotlib and transformers; the kernel spec's
    launcher then only connects, passes its stdio and environment, relays SIGINT and exits with the kernel's exit
    code, while the zygote forks the kernel (fresh private world as above, the kernel's uid) and kills it when the
    launcher goes away.

Only the standard library may be imported at module level: this file runs as the kernel launcher.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
# statvfs f_flag bits -> mount flags that a read-only remount of a bind mount must keep
_ST_TO_MS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME,
             4096: MS_RELATIME}
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "JPY_PARENT_PID", "PYTHONUNBUFFERED", "MPLBACKEND",
            "NBGRADER_EXECUTION", "PYDEVD_DISABLE_FILE_VALIDATION", "SOURCE_DATE_EPOCH")
RLIMITS = {"AS": resource.RLIMIT_AS, "FSIZE": resource.RLIMIT_FSIZE, "CORE": resource.RLIMIT_CORE,
           "NPROC": resource.RLIMIT_NPROC, "NOFILE": resource.RLIMIT_NOFILE}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.syscall.restype = ctypes.c_long


def _enc(value):
    return None if value is None else os.fsencode(value)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def mount(source, target, fstype, flags: int, data=None) -> None:
    _check(_libc.mount(_enc(source), _enc(target), _enc(fstype), flags, _enc(data)), f"mount {target}")


def prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl {option}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


# ----------------------------------------------------------------------------- the kernel's world
class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1


def set_readonly(path: str, readonly: bool, recursive: bool = True) -> bool:
    """mount_setattr(2) (Linux >= 5.12): make the mount tree at ``path`` read-only or writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    result = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, _enc(path), AT_RECURSIVE if recursive else 0,
                           ctypes.byref(attr), ctypes.sizeof(attr))
    return result == 0


def _bind_back(path: str, mode: str, fd: int) -> None:
    """Bind the folder open as ``fd`` (opened before it was covered) at ``path``, read-only unless ``mode`` is rw."""
    os.makedirs(path, exist_ok=True)
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    if not set_readonly(path, mode == "ro") and mode == "ro":  # older kernels: the classic remount
        kept = 0
        flags = os.statvfs(path).f_flag
        for bit, ms in _ST_TO_MS.items():
            if flags & bit:
                kept |= ms
        mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
    os.close(fd)


def _mount_scratch(spec: dict) -> None:
    """Fresh, private, size-limited /tmp, /var/tmp and /dev/shm (``spec["scratch"]``)."""
    for path, size in spec["scratch"]:
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={size}")


def _mount_workdir(spec: dict) -> None:
    """A fresh, private, size-limited working folder (also HOME), owned by the kernel's uid in isolated mode."""
    owner = f",uid={spec['uid']},gid={spec['gid']}" if spec["mode"] == "isolated" else ""
    mount("tmpfs", spec["workdir"], "tmpfs", MS_NOSUID | MS_NODEV,
          f"mode=0700,size={spec.get('workdir_size', '256m')}{owner}")


def _build_view(spec: dict) -> bool:
    """The kernel's file system: everything read-only, hidden folders covered by empty tmpfs, the
    interpreter and the course copy bound back read-only, the socket folder bound back writable, fresh
    private scratch (/tmp, /var/tmp, /dev/shm), a private size-limited working folder, and its own /proc.
    Returns whether the rest of the file system could be made read-only (mount_setattr needs Linux 5.12)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # opened in this mount namespace, before anything is covered (a bind source must belong to it)
    keep_fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path, _ in spec["keep"]]
    readonly_root = set_readonly("/", True)
    covered: list[str] = []
    scratch = [path for path, _ in spec["scratch"]]
    for path in sorted(spec["hide"], key=len):
        if not os.path.isdir(path) or any(_inside(path, done) for done in covered + scratch):
            continue  # already under a cover, or under a scratch folder that is replaced as a whole
        mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        covered.append(path)
    _mount_scratch(spec)
    for (path, mode), fd in zip(spec["keep"], keep_fds):
        _bind_back(path, mode, fd)
    _mount_workdir(spec)
    for path in covered:  # the covers only held mount points: nothing may be written into them
        mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return readonly_root


def _limits(spec: dict) -> None:
    for name, value in spec.get("rlimits", {}).items():
        if value is None:
            continue
        soft, hard = resource.getrlimit(RLIMITS[name])
        value = int(value)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(RLIMITS[name], (value, value))


def _kept_environ(environ=None) -> dict[str, str]:
    """What a sandboxed process keeps of its launcher's environment."""
    return {k: v for k, v in (os.environ if environ is None else environ).items()
            if k in KEEP_ENV or k.startswith("LC_")}


def _environment(spec: dict, launcher_env: dict | None = None) -> dict[str, str]:
    env = _kept_environ(launcher_env)
    work = spec["workdir"]
    threads = str(spec.get("threads", 1))
    env.update({
        "HOME": work, "TMPDIR": "/tmp", "USER": "learner", "LOGNAME": "learner",
        "PYTHONPATH": spec["course"], "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
        "MALLOC_ARENA_MAX": "2", "MPLCONFIGDIR": os.path.join(work, ".matplotlib"),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GRPO_GRADING_SANDBOX": spec["mode"],
        # the bootstrap cell installs what is missing; while grading nothing is installed (and there is no
        # network): pip fails at once instead of retrying
        "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    })
    env.update(spec.get("env", {}))
    return env


def _exec_kernel(spec: dict, connection: str, extra: list[str]) -> None:
    os.chdir(spec["workdir"])
    command = spec.get("command") or [spec["python"], "-m", "ipykernel_launcher", "-f", connection, *extra]
    os.execve(command[0], command, _environment(spec))


def _write_connection(spec: dict, text: str, uid: int | None, gid: int | None) -> str:
    target = os.path.join(spec["workdir"], ".kernel-connection.json")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    if uid is not None:
        os.chown(target, uid, gid)
    return target


def _supervise(child: int, pidfile: str) -> int:
    """Parent outside the namespaces: the pid Jupyter knows. Relay termination, follow the child."""
    _write(pidfile, json.dumps({"supervisor": os.getpid(), "init": child}))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # jupyter_client interrupts the whole process group

    def _terminate(*_):
        try:
            os.kill(child, signal.SIGKILL)
        finally:
            os._exit(143)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    parent = os.getppid()
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done == child:
            code = os.waitstatus_to_exitcode(status)
            if code < 0:  # killed by a signal: say which, for the nbgrader log
                print(f"[grading sandbox] kernel killed by signal {-code} ({signal.Signals(-code).name})",
                      file=sys.stderr, flush=True)
            return code & 0xFF
        if os.getppid() != parent:  # nbgrader is gone: take the kernel down with us
            _terminate()
        time.sleep(0.2)


def launch(argv: list[str]) -> None:
    spec_path = argv[0]
    with open(spec_path) as handle:
        spec = json.load(handle)
    rest = argv[1:]
    index = rest.index("-f")
    connection, extra = rest[index + 1], rest[:index] + rest[index + 2:]
    mode = spec["mode"]
    with open(connection) as handle:  # read now: the runtime folder is hidden from the kernel's view
        connection_text = handle.read()
    if spec.get("kernel_zygote") and mode == "isolated" and not spec.get("zygote"):
        os._exit(_kernel_client(spec, connection_text, extra))
    zygote_source = None
    if spec.get("zygote") and mode == "isolated":
        with open(os.path.abspath(__file__), encoding="utf-8") as handle:
            zygote_source = handle.read()
    uid = spec.get("uid") if mode == "isolated" else None
    gid = spec.get("gid") if mode == "isolated" else None

    if mode == "bwrap":
        _exec_bwrap(spec, connection_text, extra)
        return

    if mode == "none":
        _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
        connection = _write_connection(spec, connection_text, None, None)
        _limits(spec)
        _exec_kernel(spec, connection, extra)
        return

    if mode == "userns":
        real_uid, real_gid = os.getuid(), os.getgid()
        if real_uid == 0:  # uid 0 inside would keep its capabilities after exec and could undo the mounts
            raise SystemExit("[grading sandbox] userns mode is for non-root graders; as root use isolated")
        unshare(CLONE_NEWUSER | CLONE_NEWPID)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{real_uid} {real_uid} 1")
        _write("/proc/self/gid_map", f"{real_gid} {real_gid} 1")
    else:
        unshare(CLONE_NEWPID)
    child = os.fork()
    if child:  # the supervisor keeps the grader's view of the file system (it writes the pid file)
        os._exit(_supervise(child, spec["pidfile"]))
    # pid 1 of the new PID namespace, in a mount namespace of its own
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # a network namespace of its own (no interface up): the kernel talks to nbgrader over unix
        # sockets in its working folder (ipc transport) and cannot reach other kernels or the network
        # and an IPC namespace of its own: no System V shared memory or message queue with another sandbox
        unshare(CLONE_NEWNS | CLONE_NEWIPC | (CLONE_NEWNET if spec.get("isolate_network") else 0))
        readonly_root = _build_view(spec)
        spec.setdefault("env", {})["GRPO_GRADING_READONLY_ROOT"] = "1" if readonly_root else "0"
        if zygote_source is not None:  # stays root in the view: it forks the jobs, which drop to the uid (zygote_main)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            os.chdir(spec["workdir"])
            # this file is hidden in the view (it lives in the checkout): its text, read before, runs with -c
            if spec["zygote"] == "kernel":  # the kernel's interpreter flags: none
                command = [spec["python"], "-c", zygote_source, "--kernel-zygote", json.dumps(spec)]
            else:
                command = [spec["python"], "-X", "utf8", "-c", zygote_source, "--zygote", json.dumps(spec)]
            os.execve(command[0], command, _environment(spec))
        connection = _write_connection(spec, connection_text, uid, gid)
        _limits(spec)
        if mode == "isolated":
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by the uid change: set it again
        _exec_kernel(spec, connection, extra)
    except BaseException as error:  # report why the kernel could not start, then die
        print(f"[grading sandbox] kernel launch failed: {error!r}", file=sys.stderr, flush=True)
        os._exit(70)


# ----------------------------------------------------------------------------- bwrap: an allow-list view
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


def _size(text: str) -> int:
    """``"256m"`` -> bytes (tmpfs sizes of the spec)."""
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    return int(text[:-1]) * units[text[-1].lower()] if text[-1].lower() in units else int(text)


def bwrap_args(spec: dict, connection_fd: int | None = None) -> list[str]:
    """bubblewrap's command line for ``spec`` (mode ``bwrap``), up to and including ``--``: an empty root with only
    the system's programs and libraries (``/usr`` and its links), the interpreter and the virtual environment,
    the spec's ``keep`` folders (the kernel's course copy; the kernel's socket folder or the driver's job folder),
    read-only unless marked ``rw``; fresh private size-limited tmpfs for ``/tmp``, ``/var/tmp``, ``/dev/shm`` and
    the working folder; its own ``/proc`` and a minimal ``/dev``; no network, its own IPC, UTS, PID and cgroup
    namespaces; killed with its parent. As root, a user namespace is not needed (and would map only root): the
    command drops to the spec's uid with ``setpriv`` (no groups, no new privileges, no capabilities). Not root:
    a user namespace, the instructor's uid, no capabilities, no further user namespaces."""
    args = [spec["bwrap"], "--die-with-parent", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try"]
    if os.getuid() != 0:
        args += ["--unshare-user", "--disable-userns"]
    for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    made = {"/"}

    def parents(path: str) -> None:  # the folders above a mount point: searchable by the sandbox's uid
        for parent in reversed(list(_ancestors(path))):
            if parent not in made and not os.path.islink(parent):
                args.extend(["--perms", "0755", "--dir", parent])
                made.add(parent)

    for path in SYSTEM_FILES:
        if os.path.exists(path):
            parents(path)
            args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for path, size in spec["scratch"]:
        args += ["--size", str(_size(size)), "--perms", "1777", "--tmpfs", path]
    for path, mode in spec["keep"]:
        parents(path)
        args += ["--bind" if mode == "rw" else "--ro-bind", path, path]
    args += ["--size", str(_size(spec.get("workdir_size", "256m"))), "--perms", "0777", "--tmpfs", spec["workdir"]]
    if connection_fd is not None:
        args += ["--perms", "0444", "--ro-bind-data", str(connection_fd), _connection_path(spec)]
    args += ["--chdir", spec["workdir"], "--"]
    if os.getuid() == 0 and spec.get("uid") is not None:
        args += [spec["setpriv"], f"--reuid={spec['uid']}", f"--regid={spec['gid']}", "--clear-groups",
                 "--no-new-privs", "--inh-caps=-all", "--"]
    return args


def _ancestors(path: str):
    """The folders above ``path``, nearest first, ``/`` excluded."""
    parent = os.path.dirname(path.rstrip("/"))
    while parent not in ("/", ""):
        yield parent
        parent = os.path.dirname(parent)


def _connection_path(spec: dict) -> str:
    return os.path.join(spec["workdir"], ".kernel-connection.json")


def _exec_bwrap(spec: dict, connection_text: str, extra: list[str]) -> None:
    """Become bubblewrap running the kernel (or the spec's command). This process stays the one Jupyter knows (its
    pid is the pid file's): SIGINT is ignored here and in bubblewrap, so that Jupyter's interrupt (SIGINT to the
    process group) reaches the kernel only, which installs its own handler; SIGKILL takes the sandbox down."""
    _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
    read_end, write_end = os.pipe()
    os.write(write_end, connection_text.encode())  # a connection file is far below a pipe's buffer
    os.close(write_end)
    os.set_inheritable(read_end, True)
    command = spec.get("command") or [spec["python"], "-m", "ipykernel_launcher", "-f", _connection_path(spec), *extra]
    env = _environment(spec)
    env["GRPO_GRADING_READONLY_ROOT"] = "1"
    # ipykernel's parent poller would take bwrap's pid 1 (its parent in the sandbox) for a dead parent and quit;
    # bwrap --die-with-parent does its job
    env.pop("JPY_PARENT_PID", None)
    _limits(spec)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.execve(spec["bwrap"], bwrap_args(spec, read_end) + command, env)


def _private_world(spec: dict) -> None:
    """A zygote job's own world, forked from the zygote's view: its process group, mount, IPC and network
    namespaces, fresh /tmp, /var/tmp, /dev/shm and working folder (owned by the job's uid: isolated mode)."""
    os.setpgid(0, 0)
    unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    scratch = [path for path, _ in spec["scratch"] if os.path.isdir(path)]
    # the kept folders under a scratch folder (the slot may live under /tmp) are bound back over the fresh one
    under = [(path, mode) for path, mode in spec["keep"] if any(_inside(path, s) for s in scratch)]
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path, _ in under]
    _mount_scratch(spec)
    for (path, mode), fd in zip(under, fds):
        _bind_back(path, mode, fd)
    _mount_workdir(spec)


def _drop_to_uid(spec: dict) -> None:
    """The job's limits, then its unprivileged uid for good (no groups, no new privileges)."""
    uid, gid = spec["uid"], spec["gid"]
    _limits(spec)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.chdir(spec["workdir"])


def _zygote_job(spec: dict, request: dict, fds: list[int]) -> None:
    """A job's process, forked from the zygote (root, in the sandbox view): its own scratch, IPC and network,
    then the oracle's uid and limits, then the driver, in this process: its results go to fd 3 and its stderr to
    fd 2, the two pipes the grader sent with the request (``fds``); the job folder is read-only. Never returns."""
    _private_world(spec)
    job = request["job"]
    results, errors = (os.dup(fd) for fd in fds)  # above every descriptor in use: the dup2 below cannot clash
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd, source in ((0, devnull), (1, devnull), (2, errors), (3, results)):  # never the zygote's socket
        os.dup2(source, fd)
    os.closerange(4, 1 << 16)
    _drop_to_uid(spec)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False, buffering=1)
    import runpy

    driver = os.path.join(job, "driver.py")
    sys.argv = [driver, job, "3"]
    runpy.run_path(driver, run_name="__main__")
    os._exit(0)


def _reap_namespace() -> None:
    """pid 1 of the namespace: kill and reap everything else left in it (a job's leftovers)."""
    for _ in range(100):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                done, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if done == 0:
                break
        if not others:
            return
        time.sleep(0.01)


def zygote_main(spec_text: str) -> None:
    """The zygote: warm imports, then one forked job per request on the socket at stdin (with the job's results and
    stderr pipes), one answer per job on the same socket."""
    spec = json.loads(spec_text)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if spec.get("warm", True):  # a probe's zygote (warm: false) checks the view only and imports nothing
        import torch  # noqa: F401  (warm: every job imports them)
        from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

        try:  # most lessons' setup cells import pyplot (~0.6 s a job otherwise); the backend is the spec's Agg
            import matplotlib.pyplot  # noqa: F401
        except Exception:  # noqa: BLE001 - an optional warm-up: the job imports what it needs itself
            pass

        try:  # lesson 7's driver loads the tiny policy through transformers (~2 s of imports per job otherwise)
            import transformers.models.qwen2.modeling_qwen2  # noqa: F401
            from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
        except Exception:  # noqa: BLE001 - an optional warm-up: the job imports what it needs itself
            pass

    import socket

    channel = socket.socket(fileno=os.dup(0))  # the grader's requests, each with the job's two pipes
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(channel, 1 << 16, 2)
        except OSError:
            return
        if not message:
            return  # the grader is gone
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            channel.send(json.dumps({"exit": 70}).encode())
            continue
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            try:
                _zygote_job(spec, request, fds)
            except BaseException as error:  # noqa: BLE001 - the job could not even start
                try:
                    os.write(fds[1], f"[grading sandbox] job failed to start: {error!r}\n".encode())
                finally:
                    os._exit(70)
        for fd in fds:
            os.close(fd)
        _done, status = os.waitpid(pid, 0)
        _reap_namespace()
        channel.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())


# ----------------------------------------------------------------------------- the kernels' zygote
# isolated mode: nbgrader starts each kernel through the kernel spec as before, but the launcher only asks the
# slot's kernel zygote (a root process in the kernel's view that imported ipykernel, torch, matplotlib and
# transformers once) for a kernel, over a unix socket only the grader can reach (SOCK_SEQPACKET: one message
# each). The zygote forks a job per request: its own world (_private_world), the kernel's uid and limits, then
# ipykernel in-process. The launcher stays the process Jupyter knows: it relays SIGINT (the kernel's interrupt)
# and exits with the kernel's exit code; when it dies (nbgrader's kill, SIGTERM), the zygote kills the kernel.
KERNEL_WARM = ("torch", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell",
               "matplotlib.pyplot",
               "transformers", "transformers.models.qwen2.modeling_qwen2")


def relay_launcher_signals(sock) -> None:
    """The signals Jupyter sends a kernel launcher that stands for a forked kernel, passed on over its socket:
    SIGINT (an interrupt) is sent as ``b"interrupt"``; SIGTERM and SIGHUP end the launcher at once, and the
    closed socket makes the other side (the kernel zygote, or the tests' kernel forkserver) kill the kernel."""

    def _interrupt(*_):
        try:
            sock.send(b"interrupt")
        except OSError:
            pass

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    signal.signal(signal.SIGHUP, lambda *_: os._exit(143))


def _kernel_client(spec: dict, connection_text: str, extra: list[str]) -> int:
    """The launcher's side of a kernel job; returns the exit code for Jupyter."""
    import socket

    request = {"env": _kept_environ()}
    command = spec.get("command")
    if command:  # the probe: [python, -c, code, args...] run as a kernel job instead of ipykernel
        request.update(code=command[2], argv=command[3:])
    else:
        request.update(connection=connection_text, extra=extra)
    _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(spec["kernel_zygote"])
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    except OSError as error:
        print(f"[grading sandbox] the kernel zygote is not there: {error!r}", file=sys.stderr, flush=True)
        return 70

    relay_launcher_signals(sock)
    parent = os.getppid()
    while True:
        if select.select([sock], [], [], 0.5)[0]:
            answer = sock.recv(4096)
            if not answer:
                print("[grading sandbox] the kernel zygote went away", file=sys.stderr, flush=True)
                return 70
            code = int(json.loads(answer)["exit"])
            if code < 0:
                print(f"[grading sandbox] kernel killed by signal {-code} ({signal.Signals(-code).name})",
                      file=sys.stderr, flush=True)
            return code & 0xFF
        if os.getppid() != parent:  # nbgrader is gone: so is the kernel (the zygote sees the socket close)
            return 143


def _kernel_job(spec: dict, request: dict, fds: list[int]) -> None:
    """A kernel's process, forked from the kernel zygote: its own world, the launcher's stdio, the kernel's
    environment, uid and limits, then ipykernel (or the probe's code) in this process. Never returns."""
    _private_world(spec)
    for fd, source in zip((0, 1, 2), fds):
        os.dup2(source, fd)
    os.closerange(3, 1 << 16)
    env = _environment(spec, request.get("env", {}))
    connection = None
    if "code" not in request:
        connection = _write_connection(spec, request["connection"], spec["uid"], spec["gid"])
    _drop_to_uid(spec)
    become_forked_process(env)
    if sys.path and sys.path[0] == "":  # -c put the working folder first; ipykernel_launcher removes it too
        del sys.path[0]

    def body() -> None:
        if connection is None:
            sys.argv = ["-c", *request["argv"]]
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            import atexit

            atexit._run_exitfuncs()
        else:
            run_ipykernel(["-f", connection, *request.get("extra", [])])

    exit_like_an_interpreter(body)


def become_forked_process(env: dict[str, str]) -> None:
    """In a child forked from a warm parent (a kernel zygote here, the tests' kernel forkserver), before its code
    runs: the environment ``env``, matplotlib's backend from it (matplotlib read ``MPLBACKEND`` when the parent
    imported it, as matplotlib/__init__.py does) and Python streams on the descriptors 0-2 it was given."""
    os.environ.clear()
    os.environ.update(env)
    if "matplotlib" in sys.modules:
        import matplotlib

        matplotlib.rcParams["backend"] = env.get("MPLBACKEND") or "module://matplotlib_inline.backend_inline"
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False, buffering=1)
    sys.stderr = open(2, "w", closefd=False, buffering=1)


def run_ipykernel(argv: list[str]) -> None:
    """ipykernel in this process, as ``python -m ipykernel_launcher ARGV`` would run it, then the atexit handlers."""
    import atexit

    import ipykernel_launcher
    from ipykernel import kernelapp

    sys.argv = [ipykernel_launcher.__file__, *argv]
    kernelapp.launch_new_instance(argv=argv)
    atexit._run_exitfuncs()


def exit_like_an_interpreter(body) -> None:
    """Run ``body`` in a forked child, then end the process as ``python`` would after it: ``sys.exit``'s code, 1
    with the traceback on stderr for an exception, 0 otherwise; the streams flushed, nothing of the parent's
    (atexit handlers, threads) run. Never returns."""
    code = 0
    try:
        body()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # noqa: BLE001 - report, then die like an interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def _serve_kernel(spec: dict, conn) -> None:
    """One launcher's connection: fork its job, relay interrupts, kill the job when the launcher goes, answer
    with the exit code, then clear the PID namespace."""
    import socket

    try:
        message, fds, _flags, _address = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message)
        if len(fds) != 3:
            raise ValueError("expected the launcher's stdin, stdout and stderr")
    except (OSError, ValueError):
        return
    pid = os.fork()
    if pid == 0:
        try:
            _kernel_job(spec, request, fds)
        except BaseException as error:  # noqa: BLE001 - the kernel could not even start
            try:
                os.write(2, f"[grading sandbox] kernel launch failed: {error!r}\n".encode())
            finally:
                os._exit(70)
    for fd in fds:
        os.close(fd)
    try:
        exited = os.pidfd_open(pid)
    except (AttributeError, OSError):
        exited = None
    status = None
    while status is None:
        ready = select.select([conn] + ([exited] if exited is not None else []), [], [],
                              None if exited is not None else 0.05)[0]
        if conn in ready:
            try:
                data = conn.recv(64)
            except OSError:
                data = b""
            if not data:  # the launcher is gone (nbgrader killed it): so is its kernel
                _signal_job(pid, signal.SIGKILL)
            elif data == b"interrupt":
                _signal_job(pid, signal.SIGINT)
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            status = wait_status
    if exited is not None:
        os.close(exited)
    _reap_namespace()
    try:
        conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
    except OSError:
        pass


def _signal_job(pid: int, signum: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signum)
            return
        except (ProcessLookupError, PermissionError):
            continue


def kernel_zygote_main(spec_text: str) -> None:
    """The kernels' zygote: warm imports, then one kernel per connection on the listening socket (stdin)."""
    import importlib
    import socket

    spec = json.loads(spec_text)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    listener = socket.socket(fileno=os.dup(0))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    # ipykernel sets this at start when it is unset, before any cell; matplotlib reads it at import (below)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in KERNEL_WARM if spec.get("warm", True) else ():  # what every kernel imports (and heavy lessons')
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - an optional warm-up: the kernel imports what it needs itself
            print(f"[grading sandbox] kernel zygote: no warm {name}: {error!r}", file=sys.stderr, flush=True)
    while True:
        conn, _address = listener.accept()
        try:
            _serve_kernel(spec, conn)
        finally:
            conn.close()


def kill_uid(uid: int, gid: int) -> None:
    """Kill every process of ``uid`` (run in a fresh process: it gives up root to do so)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["--kill-uid"]:
        kill_uid(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1:2] == ["--zygote"]:
        zygote_main(sys.argv[2])
    elif sys.argv[1:2] == ["--kernel-zygote"]:
        kernel_zygote_main(sys.argv[2])
    else:
        launch(sys.argv[1:])
