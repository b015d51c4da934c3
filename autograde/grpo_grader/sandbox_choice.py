"""Choosing the grading sandbox: the configured mode (``auto``: bubblewrap, root or not; ``none`` only when asked for),
the machine's namespaces tried, the uids leased, and one slot probed from inside before any notebook is graded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import probe, view
from .course import ROOT, GradingPipeline, prepare_kernel_files
from .isolation import SANDBOX_MODES, Sandbox
from .slots import Slot
from .uids import lease_uids


def check_bwrap() -> None:
    """Raise ``probe.ProbeFailure`` naming the cause and the exact fix when bubblewrap cannot build a grading sandbox
    here: not installed; root without CAP_SYS_ADMIN or under a container's seccomp/AppArmor profile; not root where
    user namespaces are blocked (sysctl, Ubuntu 24.04's AppArmor restriction, a container)."""
    problems = probe.namespace_problems(str(ROOT))
    if problems:
        raise probe.ProbeFailure(problems, "bwrap")


def choose_sandbox(
    settings: GradingPipeline, base: Path, slots: int = 1, probe_zygote: bool = False, import_mode: str = "find"
) -> Sandbox:
    """The configured sandbox (``auto``: bubblewrap, root or not; ``none`` only when asked for), probed
    (``probe_zygote``: as root through a job of the slot's zygote - `pipeline.py probe` does; a grading run probes the
    kernel's view in a fresh bubblewrap, which the zygote's jobs share).

    The kernel files are built first when missing (the tiny checkpoint, lesson 7's warm start): every slot, the
    probe's included, copies them into its read-only course copy.

    The probe also tries what grading needs (probe.py): torch, ipykernel, nbformat and the graded lessons' imports
    (``import_mode`` ``find``: their top-level packages found on ``sys.path``, a grading run's cheap check;
    ``import``: each imported, `pipeline.py probe`); a failure raises ``probe.ProbeFailure`` naming cause and fix
    before any notebook is graded. The folders outside the virtual environment the interpreter's ``sys.path`` needs
    are bound read-only into the sandbox (``Sandbox.paths``)."""
    prepare_kernel_files(settings)
    homes = view.homes()
    paths = probe.interpreter_paths(
        view.shown_already(),
        view.never_bound(settings, base) + homes,
        homes,
        [str(p) for p in settings.extra_readonly_paths],
    )
    imports = probe.probe_imports(ROOT, top_level=import_mode == "find")
    failures: list[probe.Problem] = [
        probe.Problem(
            "extra-path-refused",
            f"c.GradingPipeline.extra_readonly_paths 里的 {path} 不能放进沙箱：{why}（refused）",
            "只列出装有 Python 包的目录（如某个 site-packages），不要列课程目录或它的上级目录",
        )
        for path, why in paths["refused"].items()
        if path in settings.extra_readonly_paths
    ]
    mode = "bwrap" if settings.sandbox == "auto" else settings.sandbox
    if mode not in SANDBOX_MODES:
        raise ValueError(f"GradingPipeline.sandbox must be auto or one of {', '.join(SANDBOX_MODES)}, not {mode!r}")
    sandbox = Sandbox(mode=mode, paths=paths)
    slot = None
    try:
        if mode == "bwrap":
            check_bwrap()
            if os.geteuid() == 0:  # one per slot: its kernels'
                sandbox.uids, sandbox.leases = lease_uids(settings.sandbox_uid_base, slots)
        slot = Slot(base, "probe", settings, sandbox, uid=sandbox.uids[0] if sandbox.uids else None)
        (slot.nbgrader / "gradebook.db").write_text("decoy")  # the slot's own gradebook: a secret (view.SECRETS)
        report = slot.probe(
            view.secret_paths(settings, slot.nbgrader), zygote=probe_zygote, imports=imports, import_mode=import_mode
        )
    except probe.ProbeFailure as failure:  # the machine does not allow bubblewrap: the cause and the fix
        for handle in sandbox.leases:
            handle.close()
        raise probe.ProbeFailure(failures + failure.problems, mode) from None
    except Exception as error:
        for handle in sandbox.leases:
            handle.close()
        raise RuntimeError(
            f"no usable kernel sandbox ({mode}: {error}); to grade without isolation anyway, pass --sandbox none or "
            "set c.GradingPipeline.sandbox = 'none' (kernels can then read the answers): see autograde/README.md"
        ) from error
    finally:
        if slot is not None:
            slot.stop_zygote()
        shutil.rmtree(base / "probe", ignore_errors=True)
    problems = []
    if not str(report.get("tools", "")).startswith(str(base)) and mode != "none":
        problems.append(f"the kernel's course copy is not importable ({report.get('tools')})")
    missing = probe.import_problems(report, "评分内核（kernel）", paths, str(settings.config_file))
    if missing or failures:
        for handle in sandbox.leases:
            handle.close()
        raise probe.ProbeFailure(failures + missing, mode)
    if problems:
        for handle in sandbox.leases:
            handle.close()
        raise RuntimeError(f"no usable kernel sandbox ({mode}: {problems[0]})")
    sandbox.probe = report
    return sandbox
