"""What a grading sandbox sees, and what it must never see: the one declaration of the view.

Every sandbox (a kernel, the zygote it is forked from) is built by ``sandbox.bwrap_args`` from the spec its slot
writes (``slots.Slot``). The parts of that spec that make the view come from here: ``spec_view`` (the system's folders
and files, ``/proc`` and ``/dev``, the scratch tmpfs, the working folder's size, the environment variables kept of the
launcher's) and ``kernel_binds`` (the interpreter, the folders of ``sys.path`` outside it, the slot's course copy of
``GradingPipeline.kernel_files``, the kernel's socket folder). What must never be seen is
declared here too: ``never_bound`` (what no bind may be, hold or lie in, whatever ``sys.path`` or
``extra_readonly_paths`` says: ``sandbox_choice`` hands it to the probe's ``interpreter_paths``), ``secret_paths``
and ``SECRET_ENVIRON`` (what the probe tries to read from inside every sandbox: all must be hidden). The README's
section on the view is generated from this module (``describe``, written by ``python -m autograde.pipeline settings
--write``).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.project_runtime import MARKER

from .course import AUTOGRADE, ROOT, GradingPipeline
from .digests import SEED_ENV, SEED_NAME
from .probe import names_one_of

MIB = 2**20

# ----------------------------------------------------------------------------- what a sandbox sees (bwrap's order)
USR = "/usr"
SYSTEM = (USR, "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # a host's symbolic link stays that link
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
DEVICES = (("proc", "/proc"), ("dev", "/dev"))  # a /proc of its own PID namespace, a minimal /dev (no GPU)
SCRATCH = (("/tmp", 256 * MIB), ("/var/tmp", 16 * MIB), ("/dev/shm", 64 * MIB))  # private tmpfs of these sizes
WORKDIR_SIZE = 256 * MIB  # the working folder (also HOME): a private tmpfs of its own
SOCKETS_SIZE = 8 * MIB  # as root, the kernels' socket folders live on one tmpfs of the run (slots.mount_socket_tmpfs)
SYSTEM_PREFIXES = (USR, "/usr/local")  # a base interpreter here is seen through /usr: no bind of its own
# the only variables a sandboxed process keeps of its launcher's environment (the sandbox sets its own HOME, paths,
# thread counts...: sandbox._environment); no token or credential of the instructor's shell gets in
KEEP_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "JPY_PARENT_PID",
    "PYTHONUNBUFFERED",
    "MPLBACKEND",
    "NBGRADER_EXECUTION",
    "PYDEVD_DISABLE_FILE_VALIDATION",
    "SOURCE_DATE_EPOCH",
)
KEEP_ENV_PREFIXES = ("LC_",)

# ----------------------------------------------------------------------------- what a sandbox never sees
# The folders below are named by anchor: ``_anchors`` says where each one is on this machine, ``ANCHORS`` how the
# README names it.
ANCHORS = {
    "checkout": ("the course checkout", "课程目录（checkout）"),
    "course": ("the nbgrader course folder (`--course`)", "nbgrader 课程文件夹（`--course`）"),
    "autograde": ("the checkout's `autograde/`", "课程目录的 `autograde/`"),
    "slot": ("the slot's own nbgrader course", "槽位自己的 nbgrader 课程"),
    "run": ("the run's temporary folder", "本次评分的临时目录"),
    "git": (
        "the git object store (`git rev-parse --git-common-dir`)",
        "git 对象库（`git rev-parse --git-common-dir`）",
    ),
    "venv checkout": ("the checkout holding the virtual environment", "装着虚拟环境的课程目录"),
}
# no bind is, holds or lies in one of these (``probe.refusal``), whatever sys.path or extra_readonly_paths says
NEVER_BOUND = ("checkout", "course", "run", "git", "venv checkout")
HOMES = ("~", "/root")  # home folders: only a site-packages folder inside one (the user site) may be bound
# what the probe tries to read from inside every sandbox (all must be hidden), in the order its report lists them
SECRETS = (
    ("checkout", "solutions"),
    ("course", "gradebook.db"),
    ("course", "source"),
    ("course", "autograded"),
    ("course", "submitted"),
    ("autograde", "sample_class"),
    ("slot", "gradebook.db"),
    ("autograde", "grpo_grader/oracles"),
    ("course", SEED_NAME),
    ("autograde", SEED_NAME),
    ("checkout", "solutions/*.py"),  # the first lesson source
    ("git", ""),
    ("venv checkout", "solutions"),
)
SECRET_ENVIRON = (SEED_ENV,)  # environment variables no sandboxed process may hold (the probe looks for them)


# ----------------------------------------------------------------------------- this machine's places
@dataclass(frozen=True)
class CheckoutFacts:
    git_dirs: tuple[Path, ...]  # the git object store of this checkout (a worktree's is its main checkout's)
    venv_checkout: Path | None  # the course checkout the virtual environment lies in, if any


def _checkout_of(path: Path) -> Path | None:
    for folder in [path, *path.parents]:
        if (folder / MARKER).is_file():
            return folder
    return None


@functools.cache
def checkout_facts() -> CheckoutFacts:
    """Where this checkout's git objects and virtual environment are (looked up once per process)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        lines = done.stdout.splitlines() if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        lines = []
    return CheckoutFacts(tuple(Path(line.strip()) for line in lines), _checkout_of(Path(sys.prefix).resolve()))


