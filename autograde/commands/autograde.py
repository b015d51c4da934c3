"""``python -m autograde.pipeline autograde``: grade every new or changed submission in parallel slots, each in its
sandbox, and merge the results into the course gradebook (or, with ``--shard k/N``, into a shard folder)."""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from autograde.commands.merge_shards import save_shard_results, shard_folder
from autograde.grpo_grader import nbgrader_forkserver
from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.digests import SEED_NAME, grading_seed
from autograde.grpo_grader.gradebook import (
    backup_gradebook,
    hand_over,
    load_course_info,
    make_template,
    merge,
    read_report,
)
from autograde.grpo_grader.job_caps import open_caps
from autograde.grpo_grader.learner_grading import fingerprint, grade_learner, runnable_notebooks
from autograde.grpo_grader.outcomes import AssignmentResult, NotebookResult
from autograde.grpo_grader.sandbox_choice import choose_sandbox
from autograde.grpo_grader.slots import Slot, mount_socket_tmpfs, unmount
from autograde.grpo_grader.submission import SKIPPED, collect_submitted
from autograde.grpo_grader.zygotes import NOTHING_WARM, ZygoteWarm


def _say(message: str) -> None:
    from tqdm import tqdm

    tqdm.write(message, file=sys.stdout)


def in_shard(learner: str, shard: tuple[int, int] | None) -> bool:
    """Whether ``learner`` belongs to shard k of N (1-based): a stable hash of the id, the same on every machine."""
    if shard is None:
        return True
    k, n = shard
    return int(hashlib.sha256(learner.encode()).hexdigest(), 16) % n == k - 1


def collect_work(
    settings: GradingPipeline,
    course_info: dict,
    force: bool,
    only: list[str] | None,
    shard: tuple[int, int] | None,
    seed: str,
):
    """[(learner, [(assignment, folder, fingerprint)])] to grade, the folders of ``submitted/`` that are not graded
    (``submission.Skipped``, each with its reason) and how many submissions are unchanged."""
    learners, skipped = collect_submitted(settings.dir("submitted"), course_info)
    wanted = lambda learner: (not only or learner in only) and in_shard(learner, shard)  # noqa: E731
    todo, unchanged = [], 0
    for learner, folders in learners:
        if not wanted(learner):
            continue
        work = []
        for folder in folders:
            fp = fingerprint(folder, settings, course_info, folder.name, seed)
            report = read_report(settings, learner, folder.name)
            if not force and report and report.get("fingerprint") == fp and report.get("status") != "error":
                unchanged += 1
                continue
            work.append((folder.name, folder, fp))
        if work:
            todo.append((learner, work))
    return todo, [item for item in skipped if wanted(item.learner)], unchanged


def _crash_results(learner: str, work, error: BaseException, course_info: dict) -> list[AssignmentResult]:
    results = []
    for assignment, _, fp in work:
        result = AssignmentResult(learner=learner, assignment=assignment, fingerprint=fp)
        for name, nb in course_info[assignment]["notebooks"].items():
            result.notebooks.append(
                NotebookResult(
                    notebook=name,
                    status="error",
                    reason=f"得 0 分：评分流程出错（grader crashed）：{error!r}"[:500],
                    max_score=sum(c["max_score"] for c in nb["cells"].values()),
                    grades={gid: {"auto_score": 0.0, "needs_manual_grade": False} for gid in nb["cells"]},
                )
            )
        results.append(result)
    return results


SUBMITTED_LAYOUT = """提交应放在（submissions go here）：
  {submitted}/<学号>/<作业名>/<作业名>.ipynb
例如（for example）：
  {submitted}/alice/nb01_group_advantages/nb01_group_advantages.ipynb
学号只能含字母、数字和 _.@+-；作业名：{assignments}
（nbgrader collect 会按这个布局放好；也可以手动复制。试一试：make autograde ARGS=--sample 会先放入示例班级）"""


def _check_course(settings: GradingPipeline) -> dict | None:
    """The course's assignments, or None after saying what is missing (release, submissions)."""
    if not settings.db_path.exists():
        print(
            f"没有 {settings.db_path}：请先运行 `make release`（no gradebook: run `make release` first）",
            file=sys.stderr,
        )
        return None
    course_info = load_course_info(settings)
    if not course_info:
        print("gradebook 中没有作业：请先运行 `make release`（no assignment in the gradebook）", file=sys.stderr)
        return None
    return course_info


def _no_submissions(settings: GradingPipeline, course_info: dict) -> bool:
    submitted = settings.dir("submitted")
    if submitted.is_dir() and any(p.is_dir() for p in submitted.iterdir()):
        return False
    state = "是空的（is empty）" if submitted.is_dir() else "不存在（does not exist）"
    print(
        f"[autograde] {submitted} {state}：没有可以评分的提交（nothing to grade）。\n"
        + SUBMITTED_LAYOUT.format(submitted=submitted, assignments=", ".join(sorted(course_info)))
    )
    return True


