"""One-click launch, piece by piece: the badges and the bootstrap cell from course.toml, platform detection, the
clone folder, the update of a stale clone, what gets installed, and the README's notebook table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import bootstrap
from tools.chain import cells, readme_table
from tools.preflight import PROFILES, Requirement

ROOT = Path(__file__).resolve().parents[1]
FORK = {"repository": "someone/grpo-fork", "branch": "dev"}


# --------------------------------------------------------------------------- badges and the cell
def test_badges_and_cell_follow_the_one_setting():
    name = "nb01_group_advantages"
    path = f"notebooks/{name}/{name}.ipynb"
    badges = cells.badge_markdown(name, FORK)
    assert f"(https://colab.research.google.com/github/someone/grpo-fork/blob/dev/{path})" in badges
    # no ModelScope link form is documented by ModelScope: a copy-paste clone under the badge instead
    assert "modelscope.cn/notebook" not in badges
    assert "cd /mnt/workspace && git clone --depth 1 --branch dev https://github.com/someone/grpo-fork.git" in badges
    assert f"grpo-fork/{path}" in badges
    source = cells.bootstrap_source("PT-CPU", FORK)
    assert '"https://github.com/someone/grpo-fork.git"' in source
    assert 'os.environ.get("GRPO_COURSE_BRANCH", "dev")' in source
    assert 'REPOSITORY = "someone/grpo-fork"' in source and 'PROFILE, ASSIGNMENT, STAMP = "PT-CPU", "", ""' in source
    # the whole parsed file works as well as its [course] table
    assert cells.bootstrap_source("PT-CPU", {"course": FORK}) == source
    # the repository's own setting
    settings = cells.load_settings(ROOT)
    assert f"github.com/{settings['repository']}.git" in cells.bootstrap_source("BASE-CPU", settings)
    with pytest.raises(ValueError):
        cells.badge_markdown(name, {"repository": "not a repo", "branch": "main"})


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_bootstrap_cell_compiles_and_is_short(profile):
    source = cells.bootstrap_source(profile, FORK)
    compile(source, f"<bootstrap {profile}>", "exec")
    lines = source.splitlines()
    # (about 100 lines: 25 of them are tools.bootstrap's detect_platform and clone_dir, copied in by source)
    assert len(lines) <= 105 and max(len(line) for line in lines) <= 125
    assert "tools.bootstrap.run(PROFILE, course_root)" in lines[-1]


def test_bootstrap_cell_finds_the_course_with_tools_bootstraps_own_functions():
    """One home: the cell carries the source of tools.bootstrap's platform functions and settings (it runs before
    `tools` is importable), so an unknown platform fails in the cell exactly as in the module."""
    import inspect

    source = cells.bootstrap_source("PT-CPU", FORK)
    for name in cells.SHARED_FUNCTIONS:
        assert inspect.getsource(getattr(bootstrap, name)).rstrip() in source, name
    for name in cells.SHARED_SETTINGS:
        assert f"{name} = " in source, name
    namespace: dict = {}
    exec(source.split("\ncourse_root = course_folder()")[0], namespace)
    with pytest.raises(namespace["CourseSetupError"], match="无法识别"):
        namespace["detect_platform"]({"GRPO_COURSE_PLATFORM": "kaggle"}, modules={})
    with pytest.raises(bootstrap.BootstrapError, match="无法识别"):
        bootstrap.detect_platform({"GRPO_COURSE_PLATFORM": "kaggle"}, modules={})
    assert namespace["clone_dir"]("colab", "someone/grpo-fork", {}) == bootstrap.clone_dir(
        "colab", "someone/grpo-fork", {}
    )


def test_bootstrap_cell_rejects_an_unknown_profile():
    with pytest.raises(ValueError):
        cells.bootstrap_source("GPU-ONLY", FORK)


ENVIRONMENTS = [
    ({}, "local"),
    ({"COLAB_RELEASE_TAG": "release-colab_20260101"}, "colab"),
    ({"MODELSCOPE_ENVIRONMENT": "dsw"}, "modelscope"),
    ({"DSW_INSTANCE_ID": "dsw-123"}, "modelscope"),
    ({"DSW_REGION": "cn-hangzhou"}, "modelscope"),
    ({"COLAB_RELEASE_TAG": "x", "GRPO_COURSE_PLATFORM": "modelscope"}, "modelscope"),
    ({"MODELSCOPE_ENVIRONMENT": "dsw", "GRPO_COURSE_PLATFORM": "local"}, "local"),
]


@pytest.mark.parametrize("environ,expected", ENVIRONMENTS)
def test_detect_platform(environ, expected):
    assert bootstrap.detect_platform(environ, modules={}) == expected


def test_detect_platform_google_colab_module_and_bad_override():
    assert bootstrap.detect_platform({}, modules={"google.colab": object()}) == "colab"
    with pytest.raises(bootstrap.BootstrapError):
        bootstrap.detect_platform({"GRPO_COURSE_PLATFORM": "kaggle"}, modules={})


def _cell_course_folder(source: str, cwd: Path, environ: dict, monkeypatch) -> Path:
    """Run the cell's own ``course_folder()`` (not the clone / import part) under ``environ``."""
    definitions = source.split("\ncourse_root = course_folder()")[0]
    for key in [
        k for k in os.environ if k.startswith(("COLAB_", "MODELSCOPE_", "DSW_", "GRPO_COURSE_", "GRPO_PLATFORM_"))
    ]:
        monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(cwd)
    namespace: dict = {}
    exec(compile(definitions, "<bootstrap cell>", "exec"), namespace)
    return namespace["course_folder"]()