def _anchors(settings: GradingPipeline, run: Path | None = None, slot: Path | None = None) -> dict[str, list[Path]]:
    facts = checkout_facts()
    return {
        "checkout": [ROOT],
        "course": [settings.course],
        "autograde": [AUTOGRADE],
        "slot": [slot] if slot else [],
        "run": [run] if run else [],
        "git": list(facts.git_dirs),
        "venv checkout": [facts.venv_checkout] if facts.venv_checkout else [],
    }


# ----------------------------------------------------------------------------- read by the slots, the probe, bwrap
def spec_view() -> dict:
    """The parts of a sandbox spec that make its view beside the binds (``sandbox.bwrap_args`` reads them) and the
    environment it keeps of its launcher's (``sandbox._environment``)."""
    return {
        "system": list(SYSTEM),
        "system_files": list(SYSTEM_FILES),
        "devices": [list(device) for device in DEVICES],
        "scratch": [list(folder) for folder in SCRATCH],
        "workdir_size": WORKDIR_SIZE,
        "keep_env": list(KEEP_ENV),
        "keep_env_prefixes": list(KEEP_ENV_PREFIXES),
    }


def interpreter_folders() -> list[str]:
    """The virtual environment, and the base interpreter's prefix where ``/usr`` does not show it already."""
    prefix = str(Path(sys.prefix).resolve())
    base = str(Path(sys.base_prefix).resolve())
    return [prefix] + ([base] if base not in SYSTEM_PREFIXES and base != prefix and os.access(base, os.X_OK) else [])


def shown_already() -> list[str]:
    """Where a folder of ``sys.path`` needs no bind of its own: the interpreter's prefixes and ``/usr``."""
    return [str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve()), USR]


def kernel_binds(extra: list[str], course_copy: Path, sockets: Path, hidden: list[str] = ()) -> list[list[str]]:
    """A kernel's binds (the spec's ``keep``, in bind order): the interpreter's folders, the ``sys.path`` folders
    outside them (``extra``) and the slot's course copy read-only; over them the files of ``masked_files`` (those
    naming one of the ``hidden`` folders: ``never_bound``), each replaced by ``/dev/null`` (which a sandbox's mounts
    do not let it open); the kernel's socket folder read-write."""
    folders = [*interpreter_folders(), *extra]
    masks = masked_files(tuple(folders), tuple(hidden)) if hidden else []
    return (
        [[path, "ro"] for path in [*folders, str(course_copy)]]
        + [[path, "mask"] for path in masks]
        + [[str(sockets), "rw"]]
    )


