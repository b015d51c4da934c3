"""The sandbox of grading kernels (Linux): bubblewrap's allow-list view, or nothing (``none``).

nbgrader starts one Jupyter kernel per submitted notebook. The grading pipeline points the kernel spec ``python3`` at
this file, so every learner kernel is started as ``python sandbox.py <spec.json> -f <connection file> [arguments]``.
A graded notebook's kernel also gets the oracle's job (case runner, inputs) and the grader's results FIFO, opened here
outside the sandbox (``_grading_fds``); the runner is installed before ipykernel starts, before any learner cell.

``bwrap`` builds the view with bubblewrap (``bwrap_args``): an empty root holding only what the spec declares, which
the slot takes from ``view.py`` (the one declaration of what a sandbox sees and never sees; the README's generated
section lists it); its own PID, IPC, UTS, network (a loopback only) and cgroup namespaces; no capabilities and
``no_new_privs``; killed with its parent. Nothing else of the machine exists in it.

``zygote`` (root): a slot starts one bubblewrap for its kernels ONCE; in it this file runs as a root process with only
    ``ROOT_CAPS`` that imports torch & co once (``zygotes.WARM``), then serves jobs over a unix socket only the grader
    can reach: per job it forks a child with the job's descriptors (the launcher's stdio; a graded kernel's FIFO and
    job), limits and the slot's leased uid for good, which runs ipykernel. After each job a helper with that uid kills
    its processes and removes its files and System V IPC objects (``_clean``); if anything is left, the zygote exits
    and is replaced. The launcher only connects, passes its descriptors, relays SIGINT and exits with the kernel's code.
not root: bubblewrap in a user namespace, one per kernel (``_exec_bwrap``): no other uid to drop to.
``none`` (explicit only): the course copy, a working folder and the resource limits; kernels read what the grader can.

Every mode: resource limits and the job's caps (job_caps.py), a scrubbed environment, a thread count fitting the
slots, a pid file for the hard time limit. Only the standard library at module level (this text is the zygote's too).
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time

RLIMITS = {name: getattr(resource, f"RLIMIT_{name}") for name in ("AS", "FSIZE", "CORE", "NPROC", "NOFILE")}
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")  # as root, the only capabilities: drop to and signal a uid
IPCRM = "/usr/bin/ipcrm"


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _limits(spec: dict) -> None:
    for target in spec.get("job_cgroups") or ():  # first the job's cgroups (job_caps.py): paths, or a zygote's fds
        with open(target, "w", closefd=isinstance(target, str)) as handle:
            handle.write("0")
    for name, value in ((n, v) for n, v in spec.get("rlimits", {}).items() if v is not None):
        _soft, hard = resource.getrlimit(RLIMITS[name])
        value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(RLIMITS[name], (value, value))


def _kept_environ(spec: dict, environ=None) -> dict[str, str]:
    """What a sandboxed process keeps of its launcher's environment (the spec's ``keep_env``: ``view.KEEP_ENV``)."""
    names, prefixes = spec["keep_env"], tuple(spec["keep_env_prefixes"])
    return {
        k: v for k, v in (os.environ if environ is None else environ).items() if k in names or k.startswith(prefixes)
    }


def _environment(spec: dict, launcher_env: dict | None = None) -> dict[str, str]:
    env = _kept_environ(spec, launcher_env)
    work = spec["workdir"]
    threads = str(spec.get("threads", 1))
    env.update(
        {
            "HOME": work,
            "TMPDIR": "/tmp",
            "USER": "learner",
            "LOGNAME": "learner",
            "PYTHONPATH": spec["course"],
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MALLOC_ARENA_MAX": "2",
            "MPLCONFIGDIR": os.path.join(work, ".matplotlib"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # mirrors tools.env_vars (GRADING_SANDBOX, GRADING_READONLY_ROOT): standard library only here
            "GRPO_GRADING_SANDBOX": spec["mode"],
            "GRPO_GRADING_READONLY_ROOT": "1" if spec["mode"] == "bwrap" else "0",
            # the bootstrap cell installs what is missing; while grading nothing is installed (and there is no
            # network): pip fails at once instead of retrying
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    env.update(spec.get("env", {}))
    return env


def _connection_path(spec: dict) -> str:
    return os.path.join(spec["workdir"], ".kernel-connection.json")


# ----------------------------------------------------------------------------- bwrap: an allow-list view
def _ancestors(path: str):
    """The folders above ``path``, nearest first, ``/`` excluded."""
    parent = os.path.dirname(path.rstrip("/"))
    while parent not in ("/", ""):
        yield parent
        parent = os.path.dirname(parent)


def bwrap_args(spec: dict, connection_fd: int | None = None, zygote: bool = False) -> list[str]:
    """bubblewrap's command line for ``spec``, up to and including ``--``: an empty root holding only the view the spec
    declares (``view.spec_view`` and the binds of ``view.kernel_binds``: its ``system``, ``system_files``,
    ``devices``, ``scratch``, ``keep``, the working folder's tmpfs; the README's generated section lists them); no
    network, its own IPC, UTS, PID and cgroup namespaces; killed with its parent.

    As root no user namespace is used (it would map root only): every capability but ``ROOT_CAPS`` is dropped, and the
    command drops to the spec's uid with ``setpriv`` (no groups, capabilities or new privileges); a ``zygote`` stays
    root with ``ROOT_CAPS`` and drops each job itself. Not root: a user namespace, the instructor's uid, nothing more."""
    # a zygote is started by one of the grader's threads, and --die-with-parent follows the thread: it watches the
    # grader's process through a pipe instead (zygote_main)
    args = [
        spec["bwrap"],
        *([] if zygote else ["--die-with-parent"]),
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if os.getuid() != 0:
        args += ["--unshare-user", "--disable-userns"]
    else:
        args += ["--cap-drop", "ALL"] + [a for cap in ROOT_CAPS for a in ("--cap-add", cap)]
    for top in spec["system"]:
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

    for path in spec["system_files"]:
        if os.path.exists(path):
            parents(path)
            args += ["--ro-bind", path, path]
    for kind, path in spec["devices"]:
        args += [f"--{kind}", path]
    for path, size in spec["scratch"]:
        args += ["--size", str(size), "--perms", "1777", "--tmpfs", path]
    for path, mode in spec["keep"]:
        if mode != "mask":  # a mask (view.masked_files) lies in a folder bound above it: /dev/null over the file
            parents(path)
        args += ["--bind" if mode == "rw" else "--ro-bind", "/dev/null" if mode == "mask" else path, path]
    args += ["--size", str(spec["workdir_size"]), "--perms", "1777", "--tmpfs", spec["workdir"]]
    if connection_fd is not None:
        args += ["--perms", "0444", "--ro-bind-data", str(connection_fd), _connection_path(spec)]
    args += ["--chdir", spec["workdir"], "--"]
    if os.getuid() == 0 and spec.get("uid") is not None and not zygote:
        args += [
            spec["setpriv"],
            f"--reuid={spec['uid']}",
            f"--regid={spec['gid']}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--",
        ]
    return args + spec.get("in_userns", [])  # not root: the task cap of job_caps.py, set inside the user namespace


def _grading_fds(spec: dict) -> tuple[int, ...]:
    """A graded notebook's kernel (its slot wrote ``spec["grading"]["job"]``): the results FIFO's write end and the
    job, opened as the grader's user outside the sandbox; () for any other kernel."""
    paths = spec.get("grading")
    if spec.get("command") or not paths or not os.path.exists(paths["job"]):
        return ()
    results = os.open(paths["results"], os.O_WRONLY)  # at once: the grader holds the read end
    return results, os.open(paths["job"], os.O_RDONLY)


def _kernel_command(spec: dict, extra: list[str], grading: tuple[int, ...]) -> list[str]:
    """The kernel's command line in a sandbox of its own: ipykernel, or (a graded notebook) the job's case runner
    (``case_runner.main``) given the two descriptors, which the command inherits, and then ipykernel."""
    if spec.get("command"):
        return spec["command"]
    if not grading:
        return [spec["python"], "-m", "ipykernel_launcher", "-f", _connection_path(spec), *extra]
    for fd in grading:
        os.set_inheritable(fd, True)
    with open(grading[1], encoding="utf-8", closefd=False) as handle:
        source = json.loads(handle.read())["runner"]
    os.lseek(grading[1], 0, os.SEEK_SET)
    return [spec["python"], "-X", "utf8", "-c", source, *map(str, grading), "-f", _connection_path(spec), *extra]


def _exec_bwrap(spec: dict, connection_text: str, extra: list[str]) -> None:
    """Become bubblewrap running the kernel (or the spec's command), the process Jupyter knows (the pid file's): SIGINT
    is ignored here and in bubblewrap, so Jupyter's interrupt (to the process group) reaches the kernel only."""
    _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
    read_end, write_end = os.pipe()
    os.write(write_end, connection_text.encode())  # a connection file is far below a pipe's buffer
    os.close(write_end)
    os.set_inheritable(read_end, True)
    command = _kernel_command(spec, extra, _grading_fds(spec))
    env = _environment(spec)
    # ipykernel's parent poller would take bwrap's pid 1 (its parent in the sandbox) for a dead parent and quit;
    # bwrap --die-with-parent does its job
    env.pop("JPY_PARENT_PID", None)
    _limits(spec)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.execve(spec["bwrap"], bwrap_args(spec, read_end) + command, env)


def launch(argv: list[str]) -> None:
    with open(argv[0]) as handle:
        spec = json.load(handle)
    rest = argv[1:]
    index = rest.index("-f")
    extra = rest[:index] + rest[index + 2 :]
    with open(rest[index + 1]) as handle:  # read now: the runtime folder is not in the kernel's view
        connection_text = handle.read()
    if spec.get("zygote_socket"):
        os._exit(_kernel_client(spec, connection_text, extra))
    if spec["mode"] == "bwrap":
        _exec_bwrap(spec, connection_text, extra)
    _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
    os.makedirs(spec["workdir"], exist_ok=True)
    _write(_connection_path(spec), connection_text)
    _limits(spec)
    os.chdir(spec["workdir"])
    command = _kernel_command(spec, extra, _grading_fds(spec))
    os.execve(command[0], command, _environment(spec))


# ----------------------------------------------------------------------------- the launcher of a zygote's kernel
def relay_launcher_signals(sock) -> None:
    """The signals Jupyter sends a kernel launcher that stands for a forked kernel, passed on over its socket:
    SIGINT (an interrupt) is sent as ``b"interrupt"``; SIGTERM and SIGHUP end the launcher at once, and the
    closed socket makes the other side (the zygote, or the tests' kernel forkserver) kill the kernel."""

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

    request = {"env": _kept_environ(spec)}
    command = spec.get("command")
    if command:  # the probe: [python, -c, code, args...] run as a kernel job instead of ipykernel
        request.update(code=command[2], argv=command[3:])
    else:
        request.update(connection=connection_text, extra=extra)
    grading = _grading_fds(spec)
    request["grading"] = bool(grading)
    _write(spec["pidfile"], json.dumps({"supervisor": os.getpid(), "init": os.getpid()}))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(spec["zygote_socket"])
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2, *grading])
        for fd in grading:  # the job holds them now
            os.close(fd)
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
                print(f"[grading sandbox] kernel killed by {signal.Signals(-code).name}", file=sys.stderr, flush=True)
            return code & 0xFF
        if os.getppid() != parent:  # nbgrader is gone: so is the kernel (the zygote sees the socket close)
            return 143


