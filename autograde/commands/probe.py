"""``python -m autograde.pipeline probe``: the instructor's pre-flight, the sandbox probed as grading uses it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.probe import ProbeFailure
from autograde.grpo_grader.probe import Problem as ProbeProblem
from autograde.grpo_grader.sandbox_choice import choose_sandbox


def probe_result(settings: GradingPipeline, import_mode: str = "import") -> dict:
    """The instructor's pre-flight as data: the sandbox probed as grading uses it (a kernel, as root a job of the
    slot's zygote, importing torch, ipykernel, nbformat and the graded lessons' imports inside it: probe.py), what it
    could read of the secrets, and ``ok``; or the problems that stop grading here, each with its cause and its fix."""
    base = Path(tempfile.mkdtemp(prefix="grpo-probe-"))
    try:
        sandbox = choose_sandbox(settings, base, probe_zygote=True, import_mode=import_mode)
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
    return {
        "ok": not readable and not seed,
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


def probe(settings: GradingPipeline, as_json: bool = False, import_mode: str = "import") -> int:
    """`python -m autograde.pipeline probe [--json]`: exit 0 only when grading can start here with every secret
    hidden."""
    if as_json:  # stdout holds the one JSON object: what else is said goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            result = probe_result(settings, import_mode)
        print(json.dumps(result, ensure_ascii=False, indent=1))
        return 0 if result["ok"] else (2 if result["problems"] else 1)
    result = probe_result(settings, import_mode)
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
    if result["seed_visible"]:
        print("  GRADING SEED VISIBLE in a sandboxed process's environment")
    print("OK: grading can start here" if result["ok"] else "NOT OK: a sandboxed process can read secrets (above)")
    return 0 if result["ok"] else 1


def _own_ipc_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/ipc")
    except OSError:
        return ""