# ----------------------------------------------------------------------------- files that name what is never seen
# Where a bound folder's files may name the checkout: the folders of the interpreter's sys.path inside it (its
# site-packages), their top-level files (and their compiled copies in __pycache__) and their packages' metadata. An
# editable install of the course (`make setup`) puts a finder there that maps `tools` and `autograde` to the checkout
# and lists its folders, the sample class's learners among them; its `.pth` imports the finder; its
# `direct_url.json` names the checkout.
METADATA_FOLDERS = ("*.dist-info", "*.egg-info")
MASK_LIMIT = 4 * MIB  # a larger file of these folders is no install's record: left as it is
# never masked: without its pyvenv.cfg an interpreter does not know its virtual environment (its `command` line may
# name the interpreter that created it, a checkout's among them)
NEEDED = ("pyvenv.cfg",)


def _site_folders(folders: tuple[str, ...]) -> list[Path]:
    """The folders of the interpreter's ``sys.path`` that lie in one of the bound ``folders`` (and those folders)."""
    entries = {str(Path(entry).resolve()) for entry in sys.path if entry and os.path.isdir(entry)} | set(folders)
    inside = [e for e in entries if any(e == f or e.startswith(f.rstrip("/") + "/") for f in folders)]
    return [Path(entry) for entry in sorted(inside) if os.path.isdir(entry)]


def masks_of(keep: list[list[str]]) -> list[str]:
    """The masked files of a spec's binds (``kernel_binds``)."""
    return [path for path, mode in keep if mode == "mask"]


@functools.cache
def masked_files(folders: tuple[str, ...], hidden: tuple[str, ...]) -> list[str]:
    """The files of the bound ``folders`` a sandbox cannot read: in each folder of ``sys.path`` within them, the
    top-level files, their compiled copies and its packages' metadata (``METADATA_FOLDERS``) that name one of the
    ``hidden`` folders (other
    than as the start of a bound folder's own path), and a ``.pth`` that imports one of them (it would fail at every
    interpreter start). Looked up once per process (a few milliseconds)."""
    needles = tuple(sorted({h.encode() for h in hidden}, key=len, reverse=True))
    allowed = tuple(f.encode() for f in folders)
    masked: list[Path] = []
    pth: list[Path] = []
    for site_folder in _site_folders(folders):
        candidates = [p for p in site_folder.iterdir() if p.is_file() and not p.is_symlink() and p.name not in NEEDED]
        for pattern in (*METADATA_FOLDERS, "__pycache__"):  # (a top-level module's compiled copy names what it does)
            for meta in site_folder.glob(pattern):
                candidates += [p for p in meta.iterdir() if p.is_file() and not p.is_symlink()] if meta.is_dir() else []
        for path in candidates:
            try:
                if path.stat().st_size <= MASK_LIMIT and names_one_of(path.read_bytes(), needles, allowed):
                    masked.append(path)
                elif path.suffix == ".pth":
                    pth.append(path)
            except OSError:
                continue
    stems = {p.stem.encode() for p in masked if p.suffix == ".py"}
    for path in pth:
        text = path.read_bytes()
        if any(stem in text for stem in stems):
            masked.append(path)
    return sorted(str(path) for path in masked)


def scrub_course_copy(copy: Path) -> None:
    """The slot's course copy without the learners: its ``course.toml`` loses the ``[roster]`` table (learner ids and
    names, ``roster.py``), which no kernel needs."""
    import re
    import tomllib

    path = copy / MARKER
    if not path.is_file():
        return
    kept, dropping = [], False
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if re.match(r"\s*\[", line):
            dropping = re.match(r"\s*\[\s*roster\s*[.\]]", line) is not None
        if not dropping and not re.match(r"\s*roster\s*=", line):
            kept.append(line)
    text = "".join(kept)
    if "roster" in tomllib.loads(text):
        raise ValueError(f"{path}: write the roster as a [roster] table (it must not reach the grading kernels)")
    path.write_text(text, encoding="utf-8")


def homes() -> list[str]:
    return [str(Path.home().resolve()) if home == "~" else home for home in HOMES]


def never_bound(settings: GradingPipeline, run: Path) -> list[str]:
    """The folders of ``NEVER_BOUND`` on this machine, for the run's temporary folder ``run``."""
    anchors = _anchors(settings, run=run)
    return sorted({str(path.resolve()) for name in NEVER_BOUND for path in anchors[name]})