def _open_sandbox(settings: GradingPipeline, base: Path, workers: int):
    """The probed sandbox (or None after printing why there is none)."""
    try:
        sandbox = choose_sandbox(settings, base, slots=workers)
    except RuntimeError as error:
        print(f"[autograde] {error}", file=sys.stderr)
        return None
    print(f"[autograde] sandbox {sandbox.describe()}")
    for problem in sandbox.problems:
        print(f"[autograde]   (not available: {problem})")
    for path in sandbox.paths.get("bind", []):  # probe.interpreter_paths: what the kernels' imports need
        print(f"[autograde]   只读放进沙箱（bound read-only: on sys.path, outside the virtual environment）：{path}")
    if sandbox.mode == "none":
        readable = [p for p, ok in sandbox.probe.get("readable", {}).items() if ok]
        print(
            "[autograde] WARNING 内核可以读取这些文件（含答案或隐藏测试）："
            + ", ".join(readable)
            + "。以 root 运行或启用 user namespaces 才能隔离；见 autograde/README.md。"
        )
    return sandbox


def zygote_warm(works) -> ZygoteWarm:
    """What the zygote prepares for the assignments in ``works`` (each a learner's work list): the union of their
    oracles' ``zygote_imports`` and ``zygote_warm`` calls, in a stable order, once each."""
    from autograde.grpo_grader.oracle import load_oracle

    loaded = (load_oracle(a) for a in sorted({a for work in works for a, _, _ in work}))
    oracles = [oracle for oracle in loaded if oracle is not None]

    def union(names_of) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for oracle in oracles for name in names_of(oracle)))

    return ZygoteWarm(
        imports=union(lambda oracle: oracle.zygote_imports), calls=union(lambda oracle: oracle.zygote_warm)
    )


def grading_order(todo):
    """``todo`` in the order the slots take it: learners with more assignments to grade first (a stable sort, so by
    name among equals). The longest jobs start while every slot is busy and the last ones are short: a learner's
    notebooks run one after the other on one slot, so a learner taken last with seven notebooks (or two that wait
    out their time limits) would keep one slot working while the others stand idle."""
    return sorted(todo, key=lambda item: -len(item[1]))