@pytest.mark.parametrize("environ,expected", [e for e in ENVIRONMENTS if e[1] != "local"])
def test_cell_clone_folder_matches_the_platform(environ, expected, tmp_path, monkeypatch):
    source = cells.bootstrap_source("BASE-CPU", FORK)
    folder = _cell_course_folder(source, tmp_path, environ, monkeypatch)
    assert folder == bootstrap.clone_dir(expected, FORK["repository"], environ)
    assert folder == Path({"colab": "/content", "modelscope": "/mnt/workspace"}[expected]) / "grpo-fork"
    rooted = dict(environ, GRPO_PLATFORM_ROOT=str(tmp_path / "fake-root"))
    expected_parent = {"colab": "content", "modelscope": "mnt/workspace"}[expected]
    assert (
        _cell_course_folder(source, tmp_path, rooted, monkeypatch)
        == tmp_path / "fake-root" / expected_parent / "grpo-fork"
    )
    assert (
        bootstrap.clone_dir(expected, FORK["repository"], rooted)
        == tmp_path / "fake-root" / expected_parent / "grpo-fork"
    )
    override = dict(environ, GRPO_COURSE_DIR=str(tmp_path / "elsewhere"))
    assert _cell_course_folder(source, tmp_path, override, monkeypatch) == tmp_path / "elsewhere"


def test_cell_finds_the_checkout_above_the_notebook(tmp_path, monkeypatch):
    source = cells.bootstrap_source("BASE-CPU", FORK)
    inside = ROOT / "tools" / "chain"  # any folder inside the course
    assert _cell_course_folder(source, inside, {"COLAB_RELEASE_TAG": "x"}, monkeypatch) == ROOT
    # locally, a course importable from this Python (PYTHONPATH / pip install -e) is used as it is
    monkeypatch.syspath_prepend(str(ROOT))
    assert _cell_course_folder(source, tmp_path, {}, monkeypatch) == ROOT


def _git(*args, cwd):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    return subprocess.run(git + list(args), cwd=cwd, check=True, capture_output=True, text=True)


