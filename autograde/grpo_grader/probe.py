"""The grading pre-flight: what a grading kernel needs, tried inside the sandbox it runs in.

Two halves in one module:

- **inside the sandbox**: the launcher runs this file's text as ``python -c <text> <request JSON>`` with the same
  view, uid, environment and resource limits as a slot's kernel: the checkout is not in
  that view, so the module cannot be imported there. :func:`inside` reports, as one JSON object on a line of its
  own (``PROBE {...}``), what it can read, who it runs as, and whether ``torch``, ``ipykernel``, ``nbformat`` and
  each graded lesson's top-level imports load (``import_mode`` ``import``: imported; ``find``: found on
  ``sys.path`` without being run, the cheap check a grading run makes before its first notebook).
  Only the standard library is imported at module level.
- **the grader's side**: :func:`namespace_problems` tries bubblewrap's namespaces before any slot exists,
  :func:`import_problems` reads a probe's report, and each :class:`Problem` names its cause and its fix (never a
  traceback, never "kernel died"); :func:`interpreter_paths` finds the folders outside the virtual environment the
  interpreter's ``sys.path`` needs (a ``.pth``, ``PYTHONPATH``, the user site), which the sandbox then binds
  read-only (a course checkout is never bound).
"""

import json
import os
import site
import sys

MARKER = "PROBE "
ALWAYS_IMPORTED = ("torch", "ipykernel", "nbformat")  # every grading kernel needs them


# ----------------------------------------------------------------------------- inside the sandbox (stdlib only)
def _readable(path: str) -> bool:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
    except OSError:
        return False
    return True


def _try_import(name: str, mode: str) -> str:
    """``"ok"``, or the error's class and message (the missing module's name is in it). ``name``: a module, or an
    import statement of a lesson (``from tools import online_trl``: run as it is in import mode)."""
    import importlib
    import importlib.util

    try:
        if mode == "find":
            if importlib.util.find_spec(name) is None:
                return f"ModuleNotFoundError: No module named {name!r}"
        elif " " in name:
            exec(compile(name, "<lesson import>", "exec"), {})
        else:
            importlib.import_module(name)
    except BaseException as error:  # noqa: BLE001 - a package may fail any way at import (a missing .so, an exit)
        return f"{type(error).__name__}: {str(error)[:300]}"
    return "ok"


def names_one_of(data: bytes, needles, allowed, end: int | None = None) -> bytes | None:
    """The first of ``needles`` in ``data`` (starting before ``end``) at a place where none of the ``allowed``
    strings starts (a bound folder's own path, which its files may name), else None. ``needles``: byte strings, or
    one compiled pattern of them (``_pattern``: one pass over the data however many there are)."""
    import re

    pattern = needles if isinstance(needles, re.Pattern) else _pattern(needles)
    for match in pattern.finditer(data, 0, len(data) if end is None else end + max(len(n) for n in [b"", *allowed])):
        if end is not None and match.start() >= end:
            break
        if not any(data.startswith(ok, match.start()) for ok in allowed):
            return match.group()
    return None