def warm_first_use() -> None:
    """In a warm parent (a zygote, the tests' kernel forkserver), the caches an interpreter builds at first use, so that
    every fork starts with them: the tokenizer's pattern (IPython tokenizes each cell, ~0.25 s), matplotlib's mathtext
    parser (~0.35 s at the first ``$...$``) and font lookups. Pure caches: no job's result depends on them."""
    import io
    import tokenize

    list(tokenize.generate_tokens(io.StringIO("x = 1\n").readline))
    if "matplotlib" not in sys.modules:  # only where the parent imported it: no figure machinery of its own
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1.5))  # not pyplot: no figure manager, no state a fork would inherit
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], label=r"$\alpha_t$")
    axes.set_xlabel(r"$\rho_{i,t}$")
    axes.set_title("warm-up")
    axes.legend()
    FigureCanvasAgg(figure).print_png(io.BytesIO())


def freeze_for_forks() -> None:
    """Before a warm parent forks: what it holds (torch, transformers...: millions of objects) out of the garbage
    collector's reach (``gc.freeze``, as Python's docs advise for a parent that forks without exec): a child's
    collections walk only its own objects (no ~0.2 s collection of the parent's heap, no copy-on-write of its pages)."""
    import gc

    gc.collect()
    gc.freeze()


def become_forked_process(env: dict[str, str]) -> None:
    """In a child forked from a warm parent (a zygote here, the tests' kernel forkserver), before its code runs: the
    environment ``env``, matplotlib's backend from it (matplotlib read ``MPLBACKEND`` when the parent imported it,
    as matplotlib/__init__.py does) and Python streams on the descriptors 0-2 it was given."""
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


