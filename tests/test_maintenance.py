"""The maintainers' loop: ``make test`` keeps its timing in a record (not in prose), and the commit-msg check of the
pre-commit config holds a subject to 72 characters."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tools.cli import commit_msg, testrun

ROOT = Path(__file__).resolve().parents[1]


def test_pytest_summary_lines_become_outcome_counts():
    output = "....\n===== 2 failed, 490 passed, 3 skipped, 10 warnings, 1 error in 301.25s (0:05:01) =====\n"
    assert testrun.outcome_counts(output) == {"failed": 2, "passed": 490, "skipped": 3, "warnings": 10, "errors": 1}
    assert testrun.outcome_counts("383 passed, 10 warnings in 38.73s\n") == {"passed": 383, "warnings": 10}
    assert testrun.outcome_counts("no summary at all\n") == {}


def test_a_timed_run_is_appended_to_a_valid_record_and_printed(tmp_path, capsys):
    """One real pytest run through the wrapper: its exit status is pytest's, the record gains a schema-valid entry
    with the outcome counts, and a broken record is kept aside instead of being lost."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "course.toml").write_text("[course]\n", encoding="utf-8")
    (suite / "test_two.py").write_text("def test_ok():\n    pass\n\ndef test_no():\n    assert 0\n", encoding="utf-8")
    status, output, wall, _ = testrun.run_pytest(["-q", "-p", "no:cacheprovider", str(suite)], suite)
    assert status == 1 and wall > 0
    run = testrun.entry("test", status, output, wall, None, suite)
    assert run["outcomes"] == {"failed": 1, "passed": 1} and run["exit_status"] == 1
    path = tmp_path / "record" / "test-runs.json"
    path.parent.mkdir()
    path.write_text("{not json", encoding="utf-8")
    record = testrun.append_record(path, run)
    assert (path.parent / "test-runs.json.invalid").read_text(encoding="utf-8") == "{not json"
    assert json.loads(path.read_text(encoding="utf-8")) == record and len(record["runs"]) == 1
    for _ in range(testrun.KEEP + 3):
        record = testrun.append_record(path, run)
    assert len(record["runs"]) == testrun.KEEP
    line = testrun.summary_line(run, Path("x.json"))
    assert "1 failed, 1 passed" in line and "exit 1" in line


def test_the_record_is_git_ignored():
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", str(testrun.RECORD_RELATIVE)], capture_output=True
    )
    assert ignored.returncode == 0, f"{testrun.RECORD_RELATIVE} must be git-ignored"


def test_every_test_target_goes_through_the_timing_wrapper():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("test", "test-fast", "test-integration"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert f"-m tools.cli.testrun --target {target} --" in recipe, target
    assert "date +%s" not in makefile  # no second, hand-rolled timer


def test_commit_subjects_longer_than_72_characters_are_refused(tmp_path):
    good = "Split online_grpo into tools/online/\n\nWhy: one idea per module.\n# a git comment line\n"
    assert commit_msg.problems(good) == []
    assert commit_msg.problems("x" * 72) == []
    assert "73 characters" in commit_msg.problems("x" * 73)[0]
    assert commit_msg.problems("Subject\nbody without a blank line") != []
    assert commit_msg.problems("# only comments\n\n") == ["the commit message is empty"]
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("y" * 80 + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tools.cli.commit_msg", str(message)], capture_output=True, cwd=ROOT)
    assert done.returncode == 1 and b"80 characters" in done.stderr
    message.write_text("A short subject\n", encoding="utf-8")
    assert subprocess.run([sys.executable, "-m", "tools.cli.commit_msg", str(message)], cwd=ROOT).returncode == 0


def test_the_pre_commit_config_runs_the_subject_check_at_commit_msg():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    assert "commit-msg" in config["default_install_hook_types"]
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    subject = [hook for hook in hooks if "tools.cli.commit_msg" in hook["entry"]]
    assert len(subject) == 1 and subject[0]["stages"] == ["commit-msg"]


# ------------------------------------------------------------------------------------------- the newcomer's path
CI = ROOT / ".ci" / "run"
# What a person has before reading the README (README: system requirements); the rest the README's commands install.
BEFORE_THE_README = {"make", "npm", "chromium", "fonts-wqy-microhei", "slurm-wlm", "munge"}


def ci_problems(text: str) -> list[str]:
    """Where ``.ci/run`` does the README's work for it: installs a package a person would not have before reading
    the README, runs ``npm ci`` or ``make setup`` itself, or runs the test commands before the README's first one."""
    problems = []
    joined = re.sub(r"\\\n\s*", " ", text)  # continuation lines
    commands = [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]
    for line in commands:
        words = re.findall(r"[^\s;|&(){]+", re.sub(r'"[^"]*"', "", line))  # quoted text is not a command
        for at, word in enumerate(words):
            if word not in ("install", "apt_install") or (word == "install" and "apt" not in " ".join(words[:at])):
                continue
            for package in words[at + 1 :]:
                if package.startswith(">") or package in ("apt_install", "command", "echo"):
                    break
                if not package.startswith("-") and package not in BEFORE_THE_README:
                    problems.append(f"installs {package}")
        if "npm ci" in line or "npm install" in line:
            problems.append("runs npm itself")
        if re.search(r"\bmake setup\b", line):
            problems.append("runs make setup before the README's commands")
    makes = [c.split()[1] for c in commands if c.startswith("make ")]
    if not makes or makes[0] != "demo":
        problems.append(f"the README's first command must run first: {makes}")
    for target in ("lint", "test", "test-integration"):
        if target not in makes:
            problems.append(f"does not run make {target}")
    return problems


def test_ci_meets_the_newcomers_path():
    """CI installs only what a person has before reading the README, removes bubblewrap where the machine has it,
    and runs `make demo` first, so the README's commands must do the rest (bubblewrap, playwright-core, caches)."""
    text = CI.read_text(encoding="utf-8")
    assert ci_problems(text) == []
    assert "apt-get remove" in text and "bubblewrap" in text
    for broken, problem in (
        (text.replace("apt_install make", "apt_install make bubblewrap"), "installs bubblewrap"),
        (text.replace("python3 --version", "npm ci --prefix tests/browser\npython3 --version"), "runs npm itself"),
        (text.replace("python3 --version", "make setup\npython3 --version"), "runs make setup"),
        (text.replace("make demo\n", ""), "first command"),
    ):
        assert any(problem in p for p in ci_problems(broken)), problem


def test_every_target_that_grades_tests_or_trains_gets_ready_first():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("setup", "demo", "test", "test-integration", "autograde", "online", "bench", "experiment"):
        assert re.search(rf"^{target}: ready\b", makefile, re.M), target
    assert re.search(r"^ready: \$\(VENV\)/\.setup-stamp\n\t@\$\(PY\) -m tools\.cli\.ready$", makefile, re.M)


def test_ready_says_what_to_install_when_it_cannot(tmp_path):
    from tools.cli import ready

    said = []
    assert ready.ensure_bubblewrap(said.append, which=lambda name: None, euid=lambda: 1000) is False
    assert said == [ready.BWRAP_HINT] and "apt-get install -y bubblewrap" in said[0]
    assert ready.ensure_bubblewrap(said.append, which=lambda name: f"/usr/bin/{name}", euid=lambda: 1000) is True
    said.clear()
    assert ready.ensure_playwright(said.append, which=lambda name: None, root=tmp_path) is False
    assert "npm" in said[0]
    (tmp_path / ready.PLAYWRIGHT).mkdir(parents=True)
    assert ready.ensure_playwright(said.append, which=lambda name: None, root=tmp_path) is True
