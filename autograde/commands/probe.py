"""``python -m autograde.pipeline probe``: the instructor's pre-flight, the sandbox probed as grading uses it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograde.grpo_grader import probe as probe_module
from autograde.grpo_grader import view
from autograde.grpo_grader.course import ROOT, GradingPipeline
from autograde.grpo_grader.job_caps import open_caps
from autograde.grpo_grader.probe import ProbeFailure
from autograde.grpo_grader.probe import Problem as ProbeProblem
from autograde.grpo_grader.sandbox_choice import choose_sandbox
from autograde.grpo_grader.slots import Slot


def job_caps_in_force(settings: GradingPipeline) -> dict:
    """Which per-job caps grading would use here (``job_caps.py``): the mechanism, set up for real and removed."""
    caps = open_caps(settings.job_caps, settings.job_memory_bytes(), settings.job_max_processes)
    try:
        return {
            "mechanism": caps.mechanism.name,
            "why": caps.mechanism.why,
            "memory_mb": caps.memory_bytes // 2**20,
            "tasks": caps.max_tasks,
            "describe": caps.describe(),
        }
    finally:
        caps.close()


def view_needles(settings: GradingPipeline) -> list[str]:
    """What no file of a sandbox's view may name: the checkout, the course folder, and every learner id of the
    course's ``submitted/`` and of the sample class of at least ``MIN_ID`` characters (a shorter one occurs by
    chance in binary files)."""
    from autograde.sample_class.build import SUBMITTED

    ids = set()
    for folder in (settings.dir("submitted"), SUBMITTED):
        if folder.is_dir():
            ids |= {p.name for p in folder.iterdir() if p.is_dir() and len(p.name) >= MIN_ID}
    return [str(ROOT), str(settings.course), *sorted(ids)]


MIN_ID = 6


def scan_the_view(settings: GradingPipeline, sandbox, base: Path) -> dict:
    """Every file a grading kernel can read in its sandbox (its view, its uid), read whole by the kernel's side of
    the probe (``probe.scan_view``): which of them name the checkout, the course folder or a learner id. The
    interpreter's own folders may name themselves (they are bound at their own paths)."""
    slot = Slot(base, "scan", settings, sandbox, uid=sandbox.uids[0] if sandbox.uids else None, zygotes=False)
    request = {"scan": {"needles": view_needles(settings), "allowed": view.interpreter_folders()}}
    done = slot.run_sandboxed_code(probe_module.source(), [json.dumps(request)], zygote=False, timeout=1800)
    report = probe_module.parse_output(done.stdout)
    if report is None:
        raise RuntimeError(f"the view scan failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    return report["scan"]


def probe_result(settings: GradingPipeline, import_mode: str = "import", scan: bool = False) -> dict:
    """The instructor's pre-flight as data: the sandbox probed as grading uses it (a kernel, as root a job of the
    slot's zygote, importing torch, ipykernel, nbformat and the graded lessons' imports inside it: probe.py), what it
    could read of the secrets, whether the files that name the checkout are empty there, the job caps in force, and ``ok``; or
    the problems that stop grading here, each with its cause and its fix. ``scan``: also every readable file of the
    kernel's view searched for the checkout, the course folder and the learner ids (``scan_the_view``)."""
    base = Path(tempfile.mkdtemp(prefix="grpo-probe-"))
    scanned = None
    try:
        sandbox = choose_sandbox(settings, base, probe_zygote=True, import_mode=import_mode)
        if scan:
            try:
                scanned = scan_the_view(settings, sandbox, base)
            finally:
                for handle in sandbox.leases:
                    handle.close()
    except ProbeFailure as failure:
        return {"ok": False, "sandbox": None, "problems": [p.as_dict() for p in failure.problems]}
    except RuntimeError as error:
        return {
            "ok": False,
            "sandbox": None,
            "problems": [{"code": "no-sandbox", "cause": str(error), "fix": "", "detail": ""}],
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    kernel = sandbox.probe
    own_ipc = bool(kernel.get("ipc_namespace")) and kernel.get("ipc_namespace") != _own_ipc_namespace()
    readable = sorted(p for p, ok in kernel.get("readable", {}).items() if ok)
    seed = bool(kernel.get("seed_in_environ"))
    # the files of the view that name the checkout (view.masked_files): nothing of them can be read in the sandbox
    named = sorted(p for p, size in kernel.get("masked", {}).items() if size > 0)
    return {
        "ok": not readable and not seed and not named and not (scanned or {}).get("hits"),
        "masked": sorted(kernel.get("masked", {})),
        "masked_not_empty": named,
        "view_scan": scanned,
        "job_caps": job_caps_in_force(settings),
        "sandbox": sandbox.mode,
        "describe": sandbox.describe(),
        "not_available": sandbox.problems,
        "problems": [],
        "kernel": kernel,
        "readable": readable,
        "seed_visible": seed,
        "ipc_own": own_ipc,
        "paths": sandbox.paths,
    }


def probe(settings: GradingPipeline, as_json: bool = False, import_mode: str = "import", scan: bool = False) -> int:
    """`python -m autograde.pipeline probe [--json] [--scan-view]`: exit 0 only when grading can start here with
    every secret hidden."""
    if as_json:  # stdout holds the one JSON object: what else is said goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            result = probe_result(settings, import_mode, scan)
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return 0 if result["ok"] else (2 if result["problems"] else 1)
    result = probe_result(settings, import_mode, scan)
    if result["problems"]:
        print("评分沙箱预检失败（the grading pre-flight failed）：", file=sys.stderr)
        for problem in result["problems"]:
            print(ProbeProblem(**problem).text(), file=sys.stderr)
        return 2
    kernel = result["kernel"]
    print(f"sandbox: {result['describe']}")
    for problem in result["not_available"]:
        print(f"  not available: {problem}")
    for path, readable in kernel.get("readable", {}).items():
        print(f"  {'READABLE' if readable else 'hidden  '}  {path}")
    for path in result["paths"].get("bind", []):
        print(f"  bound read-only (outside the virtual environment, on sys.path): {path}")
    loaded = [name for name, error in kernel.get("imports", {}).items() if error == "ok"]
    print(
        f"  kernel: {len(loaded)}/{len(kernel.get('imports', {}))} imports load inside the sandbox "
        "(torch, ipykernel, nbformat and the graded lessons' import lines)"
    )
    forked = " (forked from a zygote)" if kernel.get("zygote") else ""
    print(
        f"  kernel{forked} uid {kernel.get('uid')}, processes visible {kernel.get('visible_pids')}, "
        f"network {'available' if kernel.get('network') else 'none'}, "
        f"IPC namespace {'its own' if result['ipc_own'] else 'SHARED'}, "
        f"rest of the file system {'read-only' if kernel.get('readonly_root') else 'as usual'}, "
        f"address-space limit {kernel.get('rlimit_as', 0) / 2**30:.1f} GiB"
    )
    print(
        f"  {len(result['masked'])} file(s) of the view that name the checkout (an editable install's finder, .pth, "
        "direct_url.json...) cannot be read in the sandbox"
        + (f"; READABLE: {', '.join(result['masked_not_empty'])}" if result["masked_not_empty"] else "")
    )
    scanned = result["view_scan"]
    if scanned is not None:
        print(
            f"  view scan: {scanned['files']} readable files, {scanned['bytes'] / 2**30:.1f} GiB read as the kernel; "
            + (
                f"NAMING THE CHECKOUT OR A LEARNER: {scanned['hits']}"
                if scanned["hits"]
                else "none names the checkout, the course folder or a learner id"
            )
        )
    print(f"  {result['job_caps']['describe']}")
    if result["seed_visible"]:
        print("  GRADING SEED VISIBLE in a sandboxed process's environment")
    print("OK: grading can start here" if result["ok"] else "NOT OK: a sandboxed process can read secrets (above)")
    return 0 if result["ok"] else 1


def _own_ipc_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/ipc")
    except OSError:
        return ""