def _become(spec: dict) -> None:
    """The job's uid for good: no groups, no capabilities (bubblewrap set no_new_privs for the whole sandbox)."""
    os.setgroups([])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])


def _job(spec: dict, request: dict, fds: list[int]) -> None:
    """A job's process, forked from the zygote: the descriptors it was sent (0-2; a graded kernel's results FIFO as 3
    and its job), its limits, uid and environment, then ipykernel (a graded kernel's case runner first) or the probe's
    code. Never returns."""
    os.setpgid(0, 0)
    _limits(spec)  # first: its cgroups' descriptors are closed below
    job = None
    if request.get("grading"):  # the case runner and the cases' inputs, read before the uid change
        with os.fdopen(fds.pop(), "rb") as handle:
            job = json.loads(handle.read())
    moved = [os.dup(fd) for fd in fds]  # above every descriptor in use: the dup2 below cannot clash
    for fd, source in enumerate(moved):
        os.dup2(source, fd)
    os.closerange(len(moved), 1 << 16)
    _become(spec)
    os.chdir(spec["workdir"])
    become_forked_process(_environment(spec, request.get("env", {})))
    if sys.path and sys.path[0] == "":  # -c put the working folder first; ipykernel_launcher removes it too
        del sys.path[0]

    def body() -> None:
        if "code" in request:
            sys.argv = ["-c", *request["argv"]]
            exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            import atexit

            atexit._run_exitfuncs()
        else:
            if job is not None:  # the case runner, before any learner code (case_runner.install)
                runner = {"__name__": "runner"}
                exec(compile(job["runner"], "<grader: case runner>", "exec"), runner)  # noqa: S102
                runner["install"](job, 3)
            _write(_connection_path(spec), request["connection"])
            run_ipykernel(["-f", _connection_path(spec), *request.get("extra", [])])

    exit_like_an_interpreter(body)


