"""A sandbox's view names nothing of the checkout's layout or its learners (autograde/grpo_grader/view.py): the files
of the bound folders that would (an editable install's finder and ``.pth``, ``direct_url.json``) are replaced by
``/dev/null``, the course copy's ``course.toml`` loses its roster, and the probe's scan finds a needle where it is
(its mutation: a planted file). The whole view read as a kernel: ``test_the_whole_view_names_nothing`` (integration,
minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograde.grpo_grader import probe, sandbox, view
from autograde.grpo_grader.course import ROOT, GradingPipeline
from autograde.grpo_grader.isolation import Sandbox
from autograde.grpo_grader.slots import Slot
from autograde.grpo_grader.uids import lease_uids


def _site_packages(tmp_path: Path, checkout: Path) -> Path:
    """A bound folder holding what an editable install of ``checkout`` leaves in site-packages, and a plain package."""
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages"
    meta = site / "course-0.1.dist-info"
    meta.mkdir(parents=True)
    (site / "__editable___course_finder.py").write_text(f"MAPPING = {{'tools': '{checkout}/tools'}}\n")
    (site / "__editable__.course.pth").write_text("import __editable___course_finder; __editable___course_finder.x()\n")
    (meta / "direct_url.json").write_text(json.dumps({"url": f"file://{checkout}"}))
    (meta / "RECORD").write_text("__editable___course_finder.py,,\n")
    (site / "plain.pth").write_text("/opt/elsewhere\n")
    (site / "own.py").write_text(f"HERE = '{tmp_path / 'venv'}/lib'\n")  # names its own bound folder: allowed
    return site


def test_files_naming_the_checkout_are_masked_and_nothing_else(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    site = _site_packages(tmp_path, checkout)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    folders = (str(tmp_path / "venv"),)
    masked = view.masked_files(folders, (str(checkout),))
    assert sorted(Path(p).name for p in masked) == [
        "__editable__.course.pth",  # imports the masked finder: it would fail at every interpreter start
        "__editable___course_finder.py",
        "direct_url.json",
    ]
    # the mutation: without the checkout among the hidden folders nothing is masked
    assert view.masked_files(folders, (str(tmp_path / "elsewhere"),)) == []
    # this machine's own venv: an editable install of the course is masked when there is one
    own = view.masked_files(tuple(view.interpreter_folders()), (str(ROOT),))
    finders = [
        f for p in sys.path if p and Path(p).is_dir() for f in Path(p).glob("__editable___grpo_course*finder.py")
    ]
    if finders:
        assert any("__editable___grpo_course_tools" in p and p.endswith("_finder.py") for p in own), own


def test_bubblewrap_replaces_a_masked_file_by_dev_null(tmp_path):
    spec = {
        "system": [],
        "system_files": [],
        "devices": [],
        "scratch": [],
        "workdir_size": 1,
        "workdir": "/w",
        "bwrap": "bwrap",
        "keep": [["/opt/venv", "ro"], ["/opt/venv/lib/x.pth", "mask"], ["/run/ipc", "rw"]],
    }
    args = sandbox.bwrap_args(spec)
    at = args.index("/opt/venv/lib/x.pth")
    assert args[at - 2 : at] == ["--ro-bind", "/dev/null"]
    assert "/opt/venv/lib" not in args, "no folder is made inside a bound one for a mask"


@pytest.mark.skipif(os.geteuid() != 0 and not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is not installed")
def test_a_kernel_cannot_read_a_masked_file(tmp_path, monkeypatch):
    """A real sandbox of a slot (its own uid as root): the files view.py masks cannot be read, their folder can."""
    checkout = tmp_path / "checkout"
    site = _site_packages(tmp_path, checkout)
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])
    monkeypatch.setattr(view, "never_bound", lambda settings, run: [str(checkout)])
    settings = GradingPipeline(course=tmp_path / "course", kernel_files=[])
    box = Sandbox(mode="bwrap", paths={"bind": [str(tmp_path / "venv")]})
    uids, leases = lease_uids(settings.sandbox_uid_base, 1) if os.geteuid() == 0 else ([None], [])
    slot = Slot(tmp_path / "run", "slot0", settings, box, uid=uids[0], zygotes=False)
    masks = view.masks_of(json.loads(slot.spec_path.read_text())["keep"])
    assert len(masks) == 3
    request = json.dumps({"masked": masks, "paths": [str(site / "plain.pth")]})
    try:
        done = slot.run_sandboxed_code(probe.source(), [request], zygote=False, timeout=120)
    finally:
        for handle in leases:
            handle.close()
    report = probe.parse_output(done.stdout)
    assert report is not None, done.stderr[-2000:]
    assert all(size <= 0 for size in report["masked"].values()) and set(report["masked"]) == set(masks)
    assert report["readable"] == {str(site / "plain.pth"): True}, "the rest of the folder is there"


def test_the_course_copy_loses_the_roster(tmp_path):
    (tmp_path / "course.toml").write_text(
        '[course]\nid = "x"\n\n[roster]\nalice2024 = "Alice Wang"\n\n[roster.extra]\nbob = "B"\n\n[other]\nk = 1\n'
    )
    view.scrub_course_copy(tmp_path)
    text = (tmp_path / "course.toml").read_text()
    assert "alice2024" not in text and "roster" not in text and 'id = "x"' in text and "[other]" in text
    (tmp_path / "course.toml").write_text('roster = { carol = "C" }\n[course]\nid = "y"\n')
    view.scrub_course_copy(tmp_path)
    assert "carol" not in (tmp_path / "course.toml").read_text()


def test_the_scan_finds_a_needle_but_not_a_bound_folders_own_path(tmp_path):
    """The probe's scan (run as a kernel by `pipeline probe --scan-view`) finds a planted name, also across its
    read chunks, in binary data too, and lets a bound folder's own path be."""
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "script").write_text(f"#!{tmp_path}/checkout/.venv/bin/python\n")
    (tmp_path / "clean.bin").write_bytes(os.urandom(4096))
    planted = tmp_path / "deep" / "data.bin"
    planted.parent.mkdir()
    planted.write_bytes(b"\0" * 1000 + b"learner-id-7f3a" + b"\0" * 1000)
    (tmp_path / "finder.py").write_text(f"MAPPING = {{'tools': '{tmp_path}/checkout/tools'}}\n")
    needles, allowed = [f"{tmp_path}/checkout", "learner-id-7f3a"], [f"{tmp_path}/checkout/.venv"]
    report = probe.scan_view(needles, allowed, top=str(tmp_path), chunk=1007)
    assert report["hits"] == {
        str(planted): "learner-id-7f3a",
        str(tmp_path / "finder.py"): f"{tmp_path}/checkout",
    }
    assert report["files"] == 4 and report["unreadable"] == 0


@pytest.mark.slow
@pytest.mark.integration
def test_the_whole_view_names_nothing():
    """`pipeline probe --scan-view`: every file a grading kernel can read in its sandbox, read whole as the kernel's
    uid (the system, the interpreter and the virtual environment included: minutes), names neither the checkout (but
    as the virtual environment's own path) nor the course folder nor a learner id of the sample class."""
    env = {**os.environ, "GRPO_GRADING_SEED": "scan-" + os.urandom(4).hex()}
    done = subprocess.run(
        [sys.executable, "-m", "autograde.pipeline", "probe", "--json", "--imports", "find", "--scan-view"],
        cwd=ROOT,
        env=env,
        text=True,
        capture_output=True,
        timeout=3000,
    )
    result = json.loads(done.stdout)
    scan = result["view_scan"]
    print(f"{scan['files']} files, {scan['bytes'] / 2**30:.2f} GiB read, {scan['unreadable']} unreadable")
    assert scan["files"] > 1000 and scan["hits"] == {}, scan["hits"]
    assert result["ok"] and done.returncode == 0, done.stderr[-3000:]
