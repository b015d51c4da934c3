"""tools.preflight: requirement parsing, the table, statuses and the exit code."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools.preflight import Requirement, collect_rows, main, parse_requirements, profile_requirements, run_preflight

REPO_ROOT = Path(__file__).resolve().parents[1]
STATUSES = {"ok", "missing", "too old", "not needed", "warn"}


def test_parse_requirements_follows_includes(tmp_path):
    (tmp_path / "base.txt").write_text("# comment\ntorch==2.13.0\nnumpy>=1.26  # inline\n\n--index-url https://x\n")
    (tmp_path / "top.txt").write_text(
        "-r base.txt\nnumpy==9.9\ntransformers[torch]==5.23.0 ; python_version>'3'\nplain\n"
    )
    reqs = parse_requirements(tmp_path / "top.txt")
    assert [(r.name, r.op, r.version) for r in reqs] == [
        ("torch", "==", "2.13.0"),
        ("numpy", ">=", "1.26"),
        ("transformers", "==", "5.23.0"),
        ("plain", None, None),
    ]


def test_profiles_read_the_environment_files():
    names = {p: [r.name for r in profile_requirements(p, REPO_ROOT)] for p in ("BASE-CPU", "PT-CPU", "PT-RL-CUDA")}
    for package in ("torch", "numpy", "matplotlib", "pytest", "nbformat", "nbclient", "tqdm"):
        assert package in names["BASE-CPU"] and package in names["PT-CPU"]
    for package in ("transformers", "peft", "tokenizers", "accelerate", "trl"):
        assert package in names["PT-CPU"] and package not in names["BASE-CPU"]
    for package in ("torch", "transformers", "peft", "accelerate"):
        assert package in names["PT-RL-CUDA"]
    pins = {r.name: r.version for r in profile_requirements("PT-CPU", REPO_ROOT)}
    text = (REPO_ROOT / "environments" / "pt-cpu.txt").read_text()
    assert f"transformers=={pins['transformers']}" in text  # single source: the file's pin


def test_table_for_the_current_environment():
    out = io.StringIO()
    report = run_preflight("pt-cpu", stream=out, root=REPO_ROOT)
    json.dumps(report)
    items = [row["item"] for row in report["rows"]]
    assert items[0] == "Python" and items[-1] == "free disk" and "CUDA" in items and "GPU" in items
    assert {row["status"] for row in report["rows"]} <= STATUSES
    text = out.getvalue()
    assert "item" in text and "required" in text and "installed" in text and "status" in text
    for row in report["rows"]:
        assert row["item"] in text
    cuda = next(row for row in report["rows"] if row["item"] == "CUDA")
    assert cuda["status"] == "not needed" and not cuda["fatal"]
    assert report["ok"] == (not any(row["fatal"] for row in report["rows"]))


def test_missing_and_too_old_packages_fail_with_the_fix():
    requirements = profile_requirements("PT-CPU", REPO_ROOT) + [
        Requirement("grpo-course-no-such-package", "==", "1.0"),
        Requirement("pytest", ">=", "999.0"),
    ]
    requirements = [r for r in requirements if r.name != "pytest" or r.version == "999.0"]
    out = io.StringIO()
    report = run_preflight("PT-CPU", quiet_ok=True, requirements=requirements, root=REPO_ROOT, stream=out)
    rows = {row["item"]: row for row in report["rows"]}
    assert report["ok"] is False
    assert rows["grpo-course-no-such-package"]["status"] == "missing" and rows["grpo-course-no-such-package"]["fatal"]
    assert rows["pytest"]["status"] == "too old" and rows["pytest"]["installed"] == pytest.__version__
    text = out.getvalue()
    assert "grpo-course-no-such-package" in text and "FAILED" in text  # the full table, despite quiet_ok
    assert "make setup PROFILE=PT-CPU" in text and "pip install -r environments/pt-cpu.txt" in text


def test_platform_torch_rule():
    rows = collect_rows(
        "BASE-CPU",
        requirements=[Requirement("torch", "==", "2.8.0"), Requirement("torch", "==", "99.0")],
        root=REPO_ROOT,
    )
    torch_rows = [row for row in rows if row["item"] == "torch"]
    assert [row["status"] for row in torch_rows] == ["ok", "ok"]  # installed torch >= 2.4 whatever the pin
    assert all(">= 2.4" in row["note"] for row in torch_rows)
    assert [row["required"] for row in torch_rows] == [">=2.4", ">=2.4"]  # the accepted range, not the pin


def test_required_column_shows_the_accepted_range_not_the_pin():
    rows = collect_rows(
        "BASE-CPU",
        requirements=[
            Requirement("pytest", "==", "1.0"),
            Requirement("numpy", ">=", "1.2"),
            Requirement("nbformat", None, None),
        ],
        root=REPO_ROOT,
    )
    required = {row["item"]: row["required"] for row in rows}
    assert required["pytest"] == ">=1.0" and required["numpy"] == ">=1.2" and required["nbformat"] == "any"
    assert not any(value.startswith("==") for value in required.values()), required


def test_cuda_profile_rows():
    report = run_preflight("PT-RL-CUDA", root=REPO_ROOT, stream=io.StringIO())
    rows = {row["item"]: row for row in report["rows"]}
    assert rows["GPU"]["required"] == "12 GB-class"
    if torch.cuda.is_available():
        assert rows["CUDA"]["status"] == "ok" and rows["GPU"]["status"] in {"ok", "warn"}
        assert "bf16" in rows
    else:
        assert rows["CUDA"]["status"] == "missing" and rows["CUDA"]["fatal"] and report["ok"] is False
        assert "CUDA build of torch" in report["fix"]


def _fake_course(root, extra_line):
    (root / "environments").mkdir(parents=True)
    (root / "course.toml").write_text("[course]\n")
    (root / "environments" / "base-cpu.txt").write_text("pytest>=1.0\n")
    (root / "environments" / "pt-cpu.txt").write_text(f"-r base-cpu.txt\n{extra_line}\n")
    return root


def _cli(*args, cwd=REPO_ROOT):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "tools.preflight", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_command_line_exit_codes(tmp_path, monkeypatch, capsys):
    bad = _fake_course(tmp_path / "bad", "grpo-course-no-such-package==1.0")
    failed = _cli("--profile", "PT-CPU", "--root", str(bad))
    assert failed.returncode == 1
    assert "grpo-course-no-such-package" in failed.stdout and "missing" in failed.stdout
    assert "make setup PROFILE=PT-CPU" in failed.stdout

    # the same entry point in-process (no second interpreter start)
    good = _fake_course(tmp_path / "good", "torch")
    monkeypatch.chdir(good)  # root found from the working directory
    capsys.readouterr()
    assert main(["--profile", "PT-CPU", "--quiet-ok"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == ["preflight PT-CPU: ok (6 checks)"]
    assert main(["--profile", "PT-CPU"]) == 0
    assert "pytest" in capsys.readouterr().out  # without --quiet-ok: the whole table

    assert main(["--profile", "NO-SUCH-PROFILE"]) == 2
    assert "BASE-CPU" in capsys.readouterr().err