def _grade_in_slots(
    settings: GradingPipeline,
    course_info: dict,
    todo,
    slots: list[Slot],
    template: Path,
    staging: Path,
    statuses: dict[str, int],
    sink,
    seed: str,
) -> None:
    """Grade every learner of ``todo`` on the free slots; hand each one's results to ``sink`` as it finishes."""
    from tqdm import tqdm

    free: queue.Queue[Slot] = queue.Queue()
    for slot in slots:
        free.put(slot)

    def job(learner: str, work):
        slot = free.get()
        try:
            return grade_learner(slot, settings, course_info, learner, work, staging, template, seed)
        finally:
            free.put(slot)

    with (
        ThreadPoolExecutor(max_workers=len(slots)) as pool,
        tqdm(
            total=len(todo), unit="learner", desc="autograde", file=sys.stdout, disable=None, dynamic_ncols=True
        ) as bar,
    ):
        futures = {pool.submit(job, learner, work): (learner, work) for learner, work in grading_order(todo)}
        try:
            for future in as_completed(futures):
                learner, work = futures[future]
                try:
                    results = future.result()
                except Exception as error:  # a bug in the pipeline must not stop the class
                    results = _crash_results(learner, work, error, course_info)
                failed = sink(results) or {}  # {assignment: reason} whose results could not be placed (merge)
                for result in results:
                    status = "error" if result.assignment in failed else result.status
                    statuses[status] = statuses.get(status, 0) + 1
                    mark = "" if status == "graded" else f" [{status}]"
                    _say(f"  {learner:<30} {result.assignment:<24} {result.score:g}/{result.max_score:g}{mark}")
                    if result.assignment in failed:
                        _say(f"    {failed[result.assignment]}")
                bar.update(1)
        except KeyboardInterrupt:
            _say("[autograde] stopped: killing the running notebooks; learners merged so far are kept")
            for slot in slots:
                slot.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def autograde(
    settings: GradingPipeline,
    force: bool = False,
    only: list[str] | None = None,
    keep: bool = False,
    shard: tuple[int, int] | None = None,
) -> int:
    if only:
        submitted = settings.dir("submitted")
        unknown = [learner for learner in only if not (submitted / learner).is_dir()]
        if unknown:
            known = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
            print(
                f"[autograde] 没有这个学员（no such learner）：{', '.join(unknown)}；{submitted} 下的学员（learners）："
                + (
                    ", ".join(known[:20]) + (f" ...（共 {len(known)} 个）" if len(known) > 20 else "")
                    or "（没有 none）"
                ),
                file=sys.stderr,
            )
            return 2
    course_info = _check_course(settings)
    if course_info is None:
        return 2
    if _no_submissions(settings, course_info):
        return 0
    kept = backup_gradebook(settings)  # before anything is merged (gradebook.py: the newest KEEP_BACKUPS kept)
    if kept is not None:
        print(f"[autograde] gradebook.db 已备份（backed up）：{kept}")
    seed = grading_seed(create=True, announce=print, course=settings.course)  # run state: passed on, never stored
    hand_over(settings, settings.course / SEED_NAME)  # as root: the course folder owner's, as everything written
    todo, skipped, unchanged = collect_work(settings, course_info, force, only, shard, seed)
    for item in skipped:  # each is a row of grades.csv too (gradebook.export_rows)
        where = "/".join(part for part in (item.learner, item.assignment) if part)
        print(f"[autograde] 跳过（skipped）{where}: {item.reason}")
    if not todo:
        print(
            f"[autograde] 没有需要评分的新提交（{unchanged} 份未变化，用 --force 重新评分）"
            f"(nothing new to grade; {unchanged} unchanged" + (f", {SKIPPED} {len(skipped)}" if skipped else "") + ")"
        )
        return 0
    workers = min(settings.worker_count(), len(todo))
    threads = max(1, (os.cpu_count() or 1) // workers)
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="grpo-grade-"))
    slots: list[Slot] = []
    mounted: list[Path] = []
    sandbox = None
    statuses: dict[str, int] = {}
    # the notebooks that will be executed (the rest are invalid files): a run without any starts no nbgrader, and a
    # slot's zygote pays off from the slot's second executed notebook on (none where no slot executes two)
    runnable = runnable_notebooks(settings, course_info, todo, enough=workers + 1)
    try:
        if runnable:
            nbgrader_forkserver.prewarm()  # nbgrader's forkserver imports while the sandbox is probed
        sandbox = _open_sandbox(settings, base, workers)
        if sandbox is None:
            return 2
        sandbox.caps = open_caps(settings.job_caps, settings.job_memory_bytes(), settings.job_max_processes)
        print(f"[autograde] {sandbox.caps.describe()}")
        template = make_template(settings, base / "template.db")
        sockets = base / "sockets"
        if sandbox.mode == "bwrap" and os.geteuid() == 0 and mount_socket_tmpfs(sockets):
            mounted.append(sockets)
        zygotes = runnable > workers
        # what the zygotes import and build: read from the lessons' oracles (which import torch), only where they start
        warm = zygote_warm(work for _, work in todo) if zygotes else NOTHING_WARM
        total_notebooks = sum(len(course_info[a]["notebooks"]) for _, work in todo for a, _, _ in work)
        slots = [
            Slot(
                base,
                f"slot{k}",
                settings,
                sandbox,
                uid=sandbox.uids[k] if sandbox.uids else None,
                threads=threads,
                ipc=(sockets / f"slot{k}") if mounted else None,
                zygotes=zygotes,
                warm=warm,
            )
            for k in range(workers)
        ]
        print(
            f"[autograde] {len(todo)} learner(s), {total_notebooks} notebook(s), {workers} worker(s), "
            f"cell timeout {settings.cell_timeout} s, notebook limit {settings.notebook_timeout} s, "
            f"grace {settings.grace_after_results} s after the last result, "
            f"memory limit {settings.memory_limit_bytes() / 2**30:.1f} GiB per kernel"
        )
        if shard is None:
            sink = lambda results: merge(settings, results)  # noqa: E731
        else:
            shard_dir = shard_folder(settings, shard)
            print(f"[autograde] shard {shard[0]}/{shard[1]}: results go to {shard_dir} (then `make merge-shards`)")
            sink = lambda results: save_shard_results(shard_dir, results)  # noqa: E731
        _grade_in_slots(settings, course_info, todo, slots, template, base / "staging", statuses, sink, seed)
        if shard is not None:
            hand_over(settings, shard_dir)
    finally:
        for slot in slots:
            slot.kill_kernels()
            slot.stop_zygote()
        if sandbox is not None and sandbox.caps is not None:
            sandbox.caps.close()
        for handle in sandbox.leases if sandbox else []:
            handle.close()
        for folder in mounted:
            unmount(folder)
        if keep:
            print(f"[autograde] kept the grading folder (slots, nbgrader logs): {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    seconds = time.monotonic() - started
    if skipped:
        statuses[SKIPPED] = len(skipped)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    print(f"[autograde] done in {seconds:.1f} s: {summary}; {unchanged} unchanged submission(s) kept")
    return 1 if statuses.get("error") else 0