def secret_paths(settings: GradingPipeline, slot: Path) -> list[str]:
    """The paths of ``SECRETS`` that exist here, ``slot`` being the probed slot's nbgrader course."""
    anchors = _anchors(settings, slot=slot)
    paths = []
    for anchor, relative in SECRETS:
        for folder in anchors[anchor]:
            if "*" in relative:
                paths += sorted(folder.glob(relative))[:1]
            else:
                paths.append(folder / relative if relative else folder)
    return [str(path) for path in paths if path.exists()]


# ----------------------------------------------------------------------------- the README's section
def _paths(paths, zh: bool = False) -> str:
    return ("、" if zh else ", ").join(f"`{path}`" for path in paths)


def _size(size: int) -> str:
    return f"{size // MIB} MiB"


def _rows(zh: bool) -> list[tuple[str, str, str]]:
    """(what, where, how) of each part of the view, in the order bubblewrap builds it."""

    def say(chinese: str, english: str) -> str:
        return chinese if zh else english

    course_files = GradingPipeline.class_traits()["kernel_files"].default()
    scratch = ("、" if zh else ", ").join(say(f"`{p}`（{_size(s)}）", f"`{p}` ({_size(s)})") for p, s in SCRATCH)
    return [
        (
            say("系统的程序与库", "the system's programs and libraries"),
            _paths(SYSTEM, zh),
            say(
                "只读；主机上是符号链接的，照原样建成同样的链接",
                "read-only; a symbolic link on the host is the same link",
            ),
        ),
        (
            say("动态链接器的缓存与配置、时区", "the dynamic loader's cache and configuration, the time zone"),
            _paths(SYSTEM_FILES, zh),
            say("只读", "read-only"),
        ),
        (
            say("进程与设备", "processes and devices"),
            _paths((path for _kind, path in DEVICES), zh),
            say(
                "自己的 `/proc`（自己的 PID 命名空间）；最基本的 `/dev`（没有 GPU）",
                "its own `/proc` (its own PID namespace); a minimal `/dev` (no GPU)",
            ),
        ),
        (say("临时目录", "scratch folders"), scratch, say("私有、限定大小的 tmpfs", "private size-limited tmpfs")),
        (
            say("虚拟环境与解释器", "the virtual environment and the interpreter"),
            say(
                f"`sys.prefix`；不是 {_paths(SYSTEM_PREFIXES, zh)} 时还有 `sys.base_prefix`",
                f"`sys.prefix`; `sys.base_prefix` unless it is {_paths(SYSTEM_PREFIXES)} (seen through `/usr`)",
            ),
            say("只读", "read-only"),
        ),
        (
            say(
                "解释器 `sys.path` 上虚拟环境之外的目录（`.pth`、`PYTHONPATH`、`--user`）与 `extra_readonly_paths`",
                "folders of the interpreter's `sys.path` outside the virtual environment (a `.pth`, `PYTHONPATH`, the "
                "user site) and `extra_readonly_paths`",
            ),
            say("与主机上相同", "as on the host"),
            say(
                "只读；下面那些永远不放进沙箱的目录除外",
                "read-only; never one of the folders below that no sandbox sees",
            ),
        ),
        (
            say(
                "这些目录里点名课程目录、课程文件夹或本次评分目录的文件（可编辑安装的 finder 与 `.pth`、`direct_url.json` 等）",
                "files of those folders that name the checkout, the course folder or the run's folder (an editable "
                "install's finder and `.pth`, a `direct_url.json`...)",
            ),
            say(
                "`sys.path` 上位于它们之中的目录：顶层文件与 `*.dist-info`、`*.egg-info` 里的文件",
                "the folders of `sys.path` within them: their top-level files and those of `*.dist-info`, `*.egg-info`",
            ),
            say(
                "换成 `/dev/null`（沙箱的挂载不允许打开设备：读不到任何内容）：课程目录的布局和学员的学号都不出现；"
                "只有绑定目录自己的路径（例如脚本第一行、编译后的模块里的虚拟环境路径）可以出现",
                "replaced by `/dev/null` (the sandbox's mounts allow no device: nothing of them can be read): "
                "neither the checkout's layout nor a learner id shows; only a bound folder's own path may (the "
                "virtual environment's, in a script's first line or a compiled module)",
            ),
        ),
        (
            say("槽位的课程副本（`kernel_files`）", "the slot's course copy (`kernel_files`)"),
            _paths(course_files, zh),
            say(
                "只读；`tools/lessons/` 里只有之前各课的模块",
                "read-only; `tools/lessons/` holds the earlier lessons' modules only",
            ),
        ),
        (
            say("内核的 socket 目录", "the kernel's socket folder"),
            say(
                "槽位的 `ipc/`（以 root 评分时是本次评分的 `sockets/slot<k>`）",
                "the slot's `ipc/` (as root the run's `sockets/slot<k>`)",
            ),
            say(
                f"读写；以 root 评分时在本次评分专用的 {_size(SOCKETS_SIZE)} tmpfs 上",
                f"read-write; as root on the run's own {_size(SOCKETS_SIZE)} tmpfs",
            ),
        ),
        (
            say("工作目录（也是 `HOME`）", "the working folder (also `HOME`)"),
            say("槽位的 `kernel/work`", "the slot's `kernel/work`"),
            say(f"私有 tmpfs（{_size(WORKDIR_SIZE)}）", f"private tmpfs ({_size(WORKDIR_SIZE)})"),
        ),
        (
            say(
                "从启动器继承的环境变量（其余由沙箱自己设置）",
                "environment variables kept from the launcher (the sandbox sets the rest)",
            ),
            _paths([*KEEP_ENV, *(f"{prefix}*" for prefix in KEEP_ENV_PREFIXES)], zh),
            say(
                "只有这些：教师 shell 里的令牌和凭据不进沙箱",
                "these only: no token or credential of the instructor's shell",
            ),
        ),
        (
            say(
                "内核的连接文件（只有新建沙箱里的内核）",
                "the kernel's connection file (a kernel in a fresh sandbox only)",
            ),
            say("工作目录里的 `.kernel-connection.json`", "`.kernel-connection.json` in the working folder"),
            say("只读", "read-only"),
        ),
    ]


