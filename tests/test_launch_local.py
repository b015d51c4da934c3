"""Launching locally: `make lab` (the learner's and the instructor's JupyterLab, stopped cleanly by SIGTERM and
SIGHUP), the local nbgrader exchange, the instructor's course config, the learners' work copies, and the
command-line messages of `make experiment` / `make online` and the headless execution."""

from __future__ import annotations

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

from tools.chain import cells

ROOT = Path(__file__).resolve().parents[1]


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
    assert done.stdout.strip() == repr([str(ROOT / "autograde" / "grpo_grader" / "feedback_pages.py")]), done.stdout
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
