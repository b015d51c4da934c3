"""The two cells the build puts at the top of every notebook: badges and the locked bootstrap cell.

Both are generated from the one course setting (``course.toml``), so a fork edits that file and runs
``make release`` to restamp every notebook.
"""
from __future__ import annotations


def _urls(assignment: str, settings: dict) -> tuple[str, str]:
    repo, branch = settings["repository"], settings["branch"]
    path = f"notebooks/{assignment}/{assignment}.ipynb"
    colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{path}"
    modelscope = (
        "https://modelscope.cn/my/mynotebook/authorization?"
        f"url=https://github.com/{repo}/blob/{branch}/{path}"
    )
    return colab, modelscope


def badge_markdown(assignment: str, settings: dict) -> str:
    """Markdown with the Colab and ModelScope badges of ``notebooks/<assignment>/<assignment>.ipynb``."""
    colab, modelscope = _urls(assignment, settings)
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab}) "
        f"[![Open In ModelScope](https://img.shields.io/badge/ModelScope-打开-624aff)]({modelscope})"
    )


def bootstrap_source(profile: str, settings: dict) -> str:
    """Source of the locked first code cell: course root on sys.path, grading helpers, preflight."""
    return f'''# 第一个单元（只读）：找到课程根目录、导入 tools，并检查运行环境（{profile}）。
import sys
from pathlib import Path

_course_root = next((p for p in [Path.cwd(), *Path.cwd().parents] if (p / "course.toml").is_file()), None)
if _course_root is not None and sys.path[:1] != [str(_course_root)]:
    sys.path.insert(0, str(_course_root))
import tools.grading  # noqa: F401  (captures trusted helpers before any learner code runs)
from tools.bootstrap import ready

ready(profile="{profile}")'''