def describe(language: str) -> str:
    """The README's section on the view (``language`` "zh" or "en"), generated from the declarations above."""
    zh = language == "zh"
    language_index = 1 if zh else 0
    head = "| 沙箱里看到的 | 路径 | 方式 |" if zh else "| what a sandbox sees | where | how |"
    lines = [head, "| --- | --- | --- |"] + [f"| {what} | {where} | {how} |" for what, where, how in _rows(zh)]
    never = [ANCHORS[name][language_index] for name in NEVER_BOUND]
    by_anchor: dict[str, list[str]] = {}
    for anchor, relative in SECRETS:
        by_anchor.setdefault(anchor, [])
        if relative:
            by_anchor[anchor].append(f"`{relative}`")
    secrets = [
        ANCHORS[anchor][language_index] + ("：" if zh else ": ") + ("、" if zh else ", ").join(names)
        if names
        else ANCHORS[anchor][language_index]
        for anchor, names in by_anchor.items()
    ]
    environ = _paths(SECRET_ENVIRON, zh)
    if zh:
        lines += [
            "",
            f"永远不放进沙箱（任何绑定都不能是、不能包含、也不能位于其中，不管 `sys.path` 或 `extra_readonly_paths` 怎么写）："
            f"{'、'.join(never)}；家目录 {_paths(HOMES, zh)} 也不放（其中的 `site-packages`，即用户 site，可以）。",
            "",
            f"预检在每个沙箱里尝试读取这些（全部应读不到）：{'；'.join(secrets)}；并检查沙箱里的进程的环境变量里没有 {environ}。",
        ]
    else:
        lines += [
            "",
            "Never in a sandbox (no bind is, holds or lies in one of these, whatever `sys.path` or "
            f"`extra_readonly_paths` says): {', '.join(never)}; nor the home folders {_paths(HOMES)} (a `site-packages` "
            "inside one, the user site, may be bound).",
            "",
            f"The pre-flight tries to read each of these from inside every sandbox (none may be readable): "
            f"{'; '.join(secrets)}; and checks that no sandboxed process's environment holds {environ}.",
        ]
    return "\n".join(lines)
