"""`make lab`: JupyterLab on the course folder, with the nbgrader extensions, printing the URL.

    python -m tools.cli.lab [--port 8888] [--ip 127.0.0.1] [--no-browser]

The server's file browser starts at the course root (``notebooks/`` holds the learner versions);
nbgrader's formgrader sees ``autograde/`` as its course directory. :class:`LabServer` is also what the
tests use to serve the course on a free port and stop it again.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
)


def free_port(preferred: int = 0, ip: str = "127.0.0.1") -> int:
    """``preferred`` if it can be bound on ``ip``, else a port the OS hands out."""
    for port in ((preferred, 0) if preferred else (0,)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((ip, port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port on {ip}")


def lab_command(root: Path, port: int, token: str, *, ip: str = "127.0.0.1", open_browser: bool = False,
                python: str | None = None) -> list[str]:
    """The ``jupyter lab`` call serving ``root`` on ``ip:port`` with ``token`` and nbgrader enabled."""
    return [
        python or sys.executable, "-m", "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.open_browser={open_browser}",
        f"--IdentityProvider.token={token}",
        f"--CourseDirectory.root={root / 'autograde'}",
        *(f"--ServerApp.jpserver_extensions={name}=True" for name in NBGRADER_SERVER_EXTENSIONS),
        *(["--ServerApp.allow_root=True"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
    ]


class LabServer:
    """A JupyterLab server on the course; a context manager that always stops what it started."""

    def __init__(self, root: Path = ROOT, *, port: int = 0, ip: str = "127.0.0.1", open_browser: bool = False,
                 token: str | None = None, log=None, env: dict | None = None):
        self.root = Path(root).resolve()
        self.ip = ip
        self.port = free_port(port, ip)
        self.token = token or os.environ.get("JUPYTER_TOKEN") or secrets.token_hex(16)
        self.open_browser = open_browser
        self.log = log
        self.env = env
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def url(self, path: str = "lab") -> str:
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def start(self, timeout: float = 120.0) -> LabServer:
        command = lab_command(self.root, self.port, self.token, ip=self.ip, open_browser=self.open_browser)
        env = dict(os.environ if self.env is None else self.env)
        # cwd = the nbgrader course folder: the formgrader reads ./nbgrader_config.py from the server's cwd.
        cwd = self.root / "autograde" if (self.root / "autograde").is_dir() else self.root
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=self.log, stderr=self.log,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.process.returncode} before it answered")
            if self.ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"JupyterLab did not answer on {self.base_url} within {timeout:.0f} s")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/api/status?token={self.token}", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server (SIGTERM: Jupyter shuts its kernels down cleanly; SIGKILL if it hangs)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
        except ProcessLookupError:
            pass

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8888, help="preferred port (a free one is used if busy)")
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on (0.0.0.0 inside a container)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    args = parser.parse_args(argv)
    missing = [name for name in ("jupyterlab", "nbgrader") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"缺少 {', '.join(missing)}：请先运行 `make setup`（安装 environments/instructor.txt）。", file=sys.stderr)
        return 2
    server = LabServer(ROOT, port=args.port, ip=args.ip, open_browser=not args.no_browser)
    try:
        server.start()
    except (RuntimeError, TimeoutError) as error:
        print(f"JupyterLab 启动失败：{error}", file=sys.stderr)
        return 1
    first = ROOT / "notebooks"
    landing = "lab/tree/notebooks" if first.is_dir() else "lab"
    print("\n" + "=" * 72)
    print(f"JupyterLab 已启动（课程目录 {ROOT}）：")
    print(f"    {server.url(landing)}")
    print(f"nbgrader 评分界面（formgrader）：{server.url('formgrader')}")
    print("按 Ctrl-C 停止。")
    print("=" * 72 + "\n", flush=True)
    try:
        server.process.wait()
    except KeyboardInterrupt:
        print("\n正在停止 JupyterLab ...")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