def _stamped_repo(folder: Path, stamp: str) -> None:
    (folder / "tools").mkdir(parents=True, exist_ok=True)
    (folder / "tools" / "bootstrap.py").write_text("")
    (folder / "course.toml").write_text('[course]\nrepository = "someone/grpo-fork"\n')
    nb_dir = folder / "notebooks" / "nb01_group_advantages"
    nb_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(
        nbformat.v4.new_notebook(metadata={"course": {"stamp": stamp}}), nb_dir / "nb01_group_advantages.ipynb"
    )


@pytest.mark.parametrize("update", [False, True])
def test_cell_offers_the_update_of_a_reused_stale_clone(update, tmp_path, monkeypatch, capsys):
    """A notebook newer than the clone it reuses says so and prints the git command; with
    GRPO_COURSE_UPDATE=1 it pulls (fast-forward) from a local file:// origin."""
    origin, clone = tmp_path / "origin", tmp_path / "content" / "grpo-fork"
    _stamped_repo(origin, "000000000old")
    _git("init", "-q", "-b", "dev", cwd=origin)
    _git("add", "-A", cwd=origin)
    _git("commit", "-q", "-m", "old", cwd=origin)
    _git("clone", "-q", origin.as_uri(), str(clone), cwd=tmp_path)  # an earlier session's clone
    _stamped_repo(origin, "000000000new")
    _git("commit", "-q", "-am", "new release", cwd=origin)
    source = cells.bootstrap_source("BASE-CPU", FORK, "nb01_group_advantages", "000000000new")
    body = source.rsplit("\nsys.path.insert(0, str(course_root))", 1)[0]  # stop before importing the clone's tools
    for key in [
        k for k in os.environ if k.startswith(("COLAB_", "MODELSCOPE_", "DSW_", "GRPO_COURSE_", "GRPO_PLATFORM_"))
    ]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "simulated")
    monkeypatch.setenv("GRPO_COURSE_DIR", str(clone))
    if update:
        monkeypatch.setenv("GRPO_COURSE_UPDATE", "1")
    monkeypatch.chdir(tmp_path)
    exec(compile(body, "<bootstrap cell>", "exec"), {})
    shown = capsys.readouterr().out
    now = json.loads((clone / "notebooks" / "nb01_group_advantages" / "nb01_group_advantages.ipynb").read_text())
    if update:
        assert "git pull --ff-only" in shown and "注意：课程代码" not in shown, shown
        assert now["metadata"]["course"]["stamp"] == "000000000new"
    else:
        assert "注意：课程代码" in shown and "000000000old" in shown and "000000000new" in shown, shown
        assert f"git -C {clone} pull --ff-only" in shown and "GRPO_COURSE_UPDATE=1" in shown, shown
        assert now["metadata"]["course"]["stamp"] == "000000000old"


# --------------------------------------------------------------------------- what gets installed
def _requirement(name, op, version, source):
    return Requirement(name, op, version, source)


def test_install_specs_keep_the_platform_torch():
    wanted = [
        _requirement("torch", "==", "2.13.0", "base-cpu.txt:3"),
        _requirement("transformers", "==", "5.23.0", "pt-cpu.txt:3"),
        _requirement("numpy", ">=", "1.26", "base-cpu.txt:4"),
    ]
    assert bootstrap.install_specs(wanted, torch_version="2.6.0+cu124") == ["transformers==5.23.0", "numpy>=1.26"]
    # no torch at all: the CPU profiles install their pinned torch ...
    assert bootstrap.install_specs(wanted, torch_version=None)[0] == "torch==2.13.0"
    # ... but PT-RL-CUDA's torch (no requirement file line: a CUDA wheel chosen by hand) never
    cuda_torch = _requirement("torch", ">=", "2.4", "CUDA build, installed separately")
    assert bootstrap.install_specs([cuda_torch], torch_version=None) == []


def _fake_course(root: Path, base_lines: list[str]) -> Path:
    (root / "environments").mkdir(parents=True)
    (root / "environments" / "base-cpu.txt").write_text("\n".join(base_lines) + "\n", encoding="utf-8")
    (root / "course.toml").write_text('[course]\nrepository = "a/b"\nbranch = "main"\n', encoding="utf-8")
    return root


