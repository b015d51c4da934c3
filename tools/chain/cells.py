"""The two cells the build puts at the top of every notebook: launch badge(s) and the locked bootstrap.

Both are generated from the one course-wide setting (``course.toml``: ``[course] repository``,
``branch``), so a fork edits that file and runs ``make release`` to restamp every notebook.

Release stamp: every notebook carries ``metadata.course.stamp`` and the same value as ``STAMP`` in its
bootstrap cell (:func:`release_stamp`: a content hash of ``solutions/<assignment>.py`` and
``course.toml``, so ``make check-release`` stays deterministic and only goes stale when the lesson
itself changes, not on every commit). The cell compares it with the notebook of the same name in the
course folder it uses (a clone it reuses on Colab / ModelScope, or the checkout a local work copy lives
in) and, when they differ, says so and prints the update command; with ``GRPO_COURSE_UPDATE=1`` it runs
``git pull --ff-only`` itself. That check is plain standard library in the cell, so an old clone whose
``tools/`` predates it cannot break it.

ModelScope: no ModelScope documentation that could be found describes a link that opens a GitHub
notebook, so there is no ModelScope badge; the badge cell gives a copy-paste ``git clone`` for the
terminal of a ModelScope (PAI-DSW) or any other Jupyter instance instead.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tools import bootstrap, env_vars
from tools.preflight import PROFILES
from tools.project_runtime import MARKER, resolve_project_root

ROOT = resolve_project_root(Path(__file__))  # the checkout this module belongs to
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
ENV_UPDATE = env_vars.COURSE_UPDATE  # "1": the bootstrap cell runs `git pull --ff-only` on a stale clone
STAMP_LENGTH = 12


def load_settings(root: Path | None = None) -> dict:
    """The ``[course]`` table of ``course.toml`` (repository, branch, ...)."""
    from tools.project_runtime import course_settings

    return course_settings(Path(root or ROOT))


def _course(settings: dict) -> tuple[str, str]:
    """(repository, branch) from either the ``[course]`` table or the whole parsed file."""
    table = settings.get("course", settings)
    repository = str(table["repository"]).strip().strip("/")
    branch = str(table.get("branch") or "main").strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
        raise ValueError(f"course.toml: repository must be 'owner/name', got {repository}")
    return repository, branch


def learner_path(assignment: str) -> str:
    """Path of the learner version inside the repository (what the launch links open)."""
    return f"notebooks/{assignment}/{assignment}.ipynb"


def colab_url(assignment: str, settings: dict) -> str:
    repository, branch = _course(settings)
    return f"https://colab.research.google.com/github/{repository}/blob/{branch}/{learner_path(assignment)}"


def clone_command(settings: dict, parent: str | None = None) -> str:
    """The copy-paste shell line that clones the course (into ``parent`` when given)."""
    repository, branch = _course(settings)
    line = f"git clone --depth 1 --branch {branch} https://github.com/{repository}.git"
    return f"cd {parent} && {line}" if parent else line


_SECRET_REGION = re.compile(
    r"^[ \t]*### BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*\n.*?^[ \t]*### END \1[ \t]*$", re.MULTILINE | re.DOTALL
)


def release_stamp(assignment: str, root: Path | None = None) -> str:
    """The release stamp of ``assignment``: sha256 of the learner-visible part of its source (answers and hidden
    tests cut out, so that changing an answer does not change the learner version) and ``course.toml``
    (first 12 hex digits)."""
    root = Path(root or ROOT)
    digest = hashlib.sha256()
    source = root / "solutions" / f"{assignment}.py"
    public = _SECRET_REGION.sub("", source.read_text(encoding="utf-8")).encode("utf-8")
    for name, data in ((source.name, public), (MARKER, (root / MARKER).read_bytes())):
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:STAMP_LENGTH]


def badges(assignment: str, settings: dict) -> str:
    """The launch badge (Colab) as one line of markdown."""
    return f"[![在 Colab 中打开]({COLAB_BADGE})]({colab_url(assignment, settings)})"


def badge_markdown(assignment: str, settings: dict) -> str:
    """Markdown of the badge cell at the top of ``notebooks/<assignment>/<assignment>.ipynb``."""
    repository, _ = _course(settings)
    name = repository.rsplit("/", 1)[-1]
    return (
        f"{badges(assignment, settings)}\n\n"
        "在线运行：点击上方徽章，然后运行下面的第一个代码单元格，它会自动下载课程代码并安装依赖"
        "（保留平台自带的 torch）。本地运行：在课程目录执行 `make setup && make lab`。\n\n"
        "魔搭（ModelScope）Notebook 或其他 Jupyter 平台：在实例的终端里执行\n\n"
        f"```bash\n{clone_command(settings, bootstrap.CLONE_PARENTS['modelscope'])}\n```\n\n"
        f"然后打开 `{name}/{learner_path(assignment)}`，运行第一个代码单元格。"
    )


_CELL = '''\
# 运行环境（锁定单元格，直接运行即可）：找到课程代码（在 Colab / ModelScope 上自动下载），安装 {profile_name}
# 所需的依赖（保留平台自带的 torch），导入评分工具并检查环境。重复运行不会重复下载或安装。
import importlib.util, json, os, subprocess, sys
from pathlib import Path

PROFILE, ASSIGNMENT, STAMP = {profile}, {assignment}, {stamp}  # STAMP: this notebook's release stamp
REPOSITORY = {repository}
REPO_URL = os.environ.get("{env_url}", {url})
BRANCH = os.environ.get("{env_branch}", {branch})


class CourseSetupError(Exception):
    def _render_traceback_(self):  # IPython shows this message instead of a traceback
        return ["课程环境准备失败：", *str(self).splitlines()]


{env_constants}
BootstrapError = CourseSetupError  # the name tools.bootstrap's functions below raise
@@SHARED_FUNCTIONS@@

def course_folder():
    """The course: above this notebook, installed in this Python, else the platform's clone folder."""
    here, platform = Path.cwd().resolve(), detect_platform()
    spec = importlib.util.find_spec("tools") if platform == "local" else None
    installed = [Path(spec.origin).parents[1]] if spec and spec.origin else []
    for folder in (here, *here.parents, *installed):
        if (folder / "course.toml").is_file() and (folder / "tools" / "bootstrap.py").is_file():
            return folder
    return clone_dir(platform, REPOSITORY)


