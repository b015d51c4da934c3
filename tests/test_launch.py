"""One-click launch: badges and bootstrap cell from course.toml, the simulated Colab / ModelScope start
(a learner notebook alone in an empty folder clones the course from a local `file://` URL), the
failure messages, the README table and `make lab`."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tools import bootstrap
from tools.chain import cells, readme_table
from tools.preflight import PROFILES, Requirement

ROOT = Path(__file__).resolve().parents[1]
FORK = {"repository": "someone/grpo-fork", "branch": "dev"}


def learner_notebook() -> Path | None:
    """Notebook 1's learner version (any learner notebook while notebook 1 is not released)."""
    preferred = ROOT / "notebooks" / "nb01_group_advantages" / "nb01_group_advantages.ipynb"
    if preferred.is_file():
        return preferred
    found = sorted(ROOT.glob("notebooks/*/*.ipynb"))
    return found[0] if found else None


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


# --------------------------------------------------------------------------- release stamp
def test_release_stamp_is_in_every_notebook_and_follows_the_source(tmp_path):
    """Each learner notebook carries its release stamp (metadata and bootstrap cell); the stamp is a hash of
    the lesson's source and course.toml only, so it changes with the lesson, not with every commit."""
    for path in sorted(ROOT.glob("notebooks/*/*.ipynb")):
        name = path.parent.name
        nb = nbformat.read(path, as_version=4)
        stamp = nb.metadata["course"]["stamp"]
        assert stamp == cells.release_stamp(name, ROOT) and re.fullmatch(r"[0-9a-f]{12}", stamp)
        assert (
            f'STAMP = "{nb.metadata["course"]["profile"]}", "{name}", "{stamp}"'
            in nb.cells[_bootstrap_index(nb)].source
        )
    (tmp_path / "solutions").mkdir()
    shutil.copy2(ROOT / "course.toml", tmp_path / "course.toml")
    (tmp_path / "solutions" / "nb01_x.py").write_text("# one\n")
    first = cells.release_stamp("nb01_x", tmp_path)
    assert cells.release_stamp("nb01_x", tmp_path) == first
    (tmp_path / "solutions" / "nb01_x.py").write_text("# two\n")
    assert cells.release_stamp("nb01_x", tmp_path) != first
    # an answer (or hidden test) is not part of the learner version: changing it keeps the stamp
    answer = "x = 1\n### BEGIN SOLUTION\ny = {}\n### END SOLUTION\n"
    (tmp_path / "solutions" / "nb01_x.py").write_text(answer.format(1))
    with_answer = cells.release_stamp("nb01_x", tmp_path)
    (tmp_path / "solutions" / "nb01_x.py").write_text(answer.format(2))
    assert cells.release_stamp("nb01_x", tmp_path) == with_answer


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