def _pattern(needles):
    import re

    return re.compile(b"|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)))


def _seen_bytes(path: str) -> int:
    """How many bytes a sandboxed process reads from ``path`` (up to 64 KiB; -1: it cannot read it)."""
    try:
        with open(path, "rb") as handle:
            return len(handle.read(1 << 16))
    except OSError:
        return -1


def scan_view(
    needles: list[str], allowed: list[str], top: str = "/", skip=("/proc", "/sys", "/dev"), chunk: int = 8 << 20
) -> dict:
    """Every regular file under ``top`` (this sandbox's view) it can read, read whole (symbolic links not followed,
    ``skip``'s pseudo file systems left out): the files naming one of ``needles`` other than where an ``allowed``
    string starts (``names_one_of``), and how much was read."""
    import stat

    wanted = [n.encode() for n in needles]
    ok = [a.encode() for a in allowed]
    overlap = max(len(x) for x in wanted + ok + [b"x"])
    pattern = _pattern(wanted)
    report: dict = {"files": 0, "bytes": 0, "unreadable": 0, "hits": {}}
    for folder, dirs, names in os.walk(top):
        dirs[:] = sorted(d for d in dirs if os.path.join(folder, d) not in skip)
        for name in sorted(names):
            path = os.path.join(folder, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                with open(path, "rb") as handle:
                    tail = b""
                    while True:
                        block = handle.read(chunk)
                        data = tail + block
                        found = names_one_of(data, pattern, ok, None if not block else len(data) - overlap)
                        if found or not block:
                            break
                        report["bytes"] += len(block)
                        tail = data[-2 * overlap :]
                report["files"] += 1
                if found:
                    report["hits"][path] = found.decode(errors="replace")
            except OSError:
                report["unreadable"] += 1
    return report


def inside(request: dict) -> dict:
    """What this sandboxed process sees and can do; ``request``: ``paths`` (to try reading: all should be hidden),
    ``environ`` (variables it must not hold), ``imports`` (module names), ``import_mode`` (``import`` or ``find``)."""
    import resource
    import socket

    out: dict = {
        "uid": os.getuid(),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "readonly_root": os.environ.get("GRPO_GRADING_READONLY_ROOT") == "1",
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
        "visible_pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
        "readable": {path: _readable(path) for path in request.get("paths", [])},
        "sys_path": [entry for entry in sys.path if entry],
    }
    try:
        with open("/proc/self/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        environ = b""
    # the grading seed's variable (view.SECRET_ENVIRON, sent in the request): neither in the process's initial
    # environment nor in os.environ
    out["seed_in_environ"] = any(name.encode() in environ or name in os.environ for name in request.get("environ", []))
    try:
        out["ipc_namespace"] = os.readlink("/proc/self/ns/ipc")
    except OSError:
        out["ipc_namespace"] = ""
    # a network namespace of its own holds only its loopback: any other interface is a way out
    out["network"] = sorted(name for _index, name in socket.if_nameindex() if name != "lo")
    out["tools"] = _try_import("tools.grading", "find")  # where the kernel's `import tools.grading` resolves
    if out["tools"] == "ok":
        import importlib.util

        out["tools"] = importlib.util.find_spec("tools.grading").origin
    out["masked"] = {path: _seen_bytes(path) for path in request.get("masked", [])}  # view.masked_files: all <= 0
    if request.get("scan"):  # `pipeline probe --scan-view`: every readable file of the view
        out["scan"] = scan_view(request["scan"]["needles"], request["scan"]["allowed"])
    mode = request.get("import_mode", "find")
    out["import_mode"] = mode
    out["imports"] = {name: _try_import(name, mode) for name in request.get("imports", [])}
    return out


def main(argv: list[str]) -> None:
    report = inside(json.loads(argv[0]))
    sys.stdout.flush()
    print(MARKER + json.dumps(report), flush=True)


# ----------------------------------------------------------------------------- the grader's side
def source() -> str:
    """This module's text, run with ``python -c`` inside the sandbox (the checkout is not in its view)."""
    with open(os.path.abspath(__file__), encoding="utf-8") as handle:
        return handle.read()


def parse_output(stdout: str) -> dict | None:
    """The report a probe printed (the last ``PROBE`` line), or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    return None


class Problem:
    """One reason grading cannot start here: what was seen (``detail``), its cause and the fix, for a person."""

    def __init__(self, code: str, cause: str, fix: str, detail: str = "") -> None:
        self.code, self.cause, self.fix, self.detail = code, cause, fix, detail

    def as_dict(self) -> dict:
        return {"code": self.code, "cause": self.cause, "fix": self.fix, "detail": self.detail}

    def text(self) -> str:
        seen = f"\n    看到的（seen）：{self.detail}" if self.detail else ""
        return f"- 原因（cause）：{self.cause}{seen}\n    修复（fix）：{self.fix}"


class ProbeFailure(RuntimeError):
    """The sandbox cannot grade here; ``problems`` say why and what to do."""

    def __init__(self, problems: list[Problem], mode: str = "") -> None:
        self.problems = problems
        self.mode = mode
        where = f"（沙箱 sandbox {mode}）" if mode else ""
        super().__init__(
            f"评分沙箱预检失败{where}，没有评任何 notebook（the grading sandbox pre-flight failed; nothing was "
            "graded）：\n" + "\n".join(problem.text() for problem in problems)
        )


# -- what the machine allows: user namespaces, capabilities, security profiles
CAP_SYS_ADMIN = 21
APPARMOR_PROFILE_NAME = "environments/apparmor-bwrap"
DOCKER_FLAGS = "--cap-add SYS_ADMIN --security-opt seccomp=unconfined --security-opt apparmor=unconfined"
# the container's securityContext a root grader needs in Kubernetes (autograde/recipes/kubernetes-indexed-job.yaml
# carries exactly this: tests/test_recipes.py)
KUBERNETES_SECURITY_CONTEXT = (
    "{runAsUser: 0, capabilities: {add: [SYS_ADMIN]}, seccompProfile: {type: Unconfined}, "
    "appArmorProfile: {type: Unconfined}}"
)
KUBERNETES_CONTEXT = (
    f"securityContext: {KUBERNETES_SECURITY_CONTEXT}（见 autograde/recipes/kubernetes-indexed-job.yaml）"
)
UNPRIVILEGED_PATH = (
    "或者不用 root：在允许无特权 user namespace 的宿主机上以普通用户运行 `make autograde`"
    "（见 autograde/recipes/jupyterhub-grader.yaml）"
)


def apparmor_install(profile: str) -> str:
    """The commands that install the course's AppArmor profile for bwrap (``profile``: its path in the checkout)."""
    return f"sudo install -m 644 {profile} /etc/apparmor.d/bwrap && sudo apparmor_parser -r /etc/apparmor.d/bwrap"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def machine_facts() -> dict:
    """What decides whether bubblewrap can build its namespaces here (read from /proc, nothing changed)."""
    status = {}
    for line in (_read("/proc/self/status") or "").splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()
    cap_eff = int(status.get("CapEff", "0") or "0", 16)
    cgroup = _read("/proc/1/cgroup") or ""
    return {
        "euid": os.geteuid(),
        "cap_sys_admin": bool(cap_eff >> CAP_SYS_ADMIN & 1),
        "seccomp": status.get("Seccomp", ""),
        "container": os.path.exists("/.dockerenv")
        or os.path.exists("/run/.containerenv")
        or "KUBERNETES_SERVICE_HOST" in os.environ
        or any(word in cgroup for word in ("docker", "kubepods", "containerd", "libpod")),
        "kubernetes": "KUBERNETES_SERVICE_HOST" in os.environ or "kubepods" in cgroup,
        "max_user_namespaces": _read("/proc/sys/user/max_user_namespaces"),
        "unprivileged_userns_clone": _read("/proc/sys/kernel/unprivileged_userns_clone"),
        "apparmor_restrict_unprivileged_userns": _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
    }


def bwrap_trial(bwrap: str) -> list[str]:
    """A bubblewrap command with the namespaces and mounts a grading sandbox needs (``sandbox.bwrap_args``: as root
    no user namespace, otherwise one without further user namespaces), running ``true``."""
    command = [bwrap, "--die-with-parent", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
    if os.geteuid() != 0:
        command += ["--unshare-user", "--disable-userns"]
    return command + ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "true"]


def diagnose_namespaces(stderr: str, facts: dict, course_root: str) -> Problem:
    """Why bubblewrap could not build its sandbox (``stderr`` of :func:`bwrap_trial`), and the fix for this case."""
    seen = stderr.strip()[-300:] or "bwrap failed without a message"
    apparmor_fix = f"`{apparmor_install(os.path.join(course_root, APPARMOR_PROFILE_NAME))}`"
    if facts["euid"] == 0:
        if not facts["cap_sys_admin"]:
            return Problem(
                "root-without-cap-sys-admin",
                "以 root 运行，但没有 CAP_SYS_ADMIN 能力（Docker / Kubernetes 容器的默认设置）：bubblewrap 无法建立 "
                "mount/PID/网络 namespace（root without CAP_SYS_ADMIN: a default Docker or Kubernetes container）",
                f"Docker：`docker run {DOCKER_FLAGS} ...`；Kubernetes：容器的 {KUBERNETES_CONTEXT}；{UNPRIVILEGED_PATH}",
                seen,
            )
        return Problem(
            "container-security-profile",
            "以 root 运行且有 CAP_SYS_ADMIN，但 seccomp 或 AppArmor 配置禁止 unshare/mount（容器的默认安全配置）"
            "（root with CAP_SYS_ADMIN, but a seccomp or AppArmor profile blocks unshare/mount）",
            f"Docker：`docker run {DOCKER_FLAGS} ...`；Kubernetes：容器的 {KUBERNETES_CONTEXT}",
            seen + f"; seccomp mode {facts['seccomp'] or '?'}",
        )
    if facts["max_user_namespaces"] == "0":
        return Problem(
            "userns-disabled",
            "内核禁止了 user namespace（user.max_user_namespaces = 0），非 root 用户无法建立评分沙箱"
            "（user namespaces are disabled: user.max_user_namespaces = 0）",
            "`sudo sysctl -w user.max_user_namespaces=15000`（永久生效：写入 /etc/sysctl.d/90-userns.conf）；"
            "或以 root 运行 `sudo -E make autograde`",
            seen,
        )
    if facts["unprivileged_userns_clone"] == "0":
        return Problem(
            "unprivileged-userns-disabled",
            "Debian 内核禁止无特权 user namespace（kernel.unprivileged_userns_clone = 0）"
            "（unprivileged user namespaces are disabled: kernel.unprivileged_userns_clone = 0）",
            "`sudo sysctl -w kernel.unprivileged_userns_clone=1`（永久生效：写入 /etc/sysctl.d/90-userns.conf）；"
            "或以 root 运行 `sudo -E make autograde`",
            seen,
        )
    if facts["apparmor_restrict_unprivileged_userns"] == "1":
        return Problem(
            "apparmor-restricts-userns",
            "AppArmor 限制了无特权 user namespace（Ubuntu 24.04 默认 kernel.apparmor_restrict_unprivileged_userns = 1）"
            "（AppArmor restricts unprivileged user namespaces）",
            f"安装课程附带的 AppArmor 配置，只允许 bwrap 建 user namespace：{apparmor_fix}；"
            "或 `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`；或以 root 运行 `sudo -E make autograde`",
            seen,
        )
    if "proc" in stderr and facts["container"]:
        return Problem(
            "container-masks-proc",
            "在容器里以非 root 运行：容器遮住了 /proc 的部分路径，user namespace 里不能挂载新的 /proc"
            "（a container masks parts of /proc; a user namespace cannot mount a fresh one）",
            "Docker：`docker run --security-opt systempaths=unconfined --security-opt seccomp=unconfined ...`；"
            f"或在容器里以 root 运行（Docker：`docker run {DOCKER_FLAGS} ...`）",
            seen,
        )
    if facts["container"]:
        return Problem(
            "container-blocks-userns",
            "在容器里以非 root 运行：容器的 seccomp 配置禁止建立 user namespace"
            "（the container's seccomp profile blocks user namespaces）",
            f"Docker：`docker run --security-opt seccomp=unconfined ...`；或在容器里以 root 运行"
            f"（Docker：`docker run {DOCKER_FLAGS} ...`；Kubernetes：{KUBERNETES_CONTEXT}）",
            seen,
        )
    return Problem(
        "userns-unavailable",
        "非 root 用户不能建立 user namespace（unprivileged user namespaces are not available）",
        "允许无特权 user namespace：`sudo sysctl -w user.max_user_namespaces=15000`、"
        "`sudo sysctl -w kernel.unprivileged_userns_clone=1`（Debian）或安装 AppArmor 配置："
        f"{apparmor_fix}；或以 root 运行 `sudo -E make autograde`",
        seen,
    )


def namespace_problems(course_root: str) -> list[Problem]:
    """Try bubblewrap's namespaces here (a second or less); [] when they work, else the one problem that stops them."""
    import shutil
    import subprocess

    bwrap = shutil.which("bwrap")
    if not bwrap:
        return [
            Problem(
                "bwrap-missing",
                "没有安装 bubblewrap（评分沙箱 bwrap）（bubblewrap is not installed）",
                "`sudo apt-get install -y bubblewrap`（Debian/Ubuntu；以 root 运行 `make setup` 会自动安装）",
            )
        ]
    try:
        done = subprocess.run(bwrap_trial(bwrap), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return [diagnose_namespaces(repr(error), machine_facts(), course_root)]
    if done.returncode == 0:
        return []
    return [diagnose_namespaces(done.stderr, machine_facts(), course_root)]


# -- what the interpreter needs: sys.path folders outside the virtual environment
def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _venv_of(path: str) -> str:
    """The virtual environment ``path`` lies in (the nearest folder above it holding ``pyvenv.cfg``), or ''."""
    folder = path
    while folder not in ("", "/"):
        if os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
            return folder
        folder = os.path.dirname(folder)
    return ""


def refusal(path: str, hidden: list[str], homes: list[str]) -> str:
    """Why ``path`` must not be bound into the sandbox ('' when it may): it is or holds a course checkout or a hidden
    folder, or lies inside one - except inside a virtual environment that lies in it (a checkout's ``.venv``: the
    sandbox binds the grading one already) or as a ``site-packages`` folder inside a home folder (the user site)."""
    venv = _venv_of(path)
    site_folder = os.path.basename(path.rstrip("/")) in ("site-packages", "dist-packages")
    for folder in hidden:
        if _inside(folder, path):
            return f"it holds {folder}, which kernels must not see"
    folder = path
    while folder not in ("", "/") and folder != venv:
        if os.path.isfile(os.path.join(folder, "course.toml")):  # mirrors tools.project_runtime.MARKER (stdlib side)
            return f"inside the course checkout {folder}"
        folder = os.path.dirname(folder)
    for folder in hidden:
        if _inside(path, folder):
            if venv and venv != folder and _inside(venv, folder):
                continue
            if folder in homes and site_folder:
                continue
            return f"inside {folder}, which kernels must not see"
    return ""


def interpreter_paths(already: list[str], hidden: list[str], homes: list[str], extra: list[str]) -> dict:
    """The folders this interpreter's ``sys.path`` (and ``extra``, the ``extra_readonly_paths`` setting) needs that
    the sandbox does not show yet (not under ``already``: the system folders, the virtual environment, the
    interpreter's prefix): ``{"bind": [...], "pythonpath": [...], "refused": {path: why}}``; ``pythonpath``: those a
    kernel's interpreter does not put on ``sys.path`` itself (``PYTHONPATH``, the user site, ``extra``: kernels run
    with their own ``PYTHONPATH`` and without the user site)."""
    own = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    user_site = site.getusersitepackages() if isinstance(site.getusersitepackages(), str) else ""
    bind, pythonpath, refused = [], [], {}
    for entry in [*sys.path, *extra]:
        if not entry or not os.path.isdir(entry):
            if entry in extra:
                refused[entry] = "not a folder"
            continue
        real = os.path.realpath(entry)
        if real in bind or any(_inside(real, folder) for folder in already):
            continue
        why = refusal(real, hidden, homes)
        if why:
            # the checkout itself (the grader's working folder or PYTHONPATH) is expected: kernels get a course copy
            if entry in extra or not os.path.isfile(os.path.join(real, "course.toml")):
                refused[entry] = why
            continue
        bind.append(real)
        if entry in own or entry in extra or (user_site and real == os.path.realpath(user_site)):
            pythonpath.append(real)
    return {"bind": bind, "pythonpath": pythonpath, "refused": refused}


# -- what the lessons import
def lesson_import_lines(notebook_path) -> list[str]:
    """The top-level import lines of a released lesson's code cells (what its floor notebook imports), the bootstrap
    cell left out: also what ``benchmarks/run.py`` times as a lesson's floor."""
    import re

    import nbformat

    nb = nbformat.read(notebook_path, as_version=4)
    lines = []
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade_id") == "bootstrap":
            continue
        for line in cell.source.splitlines():
            if re.match(r"^(import |from \S+ import )", line) and not line.rstrip().endswith(("(", "\\")):
                lines.append(line)
    return list(dict.fromkeys(lines))


def _imports(line: str):
    """(statement without its comment, [modules it imports]) of an import line, or None."""
    import ast

    statement = line.split("#", 1)[0].strip()
    try:
        tree = ast.parse(statement)
    except SyntaxError:
        return None
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
    return statement, modules


def imported_modules(lines: list[str], top_level: bool = False) -> list[str]:
    """What ``lines`` import, without the standard library and without ``tools.lessons`` (a lesson's saved modules are
    staged per lesson): each import statement as written (``from tools import online_trl``), or with ``top_level``
    the top-level packages (``tools``)."""
    out = []
    for line in lines:
        parsed = _imports(line)
        if parsed is None:
            continue
        statement, modules = parsed
        modules = [
            m
            for m in modules
            if m.split(".")[0] not in sys.stdlib_module_names
            and m != "tools.lessons"
            and not m.startswith("tools.lessons.")
        ]
        if top_level:
            out += [m.split(".")[0] for m in modules]
        elif modules:
            out.append(statement)
    return list(dict.fromkeys(out))


def graded_lessons(root) -> list:
    """The released lesson notebooks (``notebooks/<lesson>/<lesson>.ipynb``) that hold graded cells."""
    from pathlib import Path

    found = []
    for folder in sorted(Path(root, "notebooks").glob("nb*")):
        path = folder / f"{folder.name}.ipynb"
        if path.is_file() and '"grade": true' in path.read_text(encoding="utf-8"):
            found.append(path)
    return found


def probe_imports(root, top_level: bool) -> list[str]:
    """What the probe imports: torch, ipykernel, nbformat and every graded lesson's imports (``top_level``: only
    their top-level packages, which :func:`inside` finds without running them)."""
    names = list(ALWAYS_IMPORTED)
    for path in graded_lessons(root):
        names += imported_modules(lesson_import_lines(path), top_level=top_level)
    return list(dict.fromkeys(names))


def import_problems(report: dict, who: str, paths: dict, config_file: str) -> list[Problem]:
    """A problem for each module the probe could not import or find inside the sandbox (``who``: the kernel), naming
    where it lives outside and how to make it visible."""
    import importlib.util
    import re

    problems, named = [], set()
    failed = {name: error for name, error in report.get("imports", {}).items() if error != "ok"}
    for name, error in failed.items():
        missing = re.search(r"No module named '([^']+)'", error)
        parsed = _imports(name) if " " in name else None
        top = (missing.group(1) if missing else parsed[1][0] if parsed and parsed[1] else name).split(".")[0]
        if top in named:
            continue
        named.add(top)
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        origin = ""
        if spec is not None:
            origin = spec.origin or ""
            if spec.submodule_search_locations:
                origin = list(spec.submodule_search_locations)[0]
        folder = ""
        for entry in sorted((e for e in sys.path if e and origin.startswith(e.rstrip("/") + "/")), key=len):
            folder = entry
        if not origin:
            problems.append(
                Problem(
                    "package-missing",
                    f"{who}：{top} 没有安装在评分用的 Python 环境里（{top} is not installed in the grading interpreter）",
                    f"在课程目录运行 `make setup`（或 `{sys.prefix}/bin/python -m pip install {top}`）",
                    f"{name} -> {error}",
                )
            )
            continue
        why = paths.get("refused", {}).get(folder) or paths.get("refused", {}).get(os.path.realpath(folder or "/"))
        seen = f"{name} -> {error}; outside the sandbox {top} is {origin}" + (
            f" (sys.path folder {folder})" if folder else ""
        )
        reason = f"；这个目录没有放进沙箱：{why}" if why else ""
        problems.append(
            Problem(
                "package-outside-venv",
                f"{who}：{top} 装在虚拟环境之外（.pth、PYTHONPATH、--user 或系统 site-packages），"
                f"沙箱里看不到 {folder or origin}{reason}"
                f"（{top} lives outside the virtual environment, in a folder the sandbox does not show）",
                f"装进虚拟环境：`{sys.prefix}/bin/python -m pip install {top}`；或在 {config_file} 里列出这个只读目录："
                f"`c.GradingPipeline.extra_readonly_paths = [{(folder or os.path.dirname(origin))!r}]`"
                "（不能是课程目录或它的上级目录）",
                seen,
            )
        )
    return problems


if __name__ == "__main__":
    main(sys.argv[1:])
