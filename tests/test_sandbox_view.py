"""What a grading sandbox sees is declared once (autograde/grpo_grader/view.py): the slots' specs, and with them
bubblewrap's command line, come from it, the probe's secrets and never-bound folders too, and the README's section on
the view is generated from it (fast: no sandbox is started)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autograde import pipeline
from autograde.grpo_grader import probe, sandbox, view
from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.isolation import Sandbox
from autograde.grpo_grader.slots import Slot


def _bwrap(tmp_path: Path, name: str) -> list[str]:
    """bubblewrap's command line of a fresh slot's kernel (its spec written by ``Slot._setup``)."""
    settings = GradingPipeline(course=tmp_path / "course", kernel_files=["course.toml"])
    slot = Slot(tmp_path / "run", name, settings, Sandbox(mode="bwrap", paths={"bind": ["/opt/site"]}))
    return sandbox.bwrap_args(json.loads(slot.spec_path.read_text()))


def _binds(args: list[str]) -> list[tuple[str, str]]:
    """(option, path) of each mount of a bubblewrap command line."""
    mounts = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--proc": 1, "--dev": 1}
    return [(arg, args[i + mounts[arg]]) for i, arg in enumerate(args) if arg in mounts]


def test_the_sandbox_mounts_what_the_view_declares(tmp_path, monkeypatch):
    """Every part of the declaration reaches bubblewrap's command line in its order, and a path added to the
    declaration is mounted (the check can fail: the command line is derived, not written a second time)."""
    mounts = _binds(_bwrap(tmp_path, "slot0"))
    targets = [path for _option, path in mounts]
    for path in [*view.SYSTEM_FILES, *(p for _kind, p in view.DEVICES), *(p for p, _size in view.SCRATCH)]:
        assert path in targets or not Path(path).exists(), path
    assert ("--ro-bind", "/opt/site") in mounts and ("--ro-bind", str(tmp_path / "run" / "slot0" / "kernel")) in mounts
    assert ("--bind", str(tmp_path / "run" / "slot0" / "ipc")) in mounts
    assert targets.index("/usr") < targets.index("/proc") < targets.index("/tmp") < targets.index("/opt/site")

    extra = tmp_path / "host-file"
    extra.write_text("")
    monkeypatch.setattr(view, "SYSTEM_FILES", (*view.SYSTEM_FILES, str(extra)))
    monkeypatch.setattr(view, "SCRATCH", (*view.SCRATCH, ("/run/scratch", view.MIB)))
    args = _bwrap(tmp_path, "slot1")
    assert ("--ro-bind", str(extra)) in _binds(args) and ("--tmpfs", "/run/scratch") in _binds(args)
    at = args.index("/run/scratch")
    assert args[at - 5 : at] == ["--size", str(view.MIB), "--perms", "1777", "--tmpfs"]


def test_what_no_sandbox_sees_is_declared_once(tmp_path, monkeypatch):
    """The probe's secrets and the folders never bound come from the declaration; the grading seed's file and
    variable are among them; a secret added to the declaration is probed."""
    settings = GradingPipeline(course=tmp_path / "course")
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / ".grading_seed").write_text("x")
    secrets = view.secret_paths(settings, tmp_path / "slot")
    assert str(tmp_path / "course" / ".grading_seed") in secrets and str(view.ROOT / "solutions") in secrets
    never = view.never_bound(settings, tmp_path / "run")
    assert {str(view.ROOT), str(tmp_path / "course"), str(tmp_path / "run")} <= set(never)
    assert view.SECRET_ENVIRON == ("GRPO_GRADING_SEED",)
    request = json.dumps({"paths": secrets, "environ": list(view.SECRET_ENVIRON)})
    for environ, seen in (({}, False), ({"GRPO_GRADING_SEED": "s"}, True)):  # the probe looks for the declared names
        done = subprocess.run(
            [sys.executable, "-c", probe.source(), request], capture_output=True, text=True, env=environ, timeout=60
        )
        assert probe.parse_output(done.stdout)["seed_in_environ"] is seen, done.stderr
    (tmp_path / "course" / "answers.txt").write_text("42")
    monkeypatch.setattr(view, "SECRETS", (*view.SECRETS, ("course", "answers.txt")))
    assert view.secret_paths(settings, tmp_path / "slot")[-1] == str(tmp_path / "course" / "answers.txt")


def test_the_readme_lists_the_view_it_is_generated_from(monkeypatch):
    """autograde/README.md's two sections on the view are what ``pipeline settings --write`` generates from view.py,
    and a change to the declaration makes them stale."""
    readme = pipeline.README.read_text(encoding="utf-8")
    assert pipeline.readme_with_view(readme) == readme, "run `make release`"
    for language in ("zh", "en"):
        assert view.describe(language) in readme
    monkeypatch.setattr(view, "SYSTEM_FILES", (*view.SYSTEM_FILES, "/etc/hostname"))
    assert pipeline.readme_with_view(readme) != readme