# --------------------------------------------------------------------------- simulated platform start
def _snapshot(destination: Path) -> Path:
    """A git repository holding the working tree as it is now (tracked + untracked, not ignored)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git = ["git", "-c", "user.name=launch-test", "-c", "user.email=launch-test@example.invalid"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=destination, check=True)
    subprocess.run(git + ["add", "-A"], cwd=destination, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "snapshot"], cwd=destination, check=True)
    # a branch whose profile cannot be installed offline, for the install-failure path
    subprocess.run(["git", "checkout", "-q", "-b", "broken-install"], cwd=destination, check=True)
    with open(destination / "environments" / "base-cpu.txt", "a", encoding="utf-8") as handle:
        handle.write("grpo-course-absent-package==1.0\n")
    subprocess.run(git + ["commit", "-q", "-am", "unsatisfiable requirement"], cwd=destination, check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=destination, check=True)
    return destination


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    return _snapshot(tmp_path_factory.mktemp("origin"))


PROBE = "import sys, tools\nprint('PROBE', tools.__file__, sys.path[0], 'tools.grading' in sys.modules, sep='|')"


def _platform_env(monkeypatch, marker: dict, **settings):
    for key in [
        k for k in os.environ if k.startswith(("COLAB_", "MODELSCOPE_", "DSW_", "GRPO_COURSE_", "GRPO_PLATFORM_"))
    ]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the kernel must find the course by itself
    for key, value in {**marker, **settings}.items():
        monkeypatch.setenv(key, value)


def _execute(nb, cwd: Path, indices: list[int], stop_at_error: bool = True, kernel_name: str = "python3"):
    """Run the cells ``indices`` in order in one fresh kernel (like Run All: stop at the first error)."""
    import tempfile

    from nbclient import NotebookClient
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="grpo-kernel-") as sockets:
        config = Config()  # IPC, like tools.chain.notebooks.execute: no TCP port, no "without encryption" warning
        config.KernelManager.transport = "ipc"
        config.KernelManager.connection_file = os.path.join(sockets, "kernel.json")
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name=kernel_name,
            allow_errors=True,
            resources={"metadata": {"path": str(cwd)}},
            config=config,
        )
        with client.setup_kernel():
            for index in indices:
                client.execute_cell(nb.cells[index], index)
                if stop_at_error and _errors(nb.cells[index]):
                    break
    return nb


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _plain_message(error: dict) -> str:
    """The error as the learner sees it; fails when it is a Python traceback."""
    shown = "\n".join(error["traceback"])
    assert "Traceback" not in shown and 'File "' not in shown and "---->" not in shown, shown
    return shown


def _single_notebook(tmp_path: Path) -> tuple[nbformat.NotebookNode, Path, Path]:
    source = learner_notebook()
    if source is None:
        pytest.skip("no learner notebook under notebooks/ (run `make release`)")
    folder = tmp_path / "content"  # an empty folder, as on Colab: only the notebook
    folder.mkdir()
    copy_path = folder / source.name
    shutil.copy2(source, copy_path)
    return nbformat.read(copy_path, as_version=4), folder, source


def _bootstrap_index(nb) -> int:
    for index, cell in enumerate(nb.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "bootstrap":
            return index
    raise AssertionError("no bootstrap cell (grade_id 'bootstrap') in the learner notebook")


@pytest.mark.slow
def test_simulated_colab_start_clones_and_runs_the_first_cells(origin, tmp_path, monkeypatch):
    nb, folder, source = _single_notebook(tmp_path)
    clone = tmp_path / "root" / "content" / "grpo-in-practice"  # Colab's default folder under a temporary "/"
    _platform_env(
        monkeypatch,
        {"COLAB_RELEASE_TAG": "release-colab-simulated"},
        GRPO_COURSE_REPO_URL=origin.as_uri(),
        GRPO_COURSE_BRANCH="main",
        GRPO_PLATFORM_ROOT=str(tmp_path / "root"),
    )
    boot = _bootstrap_index(nb)
    profile = nb.metadata["course"]["profile"]
    first_todo = next(
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")
    )
    # bootstrap, a probe, the cells up to the first TODO's failure, the bootstrap again, the probe again
    nb.cells.insert(boot + 1, nbformat.v4.new_code_cell(PROBE))
    nb.cells.append(copy.deepcopy(nb.cells[boot]))
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    n = len(nb.cells)
    ran = _execute(nb, folder, list(range(boot, n - 2)), stop_at_error=True)
    failing = [i for i in range(boot, n - 2) if _errors(ran.cells[i])]
    assert failing, "the learner notebook should stop with NotImplementedError at its first TODO"
    _execute(ran, folder, [n - 2, n - 1], stop_at_error=False)  # fresh kernel: "already in place"

    first = ran.cells[boot]
    assert not _errors(first), _errors(first)
    log = _text(first)
    assert "正在下载课程代码" in log and origin.as_uri() in log, log
    assert f"preflight {profile}: ok" in log, log
    assert "正在安装" not in log, "the venv satisfies the profile: nothing may be installed"
    assert (clone / "course.toml").is_file()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    assert head == subprocess.run(["git", "rev-parse", "main"], cwd=origin, capture_output=True, text=True).stdout

    marker, tools_file, path0, graded = _text(ran.cells[boot + 1]).strip().split("|")
    assert tools_file == str(clone.resolve() / "tools" / "__init__.py") and path0 == str(clone.resolve())
    assert graded == "True"  # tools.grading imported by the locked cell, before any learner code

    stop = failing[0]
    error = _errors(ran.cells[stop])[0]
    assert error["ename"] == "NotImplementedError", error
    assert stop > first_todo + 1  # after the first TODO's stub (its index moved by the probe)
    for index in range(boot, stop):
        assert not _errors(ran.cells[index]), (index, _errors(ran.cells[index]))

    again = ran.cells[n - 2]
    assert not _errors(again)
    assert "正在下载课程代码" not in _text(again) and "正在安装" not in _text(again), _text(again)
    assert _text(ran.cells[n - 1]).strip().split("|")[1:] == [tools_file, path0, "True"]
    assert not (folder / "grpo-in-practice").exists() and sorted(p.name for p in folder.iterdir()) == [source.name]


@pytest.mark.slow
def test_simulated_modelscope_start_is_idempotent(origin, tmp_path, monkeypatch):
    nb, folder, _ = _single_notebook(tmp_path)
    clone = tmp_path / "root" / "mnt" / "workspace" / "grpo-in-practice"  # ModelScope's persistent disk
    subprocess.run(["git", "clone", "-q", origin.as_uri(), str(clone)], check=True)  # an earlier session's clone
    _platform_env(
        monkeypatch,
        {"MODELSCOPE_ENVIRONMENT": "dsw", "DSW_INSTANCE_ID": "dsw-simulated"},
        GRPO_COURSE_REPO_URL=(tmp_path / "must-not-be-used").as_uri(),
        GRPO_PLATFORM_ROOT=str(tmp_path / "root"),
    )
    boot = _bootstrap_index(nb)
    profile = nb.metadata["course"]["profile"]
    nb.cells[boot + 1 :] = [copy.deepcopy(nb.cells[boot]), nbformat.v4.new_code_cell(PROBE)]
    ran = _execute(nb, folder, [boot, boot + 1, boot + 2])
    first, second = ran.cells[boot], ran.cells[boot + 1]
    assert not _errors(first) and not _errors(second), (_errors(first), _errors(second))
    shown = _text(first).strip().splitlines()
    assert shown[0].startswith(f"环境检查表 preflight {profile}") and "状态 status" in shown[1], shown
    assert re.fullmatch(rf"preflight {profile}: ok（\d+ 项检查全部通过）", shown[-1]), shown
    assert "注意：课程代码" not in _text(first)  # the reused clone holds this very release: no update offered
    assert second.outputs == []  # a second run does nothing
    assert _text(ran.cells[boot + 2]).split("|")[2] == str(clone.resolve())


REALISTIC = "GRPO_REALISTIC_LAUNCH"
# The "platform" torch of the realistic launch, preinstalled in the fresh venv. Offline, this machine only
# has torch 2.13.0+cpu that imports (its 2.14.1 wheel is a CUDA build that needs cuDNN & co.): the test
# therefore checks that the preinstalled torch is left untouched (same files) rather than a newer version;
# GRPO_REALISTIC_TORCH=<wheel or spec> picks another one where the registry offers it.
PLATFORM_TORCH = os.environ.get(
    "GRPO_REALISTIC_TORCH", "/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
)
TORCH_DEPENDENCIES = ("filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec", "setuptools")


def _pip(python: Path, *args: str, env: dict | None = None) -> None:
    done = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, f"pip {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get(REALISTIC) != "1",
    reason=f"opt-in, a few minutes and ~1.5 GB of disk: {REALISTIC}=1 pytest tests/test_launch.py -k realistic",
)
def test_realistic_platform_launch(origin, tmp_path, monkeypatch):
    """A fresh venv (not the development one) with its own, newer torch and a Jupyter kernel, as on Colab;
    the learner notebook alone in <root>/content; the bootstrap clones from a local file:// repository into
    Colab's default folder and installs the BASE-CPU profile through the real pip path, offline from a
    local wheelhouse, keeping the platform's torch. Then ModelScope's default folder, same venv."""
    python = os.environ.get("GRPO_REALISTIC_PYTHON") or shutil.which("python3.11") or sys.executable
    if sys.base_prefix != sys.prefix and Path(python).resolve() == Path(sys.executable).resolve():
        python = str(Path(sys.base_prefix) / "bin" / "python3")
    venv = tmp_path / "platform-venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    vpy = venv / "bin" / "python"
    torch_source = PLATFORM_TORCH if Path(PLATFORM_TORCH).is_file() else "torch==2.13.0"
    _pip(vpy, "install", "-q", "--no-deps", torch_source)
    _pip(vpy, "install", "-q", *TORCH_DEPENDENCIES, "ipykernel")
    probe = "import torch, pathlib; print(torch.__version__, pathlib.Path(torch.__file__).stat().st_mtime_ns)"
    platform_torch, torch_mtime = subprocess.run(
        [str(vpy), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = [line.split("#")[0].strip() for line in (ROOT / "environments" / "base-cpu.txt").read_text().splitlines()]
    wanted = [line for line in wanted if line and not line.startswith(("-", "torch"))]
    wheelhouse = tmp_path / "wheelhouse"
    _pip(vpy, "download", "-q", "-d", str(wheelhouse), *wanted)  # once, from the registry / local mirrors
    kernels = tmp_path / "kernels"
    subprocess.run(
        [str(vpy), "-m", "ipykernel", "install", "--prefix", str(kernels), "--name", "platform-python"],
        check=True,
        capture_output=True,
        timeout=120,
    )

    root = tmp_path / "root"
    nb, _, source = _single_notebook(tmp_path)
    content = root / "content"
    content.mkdir(parents=True)
    shutil.copy2(source, content / source.name)
    for key in [k for k in os.environ if k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHONHOME"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("JUPYTER_PATH", str(kernels / "share" / "jupyter"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline: the wheelhouse is the only source
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheelhouse))
    monkeypatch.setenv("PATH", os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"]))
    _platform_env(
        monkeypatch,
        {"COLAB_RELEASE_TAG": "release-colab-realistic"},
        GRPO_COURSE_REPO_URL=origin.as_uri(),
        GRPO_PLATFORM_ROOT=str(root),
    )
    boot = _bootstrap_index(nb)
    ran = _execute(nb, content, list(range(boot, len(nb.cells))), kernel_name="platform-python")
    log = _text(ran.cells[boot])
    assert not _errors(ran.cells[boot]), (_errors(ran.cells[boot]), log)
    clone = root / "content" / "grpo-in-practice"
    assert "正在下载课程代码" in log and (clone / "course.toml").is_file(), log
    assert f"正在安装 BASE-CPU 所需的依赖（保留已有的 torch {platform_torch}）" in log, log
    assert "preflight BASE-CPU: ok" in log, log
    errors = [(i, _errors(c)[0]["ename"]) for i, c in enumerate(ran.cells) if _errors(c)]
    assert errors and errors[0][1] == "NotImplementedError", errors
    after = subprocess.run([str(vpy), "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert after == [platform_torch, torch_mtime]  # the platform's torch was kept, not reinstalled

    # ModelScope: the persistent disk /mnt/workspace, the same (now complete) environment
    workspace = root / "mnt" / "workspace"
    workspace.mkdir(parents=True)
    shutil.copy2(source, workspace / source.name)
    _platform_env(
        monkeypatch,
        {"MODELSCOPE_ENVIRONMENT": "dsw", "DSW_INSTANCE_ID": "dsw-realistic"},
        GRPO_COURSE_REPO_URL=origin.as_uri(),
        GRPO_PLATFORM_ROOT=str(root),
    )
    nb = nbformat.read(workspace / source.name, as_version=4)
    ran = _execute(nb, workspace, [boot], kernel_name="platform-python")
    log = _text(ran.cells[boot])
    assert not _errors(ran.cells[boot]) and (workspace / "grpo-in-practice" / "course.toml").is_file(), log
    assert "正在安装" not in log and "preflight BASE-CPU: ok" in log, log
    version = subprocess.run([str(vpy), "-V"], capture_output=True, text=True).stdout.strip()
    print(
        f"realistic launch: {version}, platform torch {platform_torch}, "
        f"wheelhouse {len(list(wheelhouse.iterdir()))} files",
        file=sys.stderr,
    )


@pytest.mark.slow
@pytest.mark.parametrize("url_kind", ["missing-repository", "offline"])
def test_clone_failure_is_a_clear_message(url_kind, tmp_path, monkeypatch):
    nb, folder, _ = _single_notebook(tmp_path)
    if url_kind == "offline":
        import socket

        with socket.socket() as probe:  # a port nobody listens on: connection refused, as offline
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"http://127.0.0.1:{port}/grpo-course/grpo-in-practice.git"
    else:
        url = (tmp_path / "no-such-repository").as_uri()
    clone = tmp_path / "clones" / "grpo-in-practice"
    _platform_env(monkeypatch, {"COLAB_RELEASE_TAG": "x"}, GRPO_COURSE_REPO_URL=url, GRPO_COURSE_DIR=str(clone))
    boot = _bootstrap_index(nb)
    ran = _execute(nb, folder, [boot])
    errors = _errors(ran.cells[boot])
    assert len(errors) == 1 and errors[0]["ename"] == "CourseSetupError", errors
    shown = _plain_message(errors[0])
    assert "无法下载课程代码" in shown and url in _text(ran.cells[boot]) and "GRPO_COURSE_REPO_URL" in shown
    assert not (clone / "course.toml").exists()


@pytest.mark.slow
def test_install_failure_is_a_clear_message(origin, tmp_path, monkeypatch):
    nb, folder, _ = _single_notebook(tmp_path)
    if nb.metadata["course"]["profile"] not in ("BASE-CPU", "PT-CPU"):
        pytest.skip("the broken-install branch breaks base-cpu.txt")
    clone = tmp_path / "clones" / "grpo-in-practice"
    _platform_env(
        monkeypatch,
        {"COLAB_RELEASE_TAG": "x"},
        GRPO_COURSE_REPO_URL=origin.as_uri(),
        GRPO_COURSE_BRANCH="broken-install",
        GRPO_COURSE_DIR=str(clone),
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline pip: the unsatisfiable requirement fails fast
    boot = _bootstrap_index(nb)
    ran = _execute(nb, folder, [boot])
    errors = _errors(ran.cells[boot])
    assert len(errors) == 1 and errors[0]["ename"] == "BootstrapError", errors
    shown = _plain_message(errors[0])
    assert "安装依赖失败" in shown and "grpo-course-absent-package==1.0" in shown, shown
    assert "正在安装" in _text(ran.cells[boot])


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


# --------------------------------------------------------------------------- make lab
def _lab_env(tmp_path: Path) -> dict:
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
    )
    env.pop("PYTHONPATH", None)
    return env


def _wait_for_url(process, pattern=r"(http://127\.0\.0\.1:\d+/\S*\?token=\w+)", timeout=180) -> tuple[str, list[str]]:
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            # keep reading, as a terminal does: the server logs to the same pipe, and a full pipe would block it
            # (even in its shutdown, when it logs the signal it received)
            process.drain = threading.Thread(target=lambda: seen.extend(process.stdout), daemon=True)
            process.drain.start()
            return found.group(1), seen
    raise AssertionError("tools.cli.lab printed no URL:\n" + "".join(seen))


def _hang_report(pid: int) -> str:
    """What a process that does not exit is doing: its state and signal masks, and those of its descendants."""
    from tools.cli.lab import descendants

    lines = []
    for each in [pid, *descendants(pid)]:
        try:
            status = Path(f"/proc/{each}/status").read_text()
            keep = [
                line for line in status.splitlines() if line.split(":")[0] in ("State", "SigBlk", "SigIgn", "SigCgt")
            ]
            wchan = Path(f"/proc/{each}/wchan").read_text()
        except OSError:
            continue
        lines.append(f"{each} {_cmdline(each)[:120]!r} {' '.join(keep)} wchan={wchan}")
    return "\n".join(lines)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:  # gone meanwhile
        return ""


def _get(url: str, token: str):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    return urllib.request.urlopen(request, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["make-sigterm", "module-sighup"])
def test_lab_stops_server_and_kernels_on_sigterm_and_sighup(how, tmp_path):
    """`timeout 60 make lab` sends SIGTERM to make's process group; a closed terminal sends SIGHUP: in both
    cases the server and its kernels must be gone afterwards (none left running with parent 1)."""
    from tools.cli.lab import alive, descendants

    if how == "make-sigterm":
        command = ["make", "-s", "lab", "PORT=0", "LAB_FLAGS=--no-browser", f"VENV={Path(sys.executable).parents[1]}"]
    else:
        command = [sys.executable, "-m", "tools.cli.lab", "--role", "learner", "--no-browser", "--port", "0"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=_lab_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    below: list[int] = []
    try:
        url, seen = _wait_for_url(process)
        base, token = url.split("/lab")[0], url.split("token=")[1]
        request = urllib.request.Request(
            f"{base}/api/kernels",
            data=b"{}",
            method="POST",
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            kernel = json.load(reply)
        with _get(f"{base}/api/kernels/{kernel['id']}", token) as reply:
            assert json.load(reply)["id"] == kernel["id"]  # the server knows the kernel it started
        # (its execution_state stays "starting" until a client connects, so wait for the kernel process itself)
        deadline, kernels = time.monotonic() + 60, []
        while time.monotonic() < deadline and not kernels:
            below = descendants(process.pid)
            kernels = [pid for pid in below if "ipykernel" in _cmdline(pid)]
            time.sleep(0.2)
        assert kernels, f"no kernel process found below {process.pid}: {below}"
        if how == "make-sigterm":
            os.killpg(process.pid, signal.SIGTERM)  # what `timeout` does to make's process group
        else:
            os.kill(process.pid, signal.SIGHUP)  # the terminal closed: only the lab process is told
        process.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(pid) for pid in below):
            time.sleep(0.3)
        left = [pid for pid in below if alive(pid)]
        assert not left, f"still running after {how}: {left}"
        process.drain.join(timeout=30)  # everything it printed, up to its exit
        output = "".join(seen)
        assert "正在停止 JupyterLab" in output, output
    finally:
        for pid in below:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.slow
def test_lab_learner_role_serves_the_work_copy_without_instructor_panels(tmp_path):
    """The learner server opens work/ (copies of notebooks/), has no formgrader, and a second start
    prints the running server's URL instead of starting another one; a busy port is reported."""
    from tools.cli.lab import INSTRUCTOR_ONLY_LAB_PLUGINS

    env = _lab_env(tmp_path)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.cli.lab", "--no-browser", "--port", str(busy.getsockname()[1])],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        url, seen = _wait_for_url(process)
        assert any(f"端口 {busy.getsockname()[1]} 已被" in line for line in seen), seen
        base, token = url.split("/lab")[0], url.split("token=")[1]
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert reply.status == 200 and b"JupyterLab" in reply.read()
        with _get(f"{base}/api/contents?content=1", token) as reply:
            listed = {item["name"] for item in json.load(reply)["content"]}
        released = {p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()}
        assert released <= listed, (released, listed)  # the root is work/, holding a copy of each notebook
        assert (ROOT / "work" / ".workspace.json").is_file()
        with pytest.raises(urllib.error.HTTPError) as missing:
            _get(f"{base}/formgrader", token)
        assert missing.value.code == 404
        with _get(f"{base}/lab", token) as reply:  # the page config the browser receives
            page = reply.read().decode()
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S).group(1))
        disabled = config.get("disabledExtensions", [])
        assert set(INSTRUCTOR_ONLY_LAB_PLUGINS) <= set(disabled), disabled
        with _get(f"{base}/courses?token={token}", token) as reply:  # the Course List works (no exchange error)
            courses = json.load(reply)
        assert courses.get("success") is True, courses  # not "Error fetching courses!"
        again = subprocess.run(
            [sys.executable, "-m", "tools.cli.lab", "--no-browser"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 0 and "已经在运行" in again.stdout and url in again.stdout, again.stdout
    finally:
        busy.close()
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does
        hung = ""
        try:
            process.wait(timeout=60)  # (the server's own clean-up may take a while on a busy machine)
        except subprocess.TimeoutExpired:
            hung = _hang_report(process.pid)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, f"no clean exit after Ctrl-C:\n{hung}\n--- output:\n{''.join(seen[-40:])}"


@pytest.mark.slow
def test_local_exchange_release_fetch_submit_collect(tmp_path):
    """The generated nbgrader settings give one machine a working exchange: release -> fetch -> submit ->
    collect with nbgrader's own commands, no "exchange directory does not exist" error."""
    import tools.chain.notebooks as chain
    from tools.cli.lab import ensure_exchange, write_config_dir

    name = "nb01_group_advantages"
    root = tmp_path / "course"
    (root / "autograde").mkdir(parents=True)
    shutil.copy2(ROOT / "course.toml", root / "course.toml")
    shutil.copy2(ROOT / "autograde" / "nbgrader_config.py", root / "autograde" / "nbgrader_config.py")
    chain.build([name], course=root / "autograde")
    exchange = ensure_exchange(root)
    config = write_config_dir(root, "instructor")
    env = dict(chain.venv_env(), JUPYTER_CONFIG_PATH=str(config))
    nbgrader = [sys.executable, "-m", "nbgrader"]

    def run(args, cwd):
        done = subprocess.run(nbgrader + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    run(["generate_assignment", name, "--force"], root / "autograde")
    run(["release_assignment", name, "--force"], root / "autograde")
    learner = root / "work"
    learner.mkdir(exist_ok=True)
    listed = run(["list"], learner)
    assert name in listed and "Error" not in listed, listed
    run(["fetch_assignment", name], learner)
    assert (root / "work" / "fetched" / name / f"{name}.ipynb").is_file()  # apart from the work copy work/<name>/
    run(["submit", name], learner)
    run(["collect", name], root / "autograde")
    user = os.environ.get("USER") or __import__("getpass").getuser()
    assert (root / "autograde" / "submitted" / user / name / f"{name}.ipynb").is_file()
    assert (exchange / cells.load_settings(ROOT)["id"] / "outbound" / name).is_dir()
    assert list((root / ".cache" / "lab" / "nbgrader_cache").rglob(f"{name}.ipynb"))  # not in ~/.local/share


# --------------------------------------------------------------------------- the instructor's course config
# A fresh interpreter without site processing: site-packages on sys.path, but no .pth file run, so no editable
# install; it loads a course config from another working directory and names where the preprocessors came from.
_NO_EDITABLE_LOAD = """
import sys
sys.path.append(sys.argv[2])
from traitlets.config.loader import PyFileConfigLoader
from traitlets.utils.importstring import import_item
config = PyFileConfigLoader("nbgrader_config.py", path=sys.argv[1]).load_config()
# the preprocessors are named by import path: imported here as nbconvert imports them when nbgrader registers them
loaded = [import_item(p) if isinstance(p, str) else p for p in config.GenerateFeedback.preprocessors]
print(sorted({sys.modules[p.__module__].__file__ for p in loaded if p.__module__.startswith("autograde")}))
"""


@pytest.mark.slow  # fresh interpreters importing nbgrader (a few seconds each)
def test_course_config_loads_from_any_folder_without_an_editable_install(tmp_path):
    """nbgrader_config.py puts its own checkout first on sys.path: it loads from any working directory with no
    editable install and imports this checkout's grader; a copy without that line fails there (the check can fail)."""
    import sysconfig

    site_packages = sysconfig.get_paths()["purelib"]  # this venv's (a child started with -S would not know it)

    def run(folder):
        return subprocess.run(
            [sys.executable, "-S", "-c", _NO_EDITABLE_LOAD, str(folder), site_packages],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )

    done = run(ROOT / "autograde")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == repr([str(ROOT / "autograde" / "grpo_grader" / "preprocessors.py")]), done.stdout
    copy_dir = tmp_path / "elsewhere"
    copy_dir.mkdir()
    shutil.copy2(ROOT / "autograde" / "nbgrader_config.py", copy_dir / "nbgrader_config.py")  # no package beside it
    failed = run(copy_dir)
    assert failed.returncode != 0 and "No module named 'autograde'" in failed.stderr, failed.stderr[-2000:]


@pytest.mark.slow
def test_lab_instructor_stops_when_the_course_config_does_not_load(tmp_path, monkeypatch, capsys):
    """`make lab-instructor` checks the course config in the server's environment first: when it does not load,
    it says so and starts nothing (the formgrader would otherwise run on nbgrader's defaults)."""
    from tools.cli import lab

    assert lab.course_config_problem(ROOT) is None  # this checkout's config loads and is the course's
    root = tmp_path / "course"
    (root / "autograde").mkdir(parents=True)
    shutil.copy2(ROOT / "course.toml", root / "course.toml")
    text = (ROOT / "autograde" / "nbgrader_config.py").read_text(encoding="utf-8")
    (root / "autograde" / "nbgrader_config.py").write_text(
        text + "\nimport no_such_module_for_this_test\n", encoding="utf-8"
    )
    problem = lab.course_config_problem(root)
    assert problem and "no_such_module_for_this_test" in problem, problem
    monkeypatch.setattr(lab, "ROOT", root)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))  # no server of this user is "running"
    started = []
    monkeypatch.setattr(lab.LabServer, "start", lambda self, *a, **k: started.append(self))
    assert lab.main(["--role", "instructor", "--no-browser", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "无法加载" in err and "no_such_module_for_this_test" in err and "make lab-instructor" in err, err
    assert not started


# --------------------------------------------------------------------------- learners' work copies
def _released_course(tmp_path: Path) -> Path:
    root = tmp_path / "course"
    for name in ("nb01_group_advantages", "nb02_grpo_objective"):
        folder = root / "notebooks" / name
        folder.mkdir(parents=True)
        nb = nbformat.v4.new_notebook(metadata={"course": {"assignment": name, "stamp": "aaaa"}})
        nbformat.write(nb, folder / f"{name}.ipynb")
    return root


def test_workspace_copies_never_overwrites_and_reports_newer_versions(tmp_path, capsys):
    """make workspace copies notebooks/ into work/ once; a new release leaves the learner's copy alone,
    make release (--notice) says it is older, and --update keeps the old copy beside the new one."""
    from tools.cli import workspace

    root = _released_course(tmp_path)
    assert workspace.sync(root, quiet=True) == {"nb01_group_advantages": "current", "nb02_grpo_objective": "current"}
    mine = root / "work" / "nb01_group_advantages" / "nb01_group_advantages.ipynb"
    mine.write_text(
        mine.read_text().replace(
            '"cells": []', '"cells": [{"cell_type": "markdown", "id": "a", "metadata": {}, "source": "my answer"}]'
        )
    )
    work_bytes = mine.read_bytes()
    released = root / "notebooks" / "nb01_group_advantages" / "nb01_group_advantages.ipynb"
    nb = nbformat.read(released, as_version=4)
    nb.metadata["course"]["stamp"] = "bbbb"  # a new release of notebook 1
    nbformat.write(nb, released)
    assert workspace.sync(root, quiet=True)["nb01_group_advantages"] == "older"
    assert mine.read_bytes() == work_bytes
    assert workspace.notice(root) == ["nb01_group_advantages"]
    assert "nb01_group_advantages" in capsys.readouterr().out
    assert (
        workspace.main(["--root", str(root), "--notice"]) == 0 and "make workspace UPDATE=" in capsys.readouterr().out
    )
    kept = workspace.update(["nb01_group_advantages"], root)
    assert len(kept) == 1 and kept[0].read_bytes() == work_bytes
    assert workspace.status(root)["nb01_group_advantages"] == "current"
    assert workspace.notice(root) == []


def test_release_leaves_work_alone_and_git_ignores_it():
    """work/ and autograde/exchange/ are ignored by git; `make release` only runs the notice on work/."""
    ignored = subprocess.run(
        ["git", "check-ignore", "work/x.ipynb", "autograde/exchange/x"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert ignored == ["work/x.ipynb", "autograde/exchange/x"]
    makefile = (ROOT / "Makefile").read_text()
    release = makefile.split("\nrelease:", 1)[1].split("\n\n", 1)[0]
    assert "tools.cli.workspace --notice" in release and "work" not in release.replace("workspace", "")


# --------------------------------------------------------------------------- messages
def test_experiment_rejects_bad_arguments_before_importing_torch():
    """A wrong RUN_MODE / RUN_LABEL is reported (Chinese, exit 2) without importing torch: fast."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tools.cli.experiment", "--mode", "bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 2 and "RUN_MODE 只能是" in done.stderr, done.stderr[-2000:]
    assert not re.search(r"\|\s+torch$", done.stderr, re.M), "torch was imported before the arguments were checked"
    bad_label = subprocess.run(
        [sys.executable, "-m", "tools.cli.experiment", "--label", "a b"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad_label.returncode == 2 and "RUN_LABEL" in bad_label.stderr
    for target in ("experiment", "online"):  # a label with a space reaches the check whole (the Makefile quotes it)
        via_make = subprocess.run(
            ["make", "-s", target, "RUN_LABEL=my run", f"VENV={Path(sys.executable).parents[1]}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert via_make.returncode != 0 and "RUN_LABEL" in via_make.stderr and "'my run'" in via_make.stderr, (
            target,
            via_make.stderr[-2000:],
        )
        assert "unrecognized arguments" not in via_make.stderr
    print(f"bad RUN_MODE reported in {seconds:.2f} s", file=sys.stderr)


@pytest.mark.slow
def test_headless_execution_shows_progress_over_ipc(capfd):
    """The shared helper shows a per-cell tqdm bar and runs the kernel over IPC: no TCP warning."""
    import tools.chain.notebooks as chain

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("x = 1"),
            nbformat.v4.new_markdown_cell("m"),
            nbformat.v4.new_code_cell("import os; print(os.getpid())"),
        ]
    )
    done = chain.execute(nb, ROOT, timeout=60, progress=True, desc="progress-probe")
    captured = capfd.readouterr()
    assert chain.cell_errors(done) == []
    assert "progress-probe" in captured.err and "2/2" in captured.err, captured.err
    assert "without encryption" not in captured.err + captured.out
