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
import subprocess
import sys
import time
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
    assert f"(https://modelscope.cn/notebook/share/github/someone/grpo-fork/blob/dev/{path})" in badges
    source = cells.bootstrap_source("PT-CPU", FORK)
    assert '"https://github.com/someone/grpo-fork.git"' in source
    assert 'os.environ.get("GRPO_COURSE_BRANCH", "dev")' in source
    assert '/ "grpo-fork"' in source and 'PROFILE = "PT-CPU"' in source
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
    assert len(lines) <= 50 and max(len(line) for line in lines) <= 125
    assert "tools.bootstrap.run(PROFILE, course_root)" in lines[-1]


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
    for key in [k for k in os.environ if k.startswith(("COLAB_", "MODELSCOPE_", "DSW_", "GRPO_COURSE_"))]:
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
    override = dict(environ, GRPO_COURSE_DIR=str(tmp_path / "elsewhere"))
    assert _cell_course_folder(source, tmp_path, override, monkeypatch) == tmp_path / "elsewhere"


def test_cell_finds_the_checkout_above_the_notebook(tmp_path, monkeypatch):
    source = cells.bootstrap_source("BASE-CPU", FORK)
    inside = ROOT / "tools" / "build"  # any folder inside the course
    assert _cell_course_folder(source, inside, {"COLAB_RELEASE_TAG": "x"}, monkeypatch) == ROOT
    # locally, a course importable from this Python (PYTHONPATH / pip install -e) is used as it is
    monkeypatch.syspath_prepend(str(ROOT))
    assert _cell_course_folder(source, tmp_path, {}, monkeypatch) == ROOT


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

    root = _fake_course(tmp_path, [
        "torch==99.0",  # any installed torch >= 2.4 is accepted: not reinstalled
        "numpy>=1.0",  # installed and new enough
        "pytest==1.0",  # a pin is read as "this or newer": never downgraded
        "grpo-course-absent-package==1.0",  # missing
        "nbformat==999.0",  # too old
    ])
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
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
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


PROBE = ("import sys, tools\n"
         "print('PROBE', tools.__file__, sys.path[0], 'tools.grading' in sys.modules, sep='|')")


def _platform_env(monkeypatch, marker: dict, **settings):
    for key in [k for k in os.environ if k.startswith(("COLAB_", "MODELSCOPE_", "DSW_", "GRPO_COURSE_"))]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # the kernel must find the course by itself
    for key, value in {**marker, **settings}.items():
        monkeypatch.setenv(key, value)


def _execute(nb, cwd: Path, indices: list[int], stop_at_error: bool = True):
    """Run the cells ``indices`` in order in one fresh kernel (like Run All: stop at the first error)."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
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
    clone = tmp_path / "clones" / "grpo-in-practice"
    _platform_env(monkeypatch, {"COLAB_RELEASE_TAG": "release-colab-simulated"},
                  GRPO_COURSE_REPO_URL=origin.as_uri(), GRPO_COURSE_BRANCH="main", GRPO_COURSE_DIR=str(clone))
    boot = _bootstrap_index(nb)
    profile = nb.metadata["course"]["profile"]
    first_todo = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                      and c.metadata.get("nbgrader", {}).get("solution"))
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
    clone = tmp_path / "workspace" / "grpo-in-practice"
    subprocess.run(["git", "clone", "-q", origin.as_uri(), str(clone)], check=True)  # an earlier session's clone
    _platform_env(monkeypatch, {"MODELSCOPE_ENVIRONMENT": "dsw", "DSW_INSTANCE_ID": "dsw-simulated"},
                  GRPO_COURSE_REPO_URL=(tmp_path / "must-not-be-used").as_uri(), GRPO_COURSE_DIR=str(clone))
    boot = _bootstrap_index(nb)
    profile = nb.metadata["course"]["profile"]
    nb.cells[boot + 1:] = [copy.deepcopy(nb.cells[boot]), nbformat.v4.new_code_cell(PROBE)]
    ran = _execute(nb, folder, [boot, boot + 1, boot + 2])
    first, second = ran.cells[boot], ran.cells[boot + 1]
    assert not _errors(first) and not _errors(second), (_errors(first), _errors(second))
    assert re.fullmatch(rf"preflight {profile}: ok \(\d+ checks\)", _text(first).strip()), _text(first)
    assert second.outputs == []  # a second run does nothing
    assert _text(ran.cells[boot + 2]).split("|")[2] == str(clone.resolve())


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
    _platform_env(monkeypatch, {"COLAB_RELEASE_TAG": "x"}, GRPO_COURSE_REPO_URL=origin.as_uri(),
                  GRPO_COURSE_BRANCH="broken-install", GRPO_COURSE_DIR=str(clone))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline pip: the unsatisfiable requirement fails fast
    boot = _bootstrap_index(nb)
    ran = _execute(nb, folder, [boot])
    errors = _errors(ran.cells[boot])
    assert len(errors) == 1 and errors[0]["ename"] == "BootstrapError", errors
    shown = _plain_message(errors[0])
    assert "安装依赖失败" in shown and "grpo-course-absent-package==1.0" in shown, shown
    assert "正在安装" in _text(ran.cells[boot])


# --------------------------------------------------------------------------- README table
def test_readme_table_is_current_and_restamps_a_fork(tmp_path):
    assert readme_table.main(["--check"]) == 0, "run `python -m tools.chain.readme_table`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shutil.copy2(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    (tmp_path / "course.toml").write_text(
        '[course]\nrepository = "someone/grpo-fork"\nbranch = "dev"\n', encoding="utf-8")
    block = readme_table.render(tmp_path, readme)
    released = sorted(p.parent.name for p in (ROOT / "notebooks").glob("*/*.ipynb"))
    for name in released:
        assert (f"https://colab.research.google.com/github/someone/grpo-fork/blob/dev/notebooks/{name}/{name}.ipynb"
                in block)
    assert "grpo-course/grpo-in-practice" not in block
    rows = [line for line in block.splitlines() if line.startswith("| ") and "nb0" in line]
    sources = {p.stem for p in (ROOT / "solutions").glob("nb*.py")}
    assert sources <= {re.search(r"nb\d\d_[a-z0-9_]+", row).group(0) for row in rows}
    assert all(len(readme_table._cells(row)) == 4 for row in rows)


# --------------------------------------------------------------------------- make lab
@pytest.mark.slow
def test_make_lab_serves_the_course_with_nbgrader(tmp_path):
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    process = subprocess.Popen([sys.executable, "-m", "tools.cli.lab", "--no-browser", "--port", "0"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            found = re.search(r"(http://127\.0\.0\.1:\d+/lab\S*\?token=\w+)", line)
            url = found.group(1) if found else None
        assert url, "tools.cli.lab printed no URL"
        base, token = url.split("/lab")[0], url.split("token=")[1]
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert reply.status == 200 and b"JupyterLab" in reply.read()
        with urllib.request.urlopen(f"{base}/api/contents/notebooks?token={token}", timeout=30) as reply:
            listed = {item["name"] for item in json.load(reply)["content"]}
        assert listed == {p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()}
        # nbgrader's formgrader (it redirects; the token goes in a header so the redirect keeps it)
        request = urllib.request.Request(f"{base}/formgrader", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            page = reply.read().decode()
        assert reply.status == 200 and "formgrader" in reply.url and "Manage Assignments" in page, reply.url
    finally:
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C does
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0
