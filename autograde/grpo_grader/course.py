"""Where things are and how the pipeline is configured (``GradingPipeline`` in ``nbgrader_config.py``)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from traitlets import Bool, Dict, Integer, List, Unicode
from traitlets.config import Configurable

from tools import env_vars
from tools.project_runtime import MARKER

AUTOGRADE = Path(__file__).resolve().parents[1]  # <checkout>/autograde
ROOT = AUTOGRADE.parent  # the course checkout (holds course.toml, tools/)
GRADER_VERSION = "3"  # bump when a change must regrade every submission
ZYGOTE_RESIDENT_BYTES = 400 * 2**20  # what one slot's zygote keeps resident (measured: ~375 MB)


def _value_text(value) -> str:
    """A setting's value as the README's tables print it."""
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    if isinstance(value, list):
        return ", ".join(f"`{v}`" for v in value) if value else "`[]`"
    if isinstance(value, dict):
        return f"`{value!r}`" if len(repr(value)) <= 60 else f"{len(value)} 项 / entries"
    return f"`{value!r}`"


class GradingPipeline(Configurable):
    """The grading pipeline's settings: ``c.GradingPipeline.<name>`` in ``nbgrader_config.py`` (nbgrader itself
    ignores that section). Each setting is defined once, here: its default, its help (English) and its ``zh`` help
    (the README's Chinese table); both README tables are generated from them (``python -m autograde.pipeline
    settings --write``, run by ``make release``; ``tests/test_instructor.py`` keeps them equal).

    Beside the settings, an instance carries what a run reads from nbgrader's own sections of the same file (one home
    each): ``cell_timeout`` (``c.Execute.timeout``), ``course_id`` (``c.CourseDirectory.course_id``) and
    ``demo_cells`` (``c.SafeExecute.demo_cells``); and the course folder. The grading seed is run state, not a
    setting: ``pipeline.autograde`` reads it and passes it on."""

    notebook_timeout = Integer(
        900,
        help="hard wall-clock limit per notebook (s): nbgrader and the kernel's whole process tree are killed, "
        "the notebook scores 0 with status `timeout`",
    ).tag(
        config=True,
        zh="整本笔记本的硬时限（秒）；超时则杀掉 nbgrader 进程和内核的整个进程树，这本笔记本记 0 分（`timeout`）",
    )
    workers = Integer(
        0,
        help="parallel grading slots; 0 = one per CPU core",
    ).tag(config=True, zh="并行评分槽位数；0 = 每核一个")
    memory_limit_mb = Integer(
        0,
        help="address-space limit (`RLIMIT_AS`) of each kernel, in MiB; 0 = (80% of RAM - the slots' resident "
        "zygotes, about 0.4 GB each) / slots, clamped to 2-8 GiB",
    ).tag(
        config=True,
        zh="每个内核的地址空间上限（`RLIMIT_AS`，MiB）；0 = （内存的 80% − 各槽位 zygote 常驻的内存，每个约 0.4 GB）/ 槽位数，"
        "限制在 2–8 GiB",
    )
    grace_after_results = Integer(
        20,
        help="seconds a notebook may run on once its kernel has sent the result of every oracle case; then the "
        "kernel is killed with every process of its uid, the cells left fail, and the points already sent stand",
    ).tag(
        config=True,
        zh="内核送出全部 oracle 用例的结果之后，笔记本还能运行的秒数；之后杀掉内核（连同该 uid 的所有进程），剩下的单元记为失败，"
        "已经送出的分数保留",
    )
    job_memory_mb = Integer(
        0,
        help="memory cap of one job - a grading kernel (which runs the oracle's cases too) with every process it forks - as a "
        "whole, in MiB (a cgroup as root, else the sum of its processes' Pss; see job caps); 0 = `memory_limit_mb`'s "
        "value. A job above it is stopped: its notebook keeps the points earned before, with the reason",
    ).tag(
        config=True,
        zh="每个作业（一个评分内核，它也运行 oracle 的用例，连同它派生的所有进程）合计的内存上限（MiB；以 root 评分时用 cgroup，"
        "否则按各进程 Pss 之和，见“每个作业的上限”）；0 = 与 `memory_limit_mb` 相同。超过即终止该作业：之前得到的分数保留，并写明原因",
    )
    job_max_processes = Integer(
        256,
        help="tasks (processes and threads) one job may hold at a time, everything it forks included; a job that "
        "reaches it is stopped: its notebook keeps the points earned before, with the reason",
    ).tag(
        config=True,
        zh="每个作业同时最多能有的任务数（进程与线程，含它派生的一切）；达到即终止该作业：之前得到的分数保留，并写明原因",
    )
    job_caps = Unicode(
        "auto",
        help="how the job caps are enforced: `auto` (a cgroup per job where this machine lets the grader make one: "
        "root with cgroup v2's or v1's memory and pids controllers; else `rlimit`) or `rlimit` (RLIMIT_NPROC per "
        "job and a watcher adding up each job's Pss)",
    ).tag(
        config=True,
        zh="每个作业的上限怎样执行：`auto`（本机允许时每个作业一个 cgroup：以 root 运行且有 cgroup v2 或 v1 的 memory 与 pids "
        "控制器；否则同 `rlimit`）或 `rlimit`（每个作业的 `RLIMIT_NPROC`，以及把每个作业各进程的 Pss 相加的监视线程）",
    )
    max_submission_mb = Integer(
        25,
        help="a larger submitted notebook scores 0 (status `invalid`)",
    ).tag(config=True, zh="更大的提交记 0 分（`invalid`）")
    sandbox = Unicode(
        "auto",
        help="how kernels are isolated: `auto` (= `bwrap`, root or not) or `none` (only when asked for); see the "
        "kernel sandbox section",
    ).tag(
        config=True,
        zh="内核的隔离方式：`auto`（即 `bwrap`，root 与非 root 都是）或 `none`（只在明确要求时使用）；见“内核沙箱”一节",
    )
    sandbox_uid_base = Integer(
        61000,
        help="as root: kernels run as free uids from here on, one per slot (locked per run, so concurrent runs "
        "never share one)",
    ).tag(
        config=True,
        zh="以 root 评分时，内核从这个 uid 起用空闲的 uid（每个槽位一个，按运行加锁，并发的评分不会共用）",
    )
    kernel_files = List(
        Unicode(),
        default_value=[
            MARKER,
            "pyproject.toml",
            "tools",
            "environments",
            ".cache/tiny-qwen2-seed0",
            ".cache/online-sft-seed0",
        ],
        help="files of the course checkout the kernel may read (copied into each slot's read-only course copy, "
        "readable by the kernel's uid); the tiny checkpoint (lesson 5) and lesson 7's SFT warm start are built "
        "before grading when missing; `tools/lessons/<assignment>.py` is hidden while that lesson is graded",
    ).tag(
        config=True,
        zh="内核能读到的课程文件（复制到每个槽位的只读课程副本，内核的 uid 可读）；微型检查点（第 5 课）和第 7 课的 SFT "
        "起点缺失时评分前先构建；`tools/lessons/<作业>.py` 在评这一课时对内核隐藏，其他课的模块保留",
    )
    extra_readonly_paths = List(
        Unicode(),
        help="folders outside the virtual environment holding packages the kernels import, bound read-only "
        "into the sandbox; those on the interpreter's `sys.path` (a `.pth`, `PYTHONPATH`, the user "
        "site) are bound without it; a course checkout or a folder above one never is (see the "
        "grading pre-flight)",
    ).tag(
        config=True,
        zh="虚拟环境之外、内核要导入的包所在的目录，只读地放进沙箱；解释器 `sys.path` 上的这类目录（`.pth`、"
        "`PYTHONPATH`、`--user`）会自动放进去；课程目录及其上级目录永远不放（见“评分前的预检”）",
    )
    oracle_flags = Dict(
        help="{assignment: {flag: True}}: case families an oracle keeps off by default, e.g. "
        '`{"nb02_grpo_objective": {"zero_one_masks": True}}`',
    ).tag(config=True, zh='打开 oracle 里默认关闭的用例族，例如 `{"nb02_grpo_objective": {"zero_one_masks": True}}`')
    kernel_env = Dict(
        default_value={env_vars.ONLINE_RUN_MODE: "smoke"},
        help="environment variables of every grading kernel, whatever the instructor's shell holds (the sandbox "
        "passes on only a few); lesson 7 reads this one and runs its short experiment",
    ).tag(
        config=True,
        zh="每个评分内核的环境变量（沙箱只保留少数变量，其余都不传入）；第 7 课据此运行它的短实验",
    )
    kernel_zygote = Bool(
        True,
        help="as root, fork nbgrader's kernels from each slot's kernel zygote inside bubblewrap, which imported "
        "ipykernel, torch, matplotlib and transformers (and built lesson 7's grading policy) once; False starts each "
        "kernel as a fresh process",
    ).tag(
        config=True,
        zh="以 root 评分时 nbgrader 的内核从每个槽位在 bubblewrap 里的内核 zygote 派生（它一次性导入 ipykernel、torch、"
        "matplotlib 和 transformers，并构建第 7 课的评分策略模型）；`False` 则每个内核是一个新进程",
    )

    def __init__(
        self,
        course: Path | None = None,
        cell_timeout: int | None = None,
        course_id: str | None = None,
        demo_cells: dict | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.course = Path(course or AUTOGRADE).resolve()  # the nbgrader course root
        self._nbgrader_config = kwargs.get("config")
        # given values stand in for the cached ones of the properties below
        if cell_timeout is not None:
            self.__dict__["cell_timeout"] = int(cell_timeout)
        if course_id is not None:
            self.__dict__["course_id"] = course_id
        if demo_cells is not None:
            self.__dict__["demo_cells"] = dict(demo_cells)

    # Read from nbgrader's own sections (their defaults when the file does not set them) when first asked for, unless
    # given: that imports nbgrader (~1 s), which a lesson's hidden-test cell reading only `oracle_flags` never needs.
    @functools.cached_property
    def cell_timeout(self) -> int:
        from nbgrader.preprocessors import Execute

        return int(Execute(config=self._nbgrader_config).timeout)

    @functools.cached_property
    def course_id(self) -> str:
        from nbgrader.coursedir import CourseDirectory

        return CourseDirectory(config=self._nbgrader_config).course_id

    @functools.cached_property
    def demo_cells(self) -> dict:
        from .preprocessors import SafeExecute

        return dict(SafeExecute(config=self._nbgrader_config).demo_cells)

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
        # one sandboxed process per slot at a time, its kernel; and per slot its zygote stays resident (about 0.38 GB
        # with torch, IPython and transformers)
        zygote = ZYGOTE_RESIDENT_BYTES * int(self.kernel_zygote)
        share = int((0.8 * total - self.worker_count() * zygote) / self.worker_count())
        return max(2 * 2**30, min(8 * 2**30, share))

    def job_memory_bytes(self) -> int:
        """The memory cap of one job as a whole (``job_memory_mb``; 0: the per-process limit's value)."""
        return self.job_memory_mb * 2**20 if self.job_memory_mb > 0 else self.memory_limit_bytes()


def settings_tables(language: str, settings: GradingPipeline | None = None) -> str:
    """The README's settings tables (``language`` "zh" or "en"), generated from the traits' help texts (one home):
    the course's own classes (``GradingPipeline``, ``SafeExecute``) with default and this course's value, then
    the nbgrader settings this course's ``nbgrader_config.py`` sets for execution, with nbgrader's own help."""
    from traitlets.config.loader import PyFileConfigLoader

    from .preprocessors import SafeExecute

    settings = settings or load_settings()
    config = PyFileConfigLoader(settings.config_file.name, path=str(settings.course)).load_config()
    zh = language == "zh"
    head = "| 设置 | 默认 | 本课程 | 含义 |" if zh else "| setting | default | this course | meaning |"
    lines = [head, "| --- | --- | --- | --- |"]
    for cls in (GradingPipeline, SafeExecute):
        for name, trait in cls.class_traits(config=True).items():
            if cls is SafeExecute and name not in SafeExecute.__dict__:
                continue  # nbgrader's inherited Execute settings: the second table
            section = config.get(cls.__name__, {})
            value = _value_text(section[name]) if name in section else ("（同默认）" if zh else "(default)")
            text = trait.metadata["zh"] if zh else " ".join(trait.help.split())
            lines.append(f"| `c.{cls.__name__}.{name}` | {_value_text(trait.default())} | {value} | {text} |")
    lines += [
        "",
        "| nbgrader 的设置 | 本课程 | nbgrader 的说明 |"
        if zh
        else "| nbgrader setting | this course | nbgrader's help |",
        "| --- | --- | --- |",
    ]
    from nbgrader.preprocessors import Execute, LimitOutput

    for cls in (Execute, LimitOutput):
        traits = cls.class_traits(config=True)
        for name, value in sorted(config.get(cls.__name__, {}).items()):
            help_text = " ".join(traits[name].help.split()) if name in traits else ""
            lines.append(f"| `c.{cls.__name__}.{name}` | {_value_text(value)} | {help_text} |")
    return "\n".join(lines)


def check_pipeline_options(options, known, config_file: Path) -> None:
    """Raise ValueError naming every ``c.GradingPipeline.<name>`` of ``config_file`` that is not a pipeline option
    (nbgrader ignores that section, so a typo would silently leave the default in force), with the closest name."""
    import difflib

    unknown = sorted(set(options) - set(known))
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            hints.append(
                f"c.GradingPipeline.{name}" + (f"（是不是 {close[0]}？did you mean {close[0]}?）" if close else "")
            )
        raise ValueError(
            f"{config_file}: 没有这些评分流水线设置（unknown GradingPipeline options）：{'; '.join(hints)}。"
            f"可用的设置（options）：{', '.join(known)}"
        )


def load_settings(course: Path | None = None, **overrides) -> GradingPipeline:
    """The pipeline's settings of ``course`` (``autograde/`` by default): ``c.GradingPipeline.*`` of its
    ``nbgrader_config.py`` (an unknown name is an error naming the closest one) plus ``c.Execute.timeout``,
    ``c.CourseDirectory.course_id`` and ``c.SafeExecute.demo_cells``; ``overrides`` (the command line's ``None``
    means "not given") win, ``cell_timeout`` among them."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    course = (course or AUTOGRADE).resolve()
    config_file = course / "nbgrader_config.py"
    config = Config()
    if config_file.exists():
        config = PyFileConfigLoader(config_file.name, path=str(course)).load_config()
        check_pipeline_options(
            config.get("GradingPipeline", {}), GradingPipeline.class_trait_names(config=True), config_file
        )
    given = {key: value for key, value in overrides.items() if value is not None}
    cell_timeout = given.pop("cell_timeout", None)
    for key, value in given.items():
        config.GradingPipeline[key] = value
    return GradingPipeline(course=course, cell_timeout=cell_timeout, config=config)


def venv_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the interpreter's bin folder first on PATH (nbgrader runs `alembic`) and this checkout
    first on PYTHONPATH: ``tools.project_runtime.venv_env`` with ``pythonpath=[ROOT]``."""
    # nbgrader imports the course config, which imports this checkout's `autograde.grpo_grader` (and `tools`);
    # the editable install provides both, PYTHONPATH keeps a subprocess on this checkout even without it
    from tools.project_runtime import venv_env as subprocess_env

    return subprocess_env(extra, pythonpath=[ROOT])


# Kernel files that are built, not committed: made here (in the grader's process, before any slot copies the
# kernel files) when missing, so that no notebook builds them inside the read-only sandbox.
PREPARE = {
    ".cache/tiny-qwen2-seed0": "tools.tiny_model:tiny_checkpoint_path",
    ".cache/online-sft-seed0": "tools.online_grpo:sft_checkpoint_path",
}


def prepare_kernel_files(settings: GradingPipeline, say=print) -> None:
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
