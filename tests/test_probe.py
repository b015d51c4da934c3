"""The grading pre-flight (autograde/grpo_grader/probe.py): each condition that stops grading is named
with its cause and its fix, before any notebook is graded; tests read the probe's JSON, never its prose.

Fast tests: the diagnosis of each machine condition, the lessons' imports, the folders bound from ``sys.path`` and
the probe itself run as a plain process. Integration tests (``make test-integration``; root, as CI): the conditions
made real on this machine - an unprivileged grader with user namespaces disabled (``user.max_user_namespaces=0`` in a
user namespace of the test's own: tests/userns_limit.py),
root with CAP_SYS_ADMIN dropped (``capsh``), packages reachable only through a ``.pth`` outside the virtual
environment - each checked through ``python -m autograde.pipeline probe --json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_autograde_trust import UNPRIVILEGED, _traversable_for_others, _unprivileged_user  # tests/

from autograde.grpo_grader import probe

ROOT = Path(__file__).resolve().parents[1]
NORMAL = {
    "euid": 1000,
    "cap_sys_admin": False,
    "seccomp": "0",
    "container": False,
    "kubernetes": False,
    "max_user_namespaces": "15000",
    "unprivileged_userns_clone": None,
    "apparmor_restrict_unprivileged_userns": None,
}


# ----------------------------------------------------------------------------- fast: the diagnosis
@pytest.mark.parametrize(
    "facts, stderr, code, fix_words",
    [
        (
            {"max_user_namespaces": "0"},
            "bwrap: Creating new namespace failed: No space left on device",
            "userns-disabled",
            ["sysctl -w user.max_user_namespaces="],
        ),
        (
            {"unprivileged_userns_clone": "0"},
            "bwrap: No permissions to create new namespace",
            "unprivileged-userns-disabled",
            ["sysctl -w kernel.unprivileged_userns_clone=1"],
        ),
        (
            {"apparmor_restrict_unprivileged_userns": "1"},
            "bwrap: setting up uid map: Permission denied",
            "apparmor-restricts-userns",
            ["environments/apparmor-bwrap /etc/apparmor.d/bwrap", "apparmor_parser -r", "apparmor_restrict"],
        ),
        (
            {"euid": 0},
            "bwrap: Creating new namespace failed: Operation not permitted",
            "root-without-cap-sys-admin",
            ["--cap-add SYS_ADMIN", "seccomp=unconfined", "apparmor=unconfined", "capabilities: {add: [SYS_ADMIN]}"],
        ),
        (
            {"euid": 0, "cap_sys_admin": True, "seccomp": "2"},
            "bwrap: Creating new namespace failed: Operation not permitted",
            "container-security-profile",
            ["seccomp=unconfined", "seccompProfile: {type: Unconfined}"],
        ),
        (
            {"container": True},
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
            "container-masks-proc",
            ["systempaths=unconfined"],
        ),
    ],
)
def test_each_namespace_failure_names_its_cause_and_fix(facts, stderr, code, fix_words):
    problem = probe.diagnose_namespaces(stderr, {**NORMAL, **facts}, str(ROOT))
    assert problem.code == code
    for word in fix_words:
        assert word in problem.fix, (word, problem.fix)
    assert stderr.split(": ", 1)[1] in problem.detail
    assert "Traceback" not in problem.text() and "kernel died" not in problem.text().lower()
    if facts.get("euid") == 0:
        assert "sudo -E make autograde" not in problem.fix, "never tell root to grade as root"


@pytest.mark.integration
def test_this_machine_allows_the_sandbox():
    """Root (CI, this machine) with CAP_SYS_ADMIN: the trial sandbox builds, nothing to report."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed here")
    assert probe.namespace_problems(str(ROOT)) == []


# ----------------------------------------------------------------------------- fast: what the probe imports
def test_lesson_imports_come_from_the_released_lessons():
    lessons = [path.parent.name for path in probe.graded_lessons(ROOT)]
    assert "nb01_group_advantages" in lessons and "nb06_real_model_grpo" not in lessons, lessons
    names = probe.probe_imports(ROOT, top_level=False)
    assert names[:3] == ["torch", "ipykernel", "nbformat"]
    assert {
        "import matplotlib.pyplot as plt",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "from tools import online_trl",
    } <= set(names), names
    assert not [n for n in names if "tools.lessons" in n or n in ("import math", "import json")], names
    tops = probe.probe_imports(ROOT, top_level=True)
    assert {"torch", "matplotlib", "transformers", "tools", "IPython"} <= set(tops) and "math" not in tops, tops
    lines = ["from a.b import c  # note", "import x.y as z, w", "from . import q", "import os"]
    assert probe.imported_modules(lines, top_level=True) == ["a", "x", "w"]
    assert probe.imported_modules(lines) == ["from a.b import c", "import x.y as z, w"]


