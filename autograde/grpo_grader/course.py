"""Where things are and how the pipeline is configured (``GradingPipeline`` in ``nbgrader_config.py``)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

AUTOGRADE = Path(__file__).resolve().parents[1]   # <checkout>/autograde
ROOT = AUTOGRADE.parent                             # the course checkout (holds course.toml, tools/)
GRADER_VERSION = "3"                                # bump when a change must regrade every submission
ZYGOTE_RESIDENT_BYTES = 400 * 2**20                  # what one slot's zygote keeps resident (measured: ~375 MB)


@dataclass
class Settings:
    course: Path                      # the nbgrader course root (autograde/ by default)
    cell_timeout: int = 180
    notebook_timeout: int = 900
    workers: int = 0
    memory_limit_mb: int = 0
    max_submission_mb: int = 25
    sandbox: str = "auto"
    sandbox_uid_base: int = 61000
    kernel_files: list[str] = field(default_factory=lambda: ["course.toml", "pyproject.toml", "tools", "environments",
                                                             ".cache/tiny-qwen2-seed0", ".cache/online-sft-seed0"])
    course_id: str = "grpo-in-practice"
    grading_seed: str = ""            # the instructor's secret (oracle.grading_seed); never stored
    oracle_flags: dict = field(default_factory=dict)   # {assignment: {flag: bool}} extra case families
    # environment variables of every grading kernel and oracle driver (lesson 7 runs its short experiment)
    kernel_env: dict = field(default_factory=lambda: {"GRPO_ONLINE_RUN_MODE": "smoke"})
    # bwrap as root: fork the oracle's driver from a sandboxed zygote that imported torch once (sandbox.py)
    oracle_zygote: bool = True
    # bwrap as root: fork nbgrader's kernels from a sandboxed zygote that imported ipykernel and torch once
    kernel_zygote: bool = True
    # {assignment: [marker, ...]}: the demonstration cells neither the kernel nor the driver runs (c.SafeExecute)
    demo_cells: dict = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.course / "nbgrader_config.py"

    @property
    def db_path(self) -> Path:
        return self.course / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.db_path}"

    def dir(self, name: str) -> Path:
        return self.course / name

    def worker_count(self) -> int:
        return self.workers if self.workers > 0 else max(1, os.cpu_count() or 1)

    def memory_limit_bytes(self) -> int:
        if self.memory_limit_mb > 0:
            return self.memory_limit_mb * 2**20
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        # two sandboxed processes per slot at a time: nbgrader's kernel and the oracle's driver beside it; and per
        # slot its zygotes stay resident (bwrap as root; about 0.38 GB each with torch, IPython and transformers)
        zygotes = ZYGOTE_RESIDENT_BYTES * (int(self.kernel_zygote) + int(self.oracle_zygote))
        share = int((0.8 * total - self.worker_count() * zygotes) / (2 * self.worker_count()))
        return max(2 * 2**30, min(8 * 2**30, share))


def check_pipeline_options(options, known, config_file: Path) -> None:
    """Raise ValueError naming every ``c.GradingPipeline.<name>`` of ``config_file`` that is not a pipeline option
    (nbgrader ignores that section, so a typo would silently leave the default in force), with the closest name."""
    import difflib

    unknown = sorted(set(options) - set(known))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(f"c.GradingPipeline.{name}" + (f"（是不是 {close[0]}？did you mean {close[0]}?）" if close else ""))
        raise ValueError(f"{config_file}: 没有这些评分流水线设置（unknown GradingPipeline options）：{'; '.join(hints)}。"
                         f"可用的设置（options）：{', '.join(known)}")


def load_settings(course: Path | None = None, **overrides) -> Settings:
    """Read ``c.GradingPipeline.*``, ``c.Execute.timeout`` and the course id from the course's config."""
    from traitlets.config.loader import PyFileConfigLoader

    course = (course or AUTOGRADE).resolve()
    settings = Settings(course=course)
    config_file = course / "nbgrader_config.py"
    if config_file.exists():
        config = PyFileConfigLoader(config_file.name, path=str(course)).load_config()
        pipeline = config.get("GradingPipeline", {})
        known = ("notebook_timeout", "workers", "memory_limit_mb", "max_submission_mb", "sandbox",
                 "sandbox_uid_base", "kernel_files", "oracle_flags", "kernel_env",
                 "oracle_zygote", "kernel_zygote")
        check_pipeline_options(pipeline, known, config_file)
        for key in known:
            if key in pipeline:
                setattr(settings, key, pipeline[key])
        if "demo_cells" in config.get("SafeExecute", {}):
            settings.demo_cells = dict(config.SafeExecute.demo_cells)
        if "timeout" in config.get("Execute", {}):
            settings.cell_timeout = int(config.Execute.timeout)
        if "course_id" in config.get("CourseDirectory", {}):
            settings.course_id = config.CourseDirectory.course_id
    for key, value in overrides.items():
        if value is not None:
            setattr(settings, key, value)
    return settings


def venv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the interpreter's bin folder first on PATH (nbgrader runs `alembic`) and this checkout
    first on PYTHONPATH: ``tools.chain.notebooks.venv_env`` with ``pythonpath=[ROOT]``."""
    # nbgrader imports the course config, which imports this checkout's `autograde.grpo_grader` (and `tools`);
    # the editable install provides both, PYTHONPATH keeps a subprocess on this checkout even without it
    from tools.chain.notebooks import venv_env as subprocess_env

    return subprocess_env(extra, pythonpath=[ROOT])


# Kernel files that are built, not committed: made here (in the grader's process, before any slot copies the
# kernel files) when missing, so that no notebook builds them inside the read-only sandbox.
PREPARE = {".cache/tiny-qwen2-seed0": "tools.tiny_model:tiny_checkpoint_path",
           ".cache/online-sft-seed0": "tools.online_grpo:sft_checkpoint_path"}


def prepare_kernel_files(settings: Settings, say=print) -> None:
    """Build what ``kernel_files`` names and ``PREPARE`` knows how to build (e.g. the tiny checkpoint)."""
    import importlib

    for name in settings.kernel_files:
        recipe = PREPARE.get(name)
        if recipe is None:
            continue
        module, function = recipe.split(":")
        if not (ROOT / name).exists():
            say(f"[autograde] 准备评分所需的文件 {name}（preparing {name} for the kernels; once）")
        getattr(importlib.import_module(module), function)()  # returns at once when it is up to date
