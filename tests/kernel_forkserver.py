"""Warm kernels for the test run's own notebook executions: a forkserver per pytest worker.

Every notebook the tests execute (``tools.chain.notebooks.execute``: solutions, learner versions, independent
and wrong answers) would otherwise start a fresh ``python -m ipykernel_launcher`` and import torch, matplotlib
and transformers again: about 2.5-3.5 CPU-seconds per kernel, some 30 kernels per ``make test``. Here one server
per worker imports them once; each kernel is a fork of it that then runs ipykernel as a fresh kernel would.

- ``serve SOCKET``: the server. Warm imports, then one forked kernel per launcher connection (AF_UNIX
  SOCK_SEQPACKET): the launcher's stdin/stdout/stderr, environment, working folder and kernel arguments.
- ``connect SOCKET -f CONNECTION_FILE``: the launcher, the process Jupyter starts from the kernel spec
  (``kernel_spec``). It relays SIGINT (the kernel's interrupt), exits with the kernel's exit code, and when it
  is killed (nbclient's shutdown) the server kills the kernel's whole session.

A fork is only used when it would behave like a fresh kernel: the environment variables read at import time
(``IMPORT_TIME_ENV``) must equal the server's, else the launcher starts a plain fresh kernel (``cold``); a variable
that the server's own imports set (peft sets ``TORCHINDUCTOR_CACHE_DIR`` to torch's default) may be either
absent or that value, since a kernel importing the same module sets the same default. The fork
reseeds ``random`` and numpy's global generator, and sets matplotlib's backend from the kernel's environment as
ipykernel does (the last steps are the grader's own: ``sandbox.become_forked_process`` and ``run_ipykernel``,
which its kernel zygote's jobs run too). Test infrastructure only: the grader's kernels come from its own
sandboxed kernel zygote (``autograde/grpo_grader/sandbox.py``), and learners' kernels are always fresh.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

NAME = "grpo-tests-warm"  # the kernel spec's name
WARM = (
    "numpy",
    "torch",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "IPython",
    "transformers",
    "transformers.models.qwen2.modeling_qwen2",
    "peft",
)  # and the grader's zygotes.KERNEL_INIT: what ipykernel imports while a kernel starts
# variables that modules read when they are imported (interpreter, threads, caches, config folders)
IMPORT_TIME_ENV = (
    "PYTHON",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "GOMP_",
    "TORCH",
    "PYTORCH",
    "CUDA",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "TOKENIZERS",
    "MPL",
    "MATPLOTLIB",
    "HOME",
    "XDG_",
    "LD_",
    "MALLOC",
    "VIRTUAL_ENV",
    "TMPDIR",
    "LANG",
    "LC_",
)
PR_SET_PDEATHSIG = 1


def _import_time_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)}


def _differs(request: dict[str, str], before: dict[str, str], set_by_imports: dict[str, str]) -> list[str]:
    """The import-time variables of a kernel's environment that a fork of the server would not honour.

    ``before``: the server's own before its warm imports; ``set_by_imports``: what those imports added (a default
    that the same import in a kernel would set too, so a kernel may have it or not)."""
    request = _import_time_env(request)
    return sorted(
        k
        for k in set(request) | set(before) | set(set_by_imports)
        if request.get(k) != before.get(k) and not (k in set_by_imports and request.get(k) in (None, set_by_imports[k]))
    )


def kernel_spec(folder, socket_path: str) -> dict:
    """Write ``<folder>/kernels/<NAME>/kernel.json`` (put ``folder`` on JUPYTER_PATH) and return it."""
    spec = {
        "argv": [sys.executable, os.path.abspath(__file__), "connect", socket_path, "-f", "{connection_file}"],
        "display_name": "Python 3 (tests, warm)",
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False},
    }
    target = os.path.join(str(folder), "kernels", NAME)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "kernel.json"), "w", encoding="utf-8") as handle:
        json.dump(spec, handle, indent=1)
    return spec


def _parent_death_signal(signum: int) -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass


# ----------------------------------------------------------------------------- launcher
def _cold(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def connect(socket_path: str, argv: list[str]) -> int:
    request = {"env": dict(os.environ), "cwd": os.getcwd(), "argv": argv}
    _wait_for_server(socket_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(socket_path)
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
        answer = json.loads(sock.recv(1 << 16) or b"{}")
    except (OSError, ValueError):
        answer = {}
    if "pid" not in answer:  # no server, or the environment differs from the server's: a fresh kernel
        sock.close()
        _cold(argv)

    from autograde.grpo_grader.sandbox import relay_launcher_signals

    relay_launcher_signals(sock)  # as the grader's launcher: interrupts over the socket, SIGTERM/SIGHUP end it
    while True:
        select.select([sock], [], [])
        data = sock.recv(4096)
        if not data:
            return 70
        return int(json.loads(data)["exit"]) & 0xFF


# ----------------------------------------------------------------------------- server
def _kernel(request: dict, fds: list[int]) -> None:
    """The forked kernel: the launcher's stdio, environment and folder, then ipykernel. Never returns."""
    from autograde.grpo_grader.sandbox import become_forked_process, exit_like_an_interpreter, run_ipykernel

    def body() -> None:
        os.setsid()
        _parent_death_signal(signal.SIGKILL)
        for fd, source in zip((0, 1, 2), fds):
            os.dup2(source, fd)
        os.closerange(3, 1 << 16)
        os.chdir(request["cwd"])
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        become_forked_process(request["env"])
        import random

        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        # read from the environment when ipykernel was imported (in the server): given as an option instead
        run_ipykernel([*request["argv"], f"--IPKernelApp.parent_handle={int(os.environ.get('JPY_PARENT_PID') or 0)}"])

    exit_like_an_interpreter(body)