def test_the_probe_reports_imports_as_json(tmp_path):
    """The probe's text run as grading runs it (``python -c``), here without a sandbox: one JSON object; a module that
    is not there is reported by name, never raised."""
    request = {"paths": [str(tmp_path)], "imports": ["json", "grpo_no_such_module"], "import_mode": "find"}
    done = subprocess.run(
        [sys.executable, "-c", probe.source(), json.dumps(request)], capture_output=True, text=True, timeout=60
    )
    report = probe.parse_output(done.stdout)
    assert done.returncode == 0 and report is not None, done.stderr
    assert report["imports"]["json"] == "ok"
    assert report["imports"]["grpo_no_such_module"].startswith("ModuleNotFoundError")
    assert report["readable"] == {str(tmp_path): True}
    problems = probe.import_problems(report, "kernel", {"bind": [], "refused": {}}, "nbgrader_config.py")
    assert [p.code for p in problems] == ["package-missing"] and "make setup" in problems[0].fix


def test_a_package_outside_the_venv_is_named_with_its_folder():
    """A module importable here but not inside the sandbox: the message names where it lives and both fixes."""
    report = {"imports": {"torch": "ModuleNotFoundError: No module named 'torch'", "json": "ok"}}
    (problem,) = probe.import_problems(report, "kernel", {"bind": [], "refused": {}}, "autograde/nbgrader_config.py")
    import importlib.util

    folder = str(Path(list(importlib.util.find_spec("torch").submodule_search_locations)[0]).parent)
    assert problem.code == "package-outside-venv"
    assert folder in problem.cause and "pip install torch" in problem.fix
    assert f"c.GradingPipeline.extra_readonly_paths = [{folder!r}]" in problem.fix


# ----------------------------------------------------------------------------- fast: folders bound from sys.path
def test_folders_outside_the_venv_are_bound_but_never_a_checkout(tmp_path, monkeypatch):
    checkout = tmp_path / "course"
    (checkout / "vendor").mkdir(parents=True)
    (checkout / "course.toml").write_text("")
    (checkout / ".venv" / "lib" / "site-packages").mkdir(parents=True)
    (checkout / ".venv" / "pyvenv.cfg").write_text("")
    outside = tmp_path / "pkgs" / "site-packages"
    outside.mkdir(parents=True)
    home = tmp_path / "home"
    (home / ".local" / "site-packages").mkdir(parents=True)
    (home / "notes").mkdir()
    hidden = [str(checkout), str(home)]
    assert probe.refusal(str(checkout / "vendor"), hidden, [str(home)]).startswith("inside")
    assert probe.refusal(str(checkout / ".venv" / "lib" / "site-packages"), hidden, [str(home)]) == ""
    secret = checkout / ".venv" / "lib" / "secret"
    assert probe.refusal(str(secret / "x"), [*hidden, str(secret)], [str(home)]).startswith("inside"), (
        "hidden in a venv"
    )
    assert probe.refusal(str(tmp_path), hidden, [str(home)]).startswith("it holds")
    assert probe.refusal(str(home / ".local" / "site-packages"), hidden, [str(home)]) == ""
    assert probe.refusal(str(home / "notes"), hidden, [str(home)]).startswith("inside")
    assert probe.refusal(str(outside), hidden, [str(home)]) == ""

    user_site = home / ".local" / "site-packages"
    monkeypatch.setattr(probe.site, "getusersitepackages", lambda: str(user_site))
    entries = [
        "",
        str(checkout),
        str(outside),
        str(checkout / "vendor"),
        str(user_site),
        "/usr/lib/python3/dist-packages",
    ]
    monkeypatch.setattr(sys, "path", entries)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(checkout), str(checkout / "vendor")]))
    paths = probe.interpreter_paths(["/usr"], hidden, [str(home)], [str(home / "notes")])
    assert paths["bind"] == [str(outside), str(user_site)]
    assert paths["pythonpath"] == [str(user_site)], "a kernel runs without the user site: it goes on its PYTHONPATH"
    # the grader's own checkout on sys.path is expected (kernels get a course copy); a folder inside it is named
    assert set(paths["refused"]) == {str(checkout / "vendor"), str(home / "notes")}, paths["refused"]


