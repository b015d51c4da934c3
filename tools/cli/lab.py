"""`make lab` / `make lab-instructor`: JupyterLab on the course for one of two roles, printing the URL.

    python -m tools.cli.lab [--role learner|instructor] [--port 8888] [--ip 127.0.0.1] [--no-browser]

- ``learner`` (``make lab``): serves ``work/``, the learner's git-ignored copy of ``notebooks/``
  (made by ``make workspace``, or here on the first start), so autosave never writes a tracked file.
  nbgrader's instructor panels are switched off for this server only: the formgrader server
  extension, and the "Formgrader" / "Create Assignment" / "Course List" JupyterLab plugins (a generated
  ``labconfig/page_config.json``). The Assignment List and Validate stay.
- ``instructor`` (``make lab-instructor``): serves the course root with the formgrader on
  ``autograde/``; the nbgrader source, release and gradebook are built first when missing.

Both roles share a local nbgrader exchange, ``autograde/exchange/`` (git-ignored), and the course id of
``course.toml``: release in the formgrader, fetch / submit in the Assignment List, collect in the
formgrader, all on one machine. The per-server settings live in a generated Jupyter config folder
``.cache/lab/<role>/`` put on ``JUPYTER_CONFIG_PATH`` of the server only; nothing global is changed.

Stopping: Ctrl-C, SIGTERM and SIGHUP stop the server and its kernels (the server is also told to stop
when this process dies, through Linux's parent-death signal). A second start finds the server already
running on this course in Jupyter's runtime files (what ``jupyter server list --json`` reads) and prints its URL;
a busy port is left to jupyter_server's own ``--port-retries`` and the port it took is reported.
:class:`LabServer` is also what the tests use to serve the course on a free port and stop it again.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from tools.project_runtime import MARKER, course_id, resolve_project_root

ROOT = resolve_project_root(Path(__file__))  # the checkout this module belongs to
ROLES = ("learner", "instructor")
NBGRADER_SERVER_EXTENSIONS = (
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.validate_assignment",
    "nbgrader.server_extensions.assignment_list",
    "nbgrader.server_extensions.course_list",
)
INSTRUCTOR_ONLY_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader",)
# the course's own extension on the instructor's server: the formgrader's Autograde refuses (make autograde),
# its Generate Feedback runs make feedback, its Collect names the learners (autograde/grpo_grader/formgrader_guard.py)
FORMGRADER_GUARD = "autograde.grpo_grader.formgrader_guard"
# nbgrader's JupyterLab plugins a learner should not see (plugin ids of the @jupyter/nbgrader lab extension):
# the formgrader panel, the "Create Assignment" side bar, the instructors' course list.
INSTRUCTOR_ONLY_LAB_PLUGINS = (
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
)
EXCHANGE_DIR = "autograde/exchange"
WORK_DIR = "work"
FETCH_DIR = "work/fetched"  # where the Assignment List's Fetch puts a released assignment (not the work copy)
STATE_DIR = ".cache/lab"


def ensure_exchange(root: Path = ROOT) -> Path:
    """The local nbgrader exchange ``autograde/exchange/``, created world-writable like nbgrader's own
    default exchange (learners' submissions are written into it)."""
    exchange = Path(root) / EXCHANGE_DIR
    exchange.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(exchange.stat().st_mode)
    if mode != 0o777:
        try:
            exchange.chmod(0o777)
        except OSError:
            pass
    return exchange


def nbgrader_settings(root: Path, role: str, *, exchange: Path | None = None) -> dict:
    """The nbgrader settings both roles' servers read (``nbgrader_config.json`` of the config folder).

    The Assignment List loads nbgrader config from files only (not from the server's command line),
    hence a file. ``Exchange.assignment_dir``: where "Fetch" puts a copy - ``work/fetched/`` for both roles:
    inside the learner server's folder (so the Assignment List links open), apart from the work copies
    ``work/<assignment>/`` that ``make lab`` makes (so Fetch is offered rather than "already downloaded"), and
    never among the tracked files of an instructor's checkout; ``Exchange.cache`` (the record of one's
    submissions) stays inside the course folder too.
    """
    root = Path(root).resolve()
    return {
        "CourseDirectory": {"course_id": course_id(root), "root": str(root / "autograde")},
        "Exchange": {
            "root": str(Path(exchange or root / EXCHANGE_DIR).resolve()),
            "assignment_dir": str(root / FETCH_DIR),
            # the learner's copies of what was submitted (nbgrader's default is in ~/.local/share)
            "cache": str(root / STATE_DIR / "nbgrader_cache"),
        },
    }


def write_config_dir(root: Path, role: str, *, exchange: Path | None = None) -> Path:
    """Generate ``.cache/lab/<role>/`` (a Jupyter config folder for this server only) and return it."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    folder = Path(root).resolve() / STATE_DIR / role
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    disabled = {name: True for name in INSTRUCTOR_ONLY_LAB_PLUGINS} if role == "learner" else {}
    files = {
        folder / "labconfig" / "page_config.json": {"disabledExtensions": disabled},
        folder / "nbgrader_config.json": nbgrader_settings(root, role, exchange=exchange),
    }
    for path, data in files.items():
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    return folder


def server_extensions(role: str) -> dict[str, bool]:
    """nbgrader server extensions (and the course's formgrader guard) switched on / off for ``role``."""
    off = INSTRUCTOR_ONLY_SERVER_EXTENSIONS if role == "learner" else ()
    return {**{name: name not in off for name in NBGRADER_SERVER_EXTENSIONS}, FORMGRADER_GUARD: role == "instructor"}


def lab_command(
    root: Path,
    port: int,
    token: str,
    *,
    ip: str = "127.0.0.1",
    open_browser: bool = False,
    python: str | None = None,
    role: str = "instructor",
    serve: Path | None = None,
) -> list[str]:
    """The ``jupyter lab`` call serving ``serve`` (default ``root``) on ``ip:port`` for ``role``."""
    return [
        python or sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={serve or root}",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        f"--ServerApp.port_retries={PORT_RETRIES if port else 0}",
        f"--ServerApp.open_browser={open_browser}",
        f"--IdentityProvider.token={token}",
        f"--CourseDirectory.root={root / 'autograde'}",
        *(f"--ServerApp.jpserver_extensions={name}={on}" for name, on in server_extensions(role).items()),
        *(["--ServerApp.allow_root=True"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
    ]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: deliver SIGTERM to the server when the process that started it dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def descendants(pid: int) -> list[int]:
    """PIDs of every process below ``pid`` (psutil; empty when ``pid`` is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def server_env(root: Path, role: str, config: Path, base: dict) -> dict:
    """The server's environment: its config folder first on ``JUPYTER_CONFIG_PATH``; for the instructor, the
    checkout on ``PYTHONPATH`` (the formgrader guard and the course config import it, editable install or not)."""
    env = dict(base)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (str(config), env.get("JUPYTER_CONFIG_PATH")) if p)
    if role == "instructor":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(root).resolve()), env.get("PYTHONPATH")) if p)
    return env


# Loaded in a fresh interpreter from the formgrader's working directory, as nbgrader loads it: the course config
# must load and be the course's (its feedback drops hidden tests, its autograde strips them).
_CONFIG_CHECK = """
from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item
config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
def names(key, section):  # each preprocessor imported (the config names them by import path, nbconvert imports them)
    return [(import_item(p) if isinstance(p, str) else p).__name__ for p in config[section][key]]
assert "HideHiddenTests" in names("preprocessors", "GenerateFeedback"), "GenerateFeedback.preprocessors"
assert "StripHiddenTests" in names("sanitize_preprocessors", "Autograde"), "Autograde.sanitize_preprocessors"
assert "SafeExecute" in names("autograde_preprocessors", "Autograde"), "Autograde.autograde_preprocessors"
import_item(config.GenerateFeedback.exporter_class)
"""


def course_config_problem(root: Path = ROOT, env: dict | None = None) -> str | None:
    """None when ``autograde/nbgrader_config.py`` loads in the instructor server's environment and sets the
    course's preprocessors; else what went wrong (the end of the error)."""
    course = Path(root).resolve() / "autograde"
    if not (course / "nbgrader_config.py").is_file():
        return f"{course / 'nbgrader_config.py'} does not exist"
    env = server_env(root, "instructor", Path(root) / STATE_DIR / "instructor", os.environ if env is None else env)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CONFIG_CHECK], cwd=course, env=env, capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return "loading nbgrader_config.py took more than 120 s"
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return "\n".join(lines[-6:])
    return None


class LabServer:
    """A JupyterLab server on the course for ``role``; a context manager that always stops what it started
    (the server and every kernel it started)."""

    def __init__(
        self,
        root: Path = ROOT,
        *,
        port: int = 0,
        ip: str = "127.0.0.1",
        open_browser: bool = False,
        token: str | None = None,
        log=None,
        env: dict | None = None,
        role: str = "instructor",
        serve: Path | None = None,
    ):
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
        self.root = Path(root).resolve()
        self.role = role
        self.serve = Path(serve).resolve() if serve else self.root
        self.ip = ip
        self.port = port  # the preferred port (0: any); the one the server took once it started
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
        config = write_config_dir(self.root, self.role)
        if (self.root / "autograde").is_dir():
            ensure_exchange(self.root)
        (self.root / FETCH_DIR).mkdir(parents=True, exist_ok=True)
        command = lab_command(
            self.root,
            self.port,
            self.token,
            ip=self.ip,
            open_browser=self.open_browser,
            role=self.role,
            serve=self.serve,
        )
        env = server_env(self.root, self.role, config, os.environ if self.env is None else self.env)
        # cwd = the nbgrader course folder: the formgrader reads ./nbgrader_config.py from the server's cwd.
        cwd = self.root / "autograde" if (self.root / "autograde").is_dir() else self.root
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdout=self.log,
            stderr=self.log,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        runtime_dir = env.get("JUPYTER_RUNTIME_DIR")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with code {self.process.returncode} before it answered")
            # the port the server took (it retries busy ones itself) is in its runtime file, written once it listens
            mine = [info for info in running_servers(runtime_dir) if info.get("pid") == self.process.pid]
            if mine:
                self.port = int(mine[0]["port"])
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
        """Stop the server: SIGTERM (Jupyter shuts its kernels down), SIGKILL if it hangs; then any kernel
        still alive (kernels run in their own sessions, out of the server's process group) is killed."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            below = psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            below = []
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout)
            except ProcessLookupError:
                pass
        for child in below:
            try:
                child.kill()  # (psutil checks the process is the one it saw: a reused pid is left alone)
            except psutil.Error:
                pass

    def __enter__(self) -> LabServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- running servers (jupyter_server's own list)
PORT_RETRIES = 50  # jupyter_server tries the next ports itself when the preferred one is busy


def running_servers(runtime_dir: str | None = None) -> list[dict]:
    """``jupyter server list --json``: the servers of Jupyter's runtime folder that still run."""
    from jupyter_server.serverapp import list_running_servers

    try:
        return [info for info in list_running_servers(runtime_dir) if alive(int(info.get("pid", 0)))]
    except Exception:  # unreadable runtime files: nothing to report
        return []


def server_url(info: dict, path: str = "lab") -> str:
    token = f"?token={info['token']}" if info.get("token") else ""
    return f"{info['url'].rstrip('/')}/{path.lstrip('/')}{token}"


def running_server(root: Path = ROOT, role: str | None = None) -> dict | None:
    """A server this tool started on the course (its command line names the course's nbgrader folder) for ``role``
    (learner: serving ``work/``; instructor: the course root), from Jupyter's runtime files: ``{pid, url, role}``."""
    root = Path(root).resolve()
    folders = {"learner": root / WORK_DIR, "instructor": root}
    for info in running_servers():
        folder = Path(info.get("root_dir") or "/").resolve()
        try:
            ours = f"--CourseDirectory.root={root / 'autograde'}" in psutil.Process(int(info["pid"])).cmdline()
        except psutil.Error:
            continue
        for name in (role,) if role else ROLES:
            if ours and folder == folders[name]:
                return {
                    "pid": info["pid"],
                    "role": name,
                    "url": server_url(info, "lab/tree" if name == "learner" else "formgrader"),
                }
    return None


def other_course_servers(root: Path = ROOT) -> list[dict]:
    """Jupyter servers (started any way, e.g. a plain ``jupyter lab``) whose folder is the course or inside it,
    from Jupyter's runtime files: ``[{pid, url, root_dir}]``."""
    root = Path(root).resolve()
    found = []
    for info in running_servers():
        folder = Path(info.get("root_dir") or info.get("notebook_dir") or "/").resolve()
        if folder == root or root in folder.parents:
            found.append({"pid": info.get("pid"), "url": server_url(info), "root_dir": str(folder)})
    return found


# ----------------------------------------------------------------------------- roles
def prepare_instructor(root: Path = ROOT, build_missing: bool = True) -> list[str]:
    """Make sure the formgrader has something to show: nbgrader source, release and gradebook.

    Builds what is missing (``tools.chain.notebooks.build`` + ``nbgrader generate_assignment``, which
    also fills the gradebook; ``notebooks/`` is not touched). Returns the assignments it generated;
    raises ``SystemExit`` with the command to run when ``build_missing`` is False and something is missing.
    """
    root = Path(root).resolve()
    course = root / "autograde"
    names = sorted(p.stem for p in (root / "solutions").glob("*.py") if not p.name.startswith("_"))
    missing = [
        name
        for name in names
        if not (course / "release" / name / f"{name}.ipynb").is_file()
        or not (course / "source" / name / f"{name}.ipynb").is_file()
    ]
    if not (course / "gradebook.db").is_file():
        missing = names
    if not missing:
        name_gradebook_learners(root)
        return []
    if not build_missing:
        raise SystemExit(
            "formgrader 还没有作业：请先运行 `make release`（生成 autograde/source、release 与 gradebook.db）。"
        )
    import tools.chain.notebooks as chain

    print(
        f"formgrader 需要的 nbgrader 源文件 / 发布版 / gradebook 缺失，正在生成（{len(missing)} 个作业）...", flush=True
    )
    chain.build(missing, course=course)
    for name in missing:
        chain._generate_assignment(course, name)
        print(f"  {name}: ok", flush=True)
    name_gradebook_learners(root)
    return missing


def name_gradebook_learners(root: Path = ROOT) -> list[str]:
    """Put every learner of ``autograde/submitted/`` (a folder named by a learner id, as ``make autograde`` grades)
    into the gradebook, and give the gradebook's learners without a name the ``[roster]`` name of ``course.toml``
    or their id: the formgrader showed "None, None" for a learner it found only in ``submitted/`` (not graded yet).
    The learners collected later are named by the formgrader guard."""
    from nbgrader.api import Gradebook

    from autograde.grpo_grader.roster import name_learners
    from autograde.grpo_grader.submission import SAFE_ID

    root = Path(root).resolve()
    submitted = root / "autograde" / "submitted"
    learners = sorted(
        p.name for p in (submitted.iterdir() if submitted.is_dir() else []) if p.is_dir() and not p.is_symlink()
    )
    with Gradebook(f"sqlite:///{root / 'autograde' / 'gradebook.db'}", course_id(root)) as gb:
        return name_learners(gb, root / MARKER, [learner for learner in learners if SAFE_ID.match(learner)])


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM / SIGHUP handler."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--role",
        choices=ROLES,
        default="learner",
        help="learner (make lab, default) or instructor (make lab-instructor)",
    )
    parser.add_argument("--port", type=int, default=8888, help="preferred port (a free one is used if busy)")
    parser.add_argument("--ip", default="127.0.0.1", help="address to listen on (0.0.0.0 inside a container)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser")
    args = parser.parse_args(argv)
    missing = [name for name in ("jupyterlab", "nbgrader") if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"缺少 {', '.join(missing)}：请先运行 `make setup`（安装 environments/instructor.txt）。", file=sys.stderr
        )
        return 2

    existing = running_server(ROOT, args.role)
    if existing:
        print(
            f"本课程的 JupyterLab（{args.role}）已经在运行（进程 {existing['pid']}），请直接打开：\n"
            f"    {existing['url']}\n如需重启，先停止它：kill {existing['pid']}",
            flush=True,
        )
        return 0
    other = running_server(ROOT, "instructor" if args.role == "learner" else "learner")
    if other:
        print(
            f"提示：本课程的另一个 JupyterLab（{other['role']}，进程 {other['pid']}）也在运行：{other['url']}",
            flush=True,
        )
    for foreign in other_course_servers(ROOT):
        if not other or foreign["pid"] != other["pid"]:
            print(
                f"提示：已有一个 Jupyter 服务器在本课程目录（{foreign['root_dir']}）上运行（进程 {foreign['pid']}）："
                f"{foreign['url']}",
                flush=True,
            )
    if args.role == "learner":
        from tools.cli import workspace

        workspace.sync(ROOT)
        workspace.notice(ROOT)
        serve, landing = ROOT / WORK_DIR, "lab/tree"
    else:
        problem = course_config_problem(ROOT)
        if problem:
            print(
                f"课程的 nbgrader 配置 {ROOT / 'autograde' / 'nbgrader_config.py'} 无法加载，不启动教师界面：\n"
                f"{problem}\n"
                "没有它，formgrader 会退回 nbgrader 的默认设置（不用本课程的评分器，反馈里会出现隐藏测试）。"
                "请修正上面的错误（或运行 `make setup`），再运行 `make lab-instructor`。\n"
                "(The course's nbgrader config does not load; the instructor server is not started.)",
                file=sys.stderr,
            )
            return 2
        try:
            prepare_instructor(ROOT)
        except Exception as error:  # e.g. nbgrader failed: say what to run instead of a traceback
            print(
                f"生成 formgrader 所需文件失败：{error}\n请先运行 `make release`，再运行 `make lab-instructor`。",
                file=sys.stderr,
            )
            return 1
        serve, landing = ROOT, "formgrader"

    server = LabServer(ROOT, port=args.port, ip=args.ip, open_browser=not args.no_browser, role=args.role, serve=serve)

    def stop_signal(signum, frame):
        raise _Stop(signal.Signals(signum).name)

    # SIGINT too: a process started with SIGINT ignored (a background job, some launchers) inherits that, and
    # Python then never raises KeyboardInterrupt; Ctrl-C must stop the server whatever started this process
    previous = {sig: signal.signal(sig, stop_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        try:
            server.start()
        except (RuntimeError, TimeoutError) as error:
            print(f"JupyterLab 启动失败：{error}", file=sys.stderr)
            return 1
        if args.port and server.port != args.port:
            print(
                f"端口 {args.port} 已被占用（其他程序或上面提到的服务器），JupyterLab 改用了端口 {server.port}。",
                flush=True,
            )
        print("\n" + "=" * 72)
        if args.role == "learner":
            print(f"JupyterLab（学员）已启动，打开的是你的工作副本 {ROOT / WORK_DIR}：")
            print(f"    {server.url(landing)}")
            print("作业列表（Assignment List）在菜单 Nbgrader 中；notebooks/ 里的发布版不会被改动。")
        else:
            print(f"JupyterLab（教师）已启动，课程目录 {ROOT}：")
            print(f"    {server.url('lab')}")
            print(f"nbgrader 评分界面（formgrader）：{server.url('formgrader')}")
            print(f"本机交换目录（exchange）：{ROOT / EXCHANGE_DIR}")
        print("按 Ctrl-C 停止。")
        print("=" * 72 + "\n", flush=True)
        server.process.wait()
        print("JupyterLab 已退出。", file=sys.stderr)
    except KeyboardInterrupt:
        print("\n正在停止 JupyterLab ...", flush=True)
    except _Stop as stop:
        print(f"\n收到 {stop}，正在停止 JupyterLab 及其内核 ...", flush=True)
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not interrupt the clean-up
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