def serve(socket_path: str) -> None:
    import importlib

    _parent_death_signal(signal.SIGKILL)  # the pytest worker is gone: so is its server
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # the script's folder: not on a fresh kernel's path
    baseline = _import_time_env(os.environ)
    from autograde.grpo_grader import sandbox  # what each kernel runs with; no server without it
    from autograde.grpo_grader.zygotes import KERNEL_INIT

    for name in (*WARM, *KERNEL_INIT):
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - optional: a kernel imports what it needs itself
            print(f"[kernel forkserver] no warm {name}: {error!r}", file=sys.stderr, flush=True)
    sandbox.warm_first_use()
    after = _import_time_env(os.environ)
    set_by_imports = {k: v for k, v in after.items() if k not in baseline}
    sandbox.freeze_for_forks()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path + ".tmp")
    listener.listen(16)
    os.replace(socket_path + ".tmp", socket_path)  # launchers that find the socket find a listening one
    conns: dict[socket.socket, int] = {}  # launcher connection -> kernel pid
    exits: dict[int, tuple[int, socket.socket]] = {}  # pidfd (or -pid without pidfd_open) -> (kernel pid, connection)
    while True:
        watched = [fd for fd in exits if fd >= 0]
        polled = [fd for fd in exits if fd < 0]  # no pidfd: poll those kernels with waitpid
        ready = select.select([listener, *conns, *watched], [], [], 0.2 if polled else None)[0]
        for fd in polled:
            pid, status = os.waitpid(-fd, os.WNOHANG)
            if pid:
                _report_exit(exits.pop(fd)[1], status, conns)
        for item in ready:
            if item is listener:
                conn, _ = listener.accept()
                try:
                    message, fds, _flags, _address = socket.recv_fds(conn, 1 << 22, 3)
                    request = json.loads(message)
                except (OSError, ValueError):
                    conn.close()
                    continue
                differs = _differs(request["env"], baseline, set_by_imports)
                if len(fds) != 3 or differs:
                    print(f"[kernel forkserver] cold kernel: {differs or 'no stdio'}", file=sys.stderr, flush=True)
                    conn.send(json.dumps({"cold": differs}).encode())
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    _kernel(request, fds)
                for fd in fds:
                    os.close(fd)
                conns[conn] = pid
                try:
                    exits[os.pidfd_open(pid)] = (pid, conn)
                except (AttributeError, OSError):  # Linux < 5.3
                    exits[-pid] = (pid, conn)
                conn.send(json.dumps({"pid": pid}).encode())
            elif item in conns:
                try:
                    data = item.recv(64)
                except OSError:
                    data = b""
                pid = conns[item]
                if data == b"interrupt":  # jupyter_client signals a kernel's process group
                    _signal(pid, signal.SIGINT, group=True)
                elif not data:  # the launcher is gone (nbclient killed it): so is its kernel
                    _signal(pid, signal.SIGKILL, group=True)
                    del conns[item]
            elif item in exits:
                pid, conn = exits.pop(item)
                os.close(item)
                _report_exit(conn, os.waitpid(pid, 0)[1], conns)


def _report_exit(conn: socket.socket, status: int, conns: dict) -> None:
    """Tell the launcher (if it is still there) its kernel's exit code, and forget the connection."""
    try:
        conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
    except OSError:
        pass
    conns.pop(conn, None)
    conn.close()


def _wait_for_server(socket_path: str, limit: float = 60.0) -> None:
    """While the server is still importing (its pid alive, no socket yet), wait for it."""
    import time

    try:
        with open(socket_path + ".pid", encoding="utf-8") as handle:
            pid = int(handle.read())
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + limit
    while not os.path.exists(socket_path) and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)


def _signal(pid: int, signum: int, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "connect":
        raise SystemExit(connect(sys.argv[2], sys.argv[3:]))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} serve SOCKET | connect SOCKET -f CONNECTION_FILE")
