"""The two cells the build puts at the top of every notebook: launch badges and the locked bootstrap.

Both are generated from the one course-wide setting (``course.toml``: ``[course] repository``,
``branch``), so a fork edits that file and runs ``make release`` to restamp every notebook.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from tools import bootstrap
from tools.preflight import PROFILES

ROOT = Path(__file__).resolve().parents[2]
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
MODELSCOPE_BADGE = "https://img.shields.io/badge/ModelScope-%E5%9C%A8%E7%BA%BF%E8%BF%90%E8%A1%8C-624aff"
MODELSCOPE_BADGE_SHORT = "https://img.shields.io/badge/ModelScope-Notebook-624aff"  # README table (narrow column)


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


def modelscope_url(assignment: str, settings: dict) -> str:
    repository, branch = _course(settings)
    return f"https://modelscope.cn/notebook/share/github/{repository}/blob/{branch}/{learner_path(assignment)}"


def badges(assignment: str, settings: dict) -> str:
    """The two badges (Colab, ModelScope) as one line of markdown."""
    return (
        f"[![在 Colab 中打开]({COLAB_BADGE})]({colab_url(assignment, settings)}) "
        f"[![在 ModelScope 中打开]({MODELSCOPE_BADGE})]({modelscope_url(assignment, settings)})"
    )


def badge_markdown(assignment: str, settings: dict) -> str:
    """Markdown of the badge cell at the top of ``notebooks/<assignment>/<assignment>.ipynb``."""
    return (
        f"{badges(assignment, settings)}\n\n"
        "在线运行：点击上方徽章，然后运行下面的第一个代码单元格，它会自动下载课程代码并安装依赖"
        "（保留平台自带的 torch）。本地运行：在课程目录执行 `make setup && make lab`。"
    )


_CELL = '''\
# 运行环境（锁定单元格，直接运行即可）：找到课程代码（在 Colab / ModelScope 上自动下载），安装 {profile_name}
# 所需的依赖（保留平台自带的 torch），导入评分工具并检查环境。重复运行不会重复下载或安装。
import importlib.util, os, subprocess, sys
from pathlib import Path

PROFILE = {profile}
REPO_URL = os.environ.get("{env_url}", {url})
BRANCH = os.environ.get("{env_branch}", {branch})


class CourseSetupError(Exception):
    def _render_traceback_(self):  # IPython shows this message instead of a traceback
        return ["课程环境准备失败：", *str(self).splitlines()]


def course_folder():
    """The course: above this notebook, installed in this Python, else the platform's clone folder."""
    env, here = os.environ, Path.cwd().resolve()
    platform = env.get("{env_platform}") or (
        "colab" if any(k in env for k in {colab_markers}) or "google.colab" in sys.modules
        else "modelscope" if any(k in {ms_markers} or k.startswith({ms_prefix}) for k in env)
        else "local")
    spec = importlib.util.find_spec("tools") if platform == "local" else None
    installed = [Path(spec.origin).parents[1]] if spec and spec.origin else []
    for folder in (here, *here.parents, *installed):
        if (folder / "course.toml").is_file() and (folder / "tools" / "bootstrap.py").is_file():
            return folder
    parent = {clone_parents}.get(platform, "~")
    return Path(env.get("{env_dir}") or Path(parent).expanduser() / {name})


course_root = course_folder()
if not (course_root / "course.toml").is_file():
    print(f"正在下载课程代码：{{REPO_URL}}（分支 {{BRANCH}}）-> {{course_root}}")
    try:
        clone = subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", BRANCH, REPO_URL, str(course_root)],
                               capture_output=True, text=True)
    except OSError as error:
        raise CourseSetupError(f"无法运行 git：{{error}}") from None
    if clone.returncode != 0:
        raise CourseSetupError(
            f"无法下载课程代码（git clone 失败：{{clone.stderr.strip()[-300:]}}）。\\n请检查网络，"
            "或把环境变量 {env_url} 设为可访问的镜像地址，然后重新运行本单元格。") from None
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


def bootstrap_source(profile: str, settings: dict) -> str:
    """Python source of the locked first code cell for a notebook of ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    repository, branch = _course(settings)
    return _CELL.format(
        profile=_py(profile),
        profile_name=profile,
        env_platform=bootstrap.ENV_PLATFORM,
        env_url=bootstrap.ENV_REPO_URL,
        env_branch=bootstrap.ENV_BRANCH,
        env_dir=bootstrap.ENV_DIR,
        colab_markers=_py(tuple(bootstrap.COLAB_MARKERS)),
        ms_markers=_py(tuple(bootstrap.MODELSCOPE_MARKERS)),
        ms_prefix=_py(bootstrap.MODELSCOPE_PREFIX),
        clone_parents=_py({k: v for k, v in bootstrap.CLONE_PARENTS.items() if k != "local"}),
        name=_py(repository.rsplit("/", 1)[-1]),
        url=_py(f"https://github.com/{repository}.git"),
        branch=_py(branch),
    )