def _wipe(top: str, uid: int) -> bool:
    """Remove everything of ``uid`` in ``top`` (made writable first); True when nothing of it is left."""
    import shutil

    for entry in list(os.scandir(top)):
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                for folder, dirs, _files in os.walk(entry.path):
                    for name in dirs:
                        os.chmod(os.path.join(folder, name), 0o700, follow_symlinks=False)
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    return not any(e.stat(follow_symlinks=False).st_uid == uid for e in os.scandir(top))


def _live_processes_of(uid: int) -> list[int]:
    """The processes of ``uid`` but this one that are not zombies."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and int(entry) != os.getpid() and os.stat(f"/proc/{entry}").st_uid == uid:
                with open(f"/proc/{entry}/stat") as handle:
                    if handle.read().rsplit(")", 1)[-1].split()[0] != "Z":
                        found.append(int(entry))
        except OSError:
            pass
    return found


def _clean(spec: dict) -> bool:
    """After a job: a helper with the job's uid kills every process of it, removes what it left in the tmpfs folders
    and its System V IPC objects. True when nothing of the job is left."""
    pid = os.fork()
    if pid == 0:
        try:
            _become(spec)
            for _ in range(1000):  # until no live process of the uid is left but this one (zombies hold nothing)
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                if not _live_processes_of(spec["uid"]):
                    break
                time.sleep(0.005)
            else:
                os._exit(1)
            tops = [spec["workdir"]] + [path for path, _size in spec["scratch"]]
            if not all([_wipe(top, spec["uid"]) for top in tops]):
                os._exit(1)
            if os.path.exists(IPCRM):  # the uid's shared memory, semaphores, message queues (no other is its own)
                os.execv(IPCRM, [IPCRM, "--all"])
            os._exit(0)
        except BaseException:  # noqa: BLE001 - not cleaned
            os._exit(1)
    _done, status = os.waitpid(pid, 0)
    while True:  # the job's leftovers, killed: reaped here or by bubblewrap's init, whichever they were reparented to
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    return os.waitstatus_to_exitcode(status) == 0


def _signal_job(pid: int, signum: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signum)
            return
        except (ProcessLookupError, PermissionError):
            continue


def _serve(spec: dict, conn) -> bool:
    """One request: fork its job, relay interrupts, kill the job when the requester goes, clean up after it, answer
    with the job's exit code. False when the job could not be cleaned up (the zygote then exits)."""
    import socket

    fds: list[int] = []
    try:
        message, fds, _flags, _address = socket.recv_fds(conn, 1 << 20, 5)
        request = json.loads(message)
        if request.get("ping") and not fds:  # the grader: is the last job cleaned up, is this zygote usable?
            conn.send(b'{"pong": true}')
            return True
        if len(fds) != (5 if request.get("grading") else 3):
            raise ValueError("expected the job's descriptors")
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return True
    pid = os.fork()
    if pid == 0:
        try:
            _job(spec, request, fds)
        except BaseException as error:  # noqa: BLE001 - the job could not even start
            try:
                os.write(2, f"[grading sandbox] job failed to start: {error!r}\n".encode())
            finally:
                os._exit(70)
    for fd in fds:
        os.close(fd)
    exited = os.pidfd_open(pid)
    status = None
    while status is None:
        ready = select.select([conn, exited, spec["grader_fd"]], [], [])[0]
        if spec["grader_fd"] in ready:  # the grader is gone: so are the job and this zygote
            _signal_job(pid, signal.SIGKILL)
            os._exit(0)
        if conn in ready:
            try:
                data = conn.recv(64)
            except OSError:
                data = b""
            if not data:  # the requester is gone (nbgrader killed the launcher, or a timeout): so is the job
                _signal_job(pid, signal.SIGKILL)
            elif data == b"interrupt":
                _signal_job(pid, signal.SIGINT)
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            status = wait_status
    os.close(exited)
    clean = _clean(spec)
    try:
        conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status), "clean": clean}).encode())
    except OSError:
        pass
    return clean