def test_failing_requirements_follow_the_preflight(tmp_path):
    import torch

    root = _fake_course(
        tmp_path,
        [
            "torch==99.0",  # any installed torch >= 2.4 is accepted: not reinstalled
            "numpy>=1.0",  # installed and new enough
            "pytest==1.0",  # a pin is read as "this or newer": never downgraded
            "grpo-course-absent-package==1.0",  # missing
            "nbformat==999.0",  # too old
        ],
    )
    names = [r.name for r in bootstrap.failing_requirements("BASE-CPU", root)]
    assert names == ["grpo-course-absent-package", "nbformat"]
    assert bootstrap.platform_torch_version().split("+")[0] == torch.__version__.split("+")[0]


def test_install_command_pins_the_installed_torch(tmp_path, monkeypatch):
    root = _fake_course(tmp_path, ["torch==2.13.0", "grpo-course-absent-package==1.0"])
    seen = {}

    def fake_pip(command, **kwargs):  # records the command instead of installing
        seen["command"] = command
        seen["constraints"] = Path(command[command.index("-c") + 1]).read_text(encoding="utf-8")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(bootstrap.subprocess, "run", fake_pip)
    assert bootstrap.ensure_requirements("BASE-CPU", root) == ["grpo-course-absent-package==1.0"]
    command = seen["command"]
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    assert command[-1] == "grpo-course-absent-package==1.0"
    assert not any(part.startswith("torch") for part in command)
    assert seen["constraints"] == f"torch=={bootstrap.platform_torch_version()}\n"


def test_failed_install_is_a_chinese_message(tmp_path, monkeypatch):
    root = _fake_course(tmp_path, ["grpo-course-absent-package==1.0"])
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: pip can only fail, and fails fast
    with pytest.raises(bootstrap.BootstrapError) as caught:
        bootstrap.ensure_requirements("BASE-CPU", root)
    shown = "\n".join(caught.value._render_traceback_())
    assert "安装依赖失败" in shown and "grpo-course-absent-package" in shown and "pip install" in shown
    assert "Traceback" not in shown


# --------------------------------------------------------------------------- README table
def test_readme_table_update_says_one_line_unless_asked_to_print(tmp_path, monkeypatch, capsys):
    """`make release` runs the table update: one line saying what changed, the table only with --print."""
    for name in ("README.md", "course.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    for name in ("solutions", "notebooks"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.setattr(readme_table, "ROOT", tmp_path)
    assert readme_table.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "notebook table" in out and "| [`" not in out, out
    assert readme_table.main(["--print"]) == 0
    assert "| [`nb01_group_advantages`]" in capsys.readouterr().out


def test_readme_table_is_current_and_restamps_a_fork(tmp_path):
    assert readme_table.main(["--check"]) == 0, "run `python -m tools.chain.readme_table`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shutil.copy2(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    (tmp_path / "course.toml").write_text(
        '[course]\nrepository = "someone/grpo-fork"\nbranch = "dev"\n', encoding="utf-8"
    )
    block = readme_table.render(tmp_path, readme)
    released = sorted(p.parent.name for p in (ROOT / "notebooks").glob("*/*.ipynb"))
    for name in released:
        assert (
            f"https://colab.research.google.com/github/someone/grpo-fork/blob/dev/notebooks/{name}/{name}.ipynb"
            in block
        )
    assert "grpo-course/grpo-in-practice" not in block
    rows = [line for line in block.splitlines() if line.startswith("| ") and "nb0" in line]
    sources = {p.stem for p in (ROOT / "solutions").glob("nb*.py")}
    assert sources <= {re.search(r"nb\d\d[a-z]?_[a-z0-9_]+", row).group(0) for row in rows}
    assert all(len(readme_table._cells(row)) == 4 for row in rows)