def course_stamp(root):  # the release stamp of this notebook in the course folder
    try:
        path = root / "notebooks" / ASSIGNMENT / f"{{ASSIGNMENT}}.ipynb"
        return json.loads(path.read_text(encoding="utf-8"))["metadata"]["course"]["stamp"]
    except Exception:
        return None


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True)
    except OSError as error:
        raise CourseSetupError(f"无法运行 git：{{error}}") from None


course_root = course_folder()
if not (course_root / "course.toml").is_file():
    print(f"正在下载课程代码：{{REPO_URL}}（分支 {{BRANCH}}）-> {{course_root}}")
    clone = git("clone", "-q", "--depth", "1", "--branch", BRANCH, REPO_URL, str(course_root))
    if clone.returncode != 0:
        raise CourseSetupError(
            f"无法下载课程代码（git clone 失败：{{clone.stderr.strip()[-300:]}}）。\\n请检查网络，"
            "或把环境变量 {env_url} 设为可访问的镜像地址，然后重新运行本单元格。") from None
elif STAMP and course_stamp(course_root) not in (STAMP, None):
    if os.environ.get("{env_update}") == "1" and (course_root / ".git").exists():
        pull = git("-C", str(course_root), "pull", "-q", "--ff-only")
        print(f"git pull --ff-only：{{(pull.stderr or pull.stdout).strip()[-300:] or '完成'}}")
    if course_stamp(course_root) != STAMP:
        print(f"注意：课程代码 {{course_root}} 中的本笔记本（版本 {{course_stamp(course_root)}}）与你打开的这份"
              f"（版本 {{STAMP}}）不同。\\n  更新课程代码：git -C {{course_root}} pull --ff-only"
              "（或设置环境变量 {env_update}=1 后重新运行本单元格）；\\n  本地学员：你的副本较旧时运行"
              f" make workspace UPDATE={{ASSIGNMENT}} 取新版本（旧副本会保留）。")
sys.path.insert(0, str(course_root))
import tools.bootstrap
tools.bootstrap.run(PROFILE, course_root)'''


def _py(value) -> str:
    """A Python literal with double-quoted strings (the style of the rest of the cell)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple):
        return "(" + ", ".join(_py(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def bootstrap_source(profile: str, settings: dict, assignment: str = "", stamp: str = "") -> str:
    """Python source of the locked first code cell for a notebook of ``profile``.

    ``assignment`` / ``stamp``: the notebook's name and :func:`release_stamp`; with an empty stamp the
    cell does not compare versions.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    repository, branch = _course(settings)
    cell = _CELL.format(
        profile=_py(profile),
        assignment=_py(assignment),
        stamp=_py(stamp),
        repository=_py(repository),
        env_update=ENV_UPDATE,
        profile_name=profile,
        env_url=bootstrap.ENV_REPO_URL,
        env_branch=bootstrap.ENV_BRANCH,
        env_constants=_env_constants(),
        url=_py(f"https://github.com/{repository}.git"),
        branch=_py(branch),
    )
    return cell.replace("@@SHARED_FUNCTIONS@@", _shared_functions())


# The cell runs before `tools` is importable, so it carries a copy of the settings and of the two functions of
# tools.bootstrap that find the course (their source, stamped here): one definition for the cell and the module.
SHARED_SETTINGS = (
    "ENV_PLATFORM",
    "ENV_DIR",
    "ENV_PLATFORM_ROOT",
    "PLATFORMS",
    "COLAB_MARKERS",
    "MODELSCOPE_MARKERS",
    "MODELSCOPE_PREFIX",
    "CLONE_PARENTS",
)
SHARED_FUNCTIONS = ("detect_platform", "clone_dir")


def _env_constants() -> str:
    return "\n".join(f"{name} = {_py(getattr(bootstrap, name))}" for name in SHARED_SETTINGS)


def _shared_functions() -> str:
    import inspect

    sources = [inspect.getsource(getattr(bootstrap, name)) for name in SHARED_FUNCTIONS]
    return "\n\n" + "\n\n\n".join(source.rstrip() for source in sources) + "\n"