def zygote_main(spec_text: str) -> None:
    """The zygote: its warm imports (``zygotes.WARM`` and the run's, sent in the spec), then one job per connection on the listening socket (stdin), one at a time, until
    the grader's end of the pipe ``spec["grader_fd"]`` closes."""
    import importlib
    import socket

    spec = json.loads(spec_text)
    listener = socket.socket(fileno=os.dup(0))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    # ipykernel sets this at start when it is unset, before any cell; matplotlib reads it at import (below)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in spec.get("warm_imports", ()) if spec.get("warm", True) else ():
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - an optional warm-up: the job imports what it needs itself
            print(f"[grading sandbox] zygote: no warm {name}: {error!r}", file=sys.stderr, flush=True)
    if spec.get("warm", True):
        warm_first_use()
        for target in spec.get("warm_calls", ()):  # "module:function" of the lessons being graded (ZYGOTE_WARM)
            module, _, function = target.partition(":")
            try:
                getattr(importlib.import_module(module), function)()
            except Exception as error:  # noqa: BLE001 - optional: each job builds what it needs itself
                print(f"[grading sandbox] zygote: no warm {target}: {error!r}", file=sys.stderr, flush=True)
    freeze_for_forks()
    clean = True
    while clean:
        if spec["grader_fd"] in select.select([listener, spec["grader_fd"]], [], [])[0]:
            return  # the grader is gone (its end of the pipe closed): bubblewrap ends the sandbox with this process
        conn, _address = listener.accept()
        try:
            clean = _serve(spec, conn)
        finally:
            conn.close()
    print("[grading sandbox] zygote: a job left processes or files that could not be removed", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zygote"]:
        zygote_main(sys.argv[2])
    else:
        launch(sys.argv[1:])