# ----------------------------------------------------------------------------- integration: the real conditions
def _course(base: Path) -> Path:
    """A course folder of its own: its config keeps the kernel files the unprivileged account can read (the
    checkout's ``.cache`` checkpoints are private to their owner)."""
    from autograde.grpo_grader.course import GradingPipeline

    course = base / "autograde"
    course.mkdir(parents=True)
    # the default list without the private checkpoints: a new entry of the default reaches this course too
    files = [name for name in GradingPipeline().kernel_files if not name.startswith(".cache/")]
    (course / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.GradingPipeline.kernel_files = {files!r}\n"
    )
    return course


def _probe_json(
    course: Path, prefix: list[str], python: str = sys.executable, sandbox: str = "bwrap"
) -> tuple[dict, str]:
    """``python -m autograde.pipeline probe --json --sandbox bwrap`` behind ``prefix`` (a user or capability
    change): the parsed JSON and stderr."""
    from autograde_helpers import pipeline_env

    env = {**pipeline_env(), "HOME": str(course.parent), "GRPO_GRADING_SEED": "probe-" + os.urandom(4).hex()}
    command = [*prefix, python, "-m", "autograde.pipeline", "probe", "--json", "--sandbox", sandbox]
    done = subprocess.run(
        [*command, "--course", str(course)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    print(done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert (done.returncode == 0) == result["ok"], (done.returncode, result)
    return result, done.stderr


@contextlib.contextmanager
def _account_base():
    """A folder the unprivileged account owns, and the checkout and interpreter traversable for it (as the trust
    tests give it access)."""
    uid, gid = _unprivileged_user()
    base = Path(tempfile.mkdtemp(prefix="grpo-probe-test-"))
    try:
        with _traversable_for_others(ROOT, Path(sys.executable).parent, Path(sys.base_prefix, "bin"), base):
            course = _course(base)
            for folder, _dirs, files in os.walk(base):
                for path in [folder, *(os.path.join(folder, f) for f in files)]:
                    os.chown(path, uid, gid)
            yield base, course, ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="simulating the condition needs root (CI runs as root)")


@pytest.mark.slow
@pytest.mark.integration
@needs_root
def test_user_namespaces_disabled_names_the_sysctl():
    """An unprivileged grader where ``user.max_user_namespaces = 0``: the probe stops with the sysctl to set. The limit
    is set in a user namespace of the test's own (tests/userns_limit.py: the same sysctl, the same ENOSPC from bwrap,
    and other tests keep theirs); without it, the same account's probe passes."""
    with _account_base() as (_base, course, become):
        uid, gid = _unprivileged_user()
        limited = [sys.executable, str(ROOT / "tests" / "userns_limit.py"), str(uid), str(gid), "--"]
        result, _stderr = _probe_json(course, limited)
        (problem,) = result["problems"]
        assert problem["code"] == "userns-disabled" and "sysctl -w user.max_user_namespaces=" in problem["fix"]
        assert "ENOSPC" in problem["detail"] or "No space left" in problem["detail"], problem
        again, _stderr = _probe_json(course, become)
        assert again["ok"] and again["sandbox"] == "bwrap" and not again["readable"], again


@pytest.mark.slow
@pytest.mark.integration
@needs_root
def test_root_without_cap_sys_admin_names_the_container_settings():
    """Root with CAP_SYS_ADMIN dropped from its bounding set (a default Docker or Kubernetes container): the probe
    names the Docker flags, the Kubernetes securityContext and the unprivileged path - not "grade as root"."""
    if shutil.which("capsh"):
        drop = ["capsh", "--drop=cap_sys_admin", "--", "-c", 'exec "$@"', "capsh"]
    elif shutil.which("setpriv"):
        drop = ["setpriv", "--bounding-set", "-sys_admin", "--"]
    else:
        pytest.skip("neither capsh (libcap2-bin) nor setpriv (util-linux) is installed")
    with tempfile.TemporaryDirectory(prefix="grpo-probe-test-") as base:
        result, _stderr = _probe_json(_course(Path(base)), drop)
        auto, _stderr = _probe_json(_course(Path(base) / "auto"), drop, sandbox="auto")
    assert [p["code"] for p in auto["problems"]] == ["root-without-cap-sys-admin"], "whichever mode auto picks"
    (problem,) = result["problems"]
    assert problem["code"] == "root-without-cap-sys-admin", problem
    for words in ("--cap-add SYS_ADMIN", "seccomp=unconfined", "securityContext", "jupyterhub-grader.yaml"):
        assert words in problem["fix"], words
    assert "Operation not permitted" in problem["detail"]


@pytest.mark.slow
@pytest.mark.integration
@needs_root
def test_packages_behind_a_pth_outside_the_venv():
    """An unprivileged grader whose interpreter finds its packages only through a ``.pth`` naming a folder outside its
    virtual environment (the issue's case: every notebook errored with "kernel died"): the folder is bound read-only
    and the probe passes, importing torch and the lessons' imports inside the sandbox. The same folder reached through
    a course checkout is refused: the probe fails before grading, naming torch, the folder and the fixes."""
    import sysconfig

    site_packages = sysconfig.get_paths()["purelib"]
    with _account_base() as (base, course, become):
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        python = str(venv / "bin" / "python")
        inner = Path(
            subprocess.check_output(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
            ).strip()
        )
        (inner / "outside.pth").write_text(site_packages + "\n")
        subprocess.run(["chown", "-R", f"{UNPRIVILEGED}:", str(venv)], check=True)
        result, _stderr = _probe_json(course, become, python)
        assert result["ok"], result
        assert os.path.realpath(site_packages) in result["paths"]["bind"], result["paths"]
        report = result["kernel"]
        assert report["import_mode"] == "import", "pipeline probe imports everything by default"
        assert report["imports"] and set(report["imports"].values()) == {"ok"}, report["imports"]
        assert {
            "torch",
            "ipykernel",
            "nbformat",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
        } <= set(result["kernel"]["imports"])

        # the same packages behind a course checkout (a bind mount keeps the path): refused, and named
        fake = base / "other-checkout"
        (fake / "site").mkdir(parents=True)
        (fake / "course.toml").write_text("")
        if subprocess.run(["mount", "--bind", site_packages, str(fake / "site")]).returncode != 0:
            pytest.skip("cannot bind-mount here")
        try:
            (inner / "outside.pth").write_text(str(fake / "site") + "\n")
            refused, _stderr = _probe_json(course, become, python)
        finally:
            subprocess.run(["umount", str(fake / "site")], check=True)
    assert not refused["ok"]
    codes = {p["code"] for p in refused["problems"]}
    assert codes == {"package-outside-venv"}, refused["problems"]
    torch_problem = next(p for p in refused["problems"] if "torch" in p["detail"])
    assert str(fake / "site") in torch_problem["cause"] and "course checkout" in torch_problem["cause"]
    assert "pip install torch" in torch_problem["fix"] and "extra_readonly_paths" in torch_problem["fix"]


@pytest.mark.slow
@pytest.mark.integration
@needs_root
def test_autograde_stops_before_grading_with_the_cause(released_course):
    """`autograde` runs the same pre-flight before its first notebook: root without CAP_SYS_ADMIN gets the cause and
    the fix, exit status 2, nothing graded - not a notebook error per learner, not "kernel died"."""
    from autograde_helpers import pipeline_env

    if not shutil.which("capsh"):
        pytest.skip("capsh (libcap2-bin) is not installed")
    with tempfile.TemporaryDirectory(prefix="grpo-probe-test-") as base:
        course = Path(base) / "autograde"
        shutil.copytree(released_course["course"], course)
        command = [sys.executable, "-m", "autograde.pipeline", "autograde", "--sample", "--sandbox", "bwrap"]
        command += ["--learner", "s01_worked_answers", "--course", str(course)]
        env = {**pipeline_env(), "GRPO_GRADING_SEED": "probe-" + os.urandom(4).hex()}
        done = subprocess.run(
            ["capsh", "--drop=cap_sys_admin", "--", "-c", 'exec "$@"', "capsh", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        print(done.stdout[-3000:], done.stderr[-3000:])
        assert done.returncode == 2, done.returncode
        assert "CAP_SYS_ADMIN" in done.stderr and "--cap-add SYS_ADMIN" in done.stderr, done.stderr
        assert "nothing was graded" in done.stderr
        output = done.stdout + done.stderr
        assert "Traceback" not in output and "kernel died" not in output.lower()
        assert not (course / "autograded").exists() or not any((course / "autograded").iterdir())
