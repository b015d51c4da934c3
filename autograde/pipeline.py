"""The instructor pipeline around nbgrader: parallel sandboxed autograding, feedback, grade export.

    python -m autograde.pipeline autograde [--sample] [--workers N] [--force] [--learner ID ...] [--shard k/N]
    python -m autograde.pipeline merge-shards
    python -m autograde.pipeline feedback
    python -m autograde.pipeline grades
    python -m autograde.pipeline sample --rebuild | --check
    python -m autograde.pipeline probe [--json] [--imports find]

`make autograde|feedback|grades` call the first three. Every command takes ``--course DIR`` (the nbgrader
course root; default: this folder). Settings: ``GradingPipeline`` in ``nbgrader_config.py``. Details and
the walk-through for instructors: ``autograde/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import queue
import shutil
import sys
import tempfile
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from autograde.grpo_grader import nbgrader_forkserver, view
from autograde.grpo_grader.course import GradingPipeline, load_settings, prepare_kernel_files, settings_tables
from autograde.grpo_grader.digests import grading_seed
from autograde.grpo_grader.gradebook import export_rows, load_course_info, make_template, merge, read_report
from autograde.grpo_grader.learner_grading import (
    NO_AUTO_POINTS,
    SAFE_ID,
    AssignmentResult,
    NotebookResult,
    fingerprint,
    grade_learner,
    runnable_notebooks,
)
from autograde.grpo_grader.probe import ProbeFailure
from autograde.grpo_grader.probe import Problem as ProbeProblem
from autograde.grpo_grader.sandbox_choice import SANDBOX_MODES, choose_sandbox
from autograde.grpo_grader.slots import Slot, mount_socket_tmpfs, unmount
from autograde.grpo_grader.zygotes import NOTHING_WARM, ZygoteWarm
from autograde.sample_class import build as sample_class

GRADE_FIELDS = [
    "learner",
    "assignment",
    "score",
    "max_score",
    "status",
    "reason",
    "flags",
    "needs_manual_grade",
    "manual_pending",
    "automatic_max_score",
    "timestamp",
]
TEST_FIELDS = ["learner", "assignment", "notebook", "test", "score", "max_score", "outcome", "message"]


def _say(message: str) -> None:
    from tqdm import tqdm

    tqdm.write(message, file=sys.stdout)


# ----------------------------------------------------------------------------- autograde
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
    """[(learner, [(assignment, folder, fingerprint)])] to grade, and the folders that were not graded."""
    submitted = settings.dir("submitted")
    todo, ignored, unchanged = [], [], 0
    if not submitted.is_dir():
        return todo, ignored, unchanged
    for learner_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        learner = learner_dir.name
        if (only and learner not in only) or not in_shard(learner, shard):
            continue
        if learner_dir.is_symlink():
            ignored.append(f"{learner_dir}: 是符号链接，不评分（symbolic link）")
            continue
        if not SAFE_ID.match(learner):
            ignored.append(f"{learner_dir}: 学员目录名只能含字母、数字和 _.@+-（learner id not allowed）")
            continue
        work = []
        for folder in sorted(p for p in learner_dir.iterdir() if p.is_dir() and not p.is_symlink()):
            if folder.name not in course_info:
                ignored.append(f"{folder}: 没有这个作业（unknown assignment; run `make release`?）")
                continue
            fp = fingerprint(folder, settings, course_info, folder.name, seed)
            report = read_report(settings, learner, folder.name)
            if not force and report and report.get("fingerprint") == fp and report.get("status") != "error":
                unchanged += 1
                continue
            work.append((folder.name, folder, fp))
        if work:
            todo.append((learner, work))
    return todo, ignored, unchanged


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
    """What the zygotes prepare for the assignments in ``works`` (each a learner's work list): the union of their
    oracles' ``zygote_imports`` and ``zygote_warm`` calls, in a stable order, once each."""
    from autograde.grpo_grader.oracle import load_oracle

    loaded = (load_oracle(a) for a in sorted({a for work in works for a, _, _ in work}))
    oracles = [oracle for oracle in loaded if oracle is not None]

    def union(names_of) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for oracle in oracles for name in names_of(oracle)))

    return ZygoteWarm(
        kernel=union(lambda oracle: oracle.zygote_imports("kernel")),
        oracle=union(lambda oracle: oracle.zygote_imports("oracle")),
        calls=union(lambda oracle: oracle.zygote_warm),
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
                sink(results)
                for result in results:
                    statuses[result.status] = statuses.get(result.status, 0) + 1
                    mark = "" if result.status == "graded" else f" [{result.status}]"
                    _say(f"  {learner:<30} {result.assignment:<24} {result.score:g}/{result.max_score:g}{mark}")
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
    seed = grading_seed(create=True, announce=print, course=settings.course)  # run state: passed on, never stored
    todo, ignored, unchanged = collect_work(settings, course_info, force, only, shard, seed)
    for line in ignored:
        print(f"[autograde] 跳过 {line}")
    if not todo:
        print(
            f"[autograde] 没有需要评分的新提交（{unchanged} 份未变化，用 --force 重新评分）"
            f"(nothing new to grade; {unchanged} unchanged)"
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
    # the notebooks that will be executed (the rest are invalid files): a run without any starts no nbgrader, and the
    # slots' zygotes pay off from a slot's second executed notebook on (none where no slot executes two)
    runnable = runnable_notebooks(settings, course_info, todo, enough=workers + 1)
    try:
        if runnable:
            nbgrader_forkserver.prewarm()  # nbgrader's forkserver imports while the sandbox is probed
        sandbox = _open_sandbox(settings, base, workers)
        if sandbox is None:
            return 2
        template = make_template(settings, base / "template.db")
        sockets = base / "sockets"
        if sandbox.mode == "bwrap" and os.geteuid() == 0 and mount_socket_tmpfs(sockets):
            mounted.append(sockets)
        zygotes = runnable > workers
        # what the zygotes import: read from the lessons' oracles (which import torch), so only where zygotes start
        warm = zygote_warm(work for _, work in todo) if zygotes else NOTHING_WARM
        total_notebooks = sum(len(course_info[a]["notebooks"]) for _, work in todo for a, _, _ in work)
        slots = [
            Slot(
                base,
                f"slot{k}",
                settings,
                sandbox,
                uid=sandbox.uids[2 * k] if sandbox.uids else None,
                oracle_uid=sandbox.uids[2 * k + 1] if sandbox.uids else None,
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
            f"memory limit {settings.memory_limit_bytes() / 2**30:.1f} GiB per kernel"
        )
        if shard is None:
            sink = lambda results: merge(settings, results)  # noqa: E731
        else:
            shard_dir = shard_folder(settings, shard)
            print(f"[autograde] shard {shard[0]}/{shard[1]}: results go to {shard_dir} (then `make merge-shards`)")
            sink = lambda results: save_shard_results(shard_dir, results)  # noqa: E731
        _grade_in_slots(settings, course_info, todo, slots, template, base / "staging", statuses, sink, seed)
    finally:
        for slot in slots:
            slot.kill_kernels()
            slot.stop_zygote()
        for handle in sandbox.leases if sandbox else []:
            handle.close()
        for folder in mounted:
            unmount(folder)
        if keep:
            print(f"[autograde] kept the grading folder (slots, nbgrader logs): {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    seconds = time.monotonic() - started
    summary = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
    print(f"[autograde] done in {seconds:.1f} s: {summary}; {unchanged} unchanged submission(s) kept")
    return 1 if statuses.get("error") else 0


# ----------------------------------------------------------------------------- shards
def parse_shard(text: str | None) -> tuple[int, int] | None:
    """ "k/N" (1 <= k <= N) -> (k, N); None or "" -> None."""
    if not text:
        return None
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"SHARD 应写成 k/N，例如 2/8（got {text!r}）") from None
    if not 1 <= k <= n:
        raise SystemExit(f"SHARD 应满足 1 <= k <= N（got {text!r}）")
    return k, n


def shard_folder(settings: GradingPipeline, shard: tuple[int, int]) -> Path:
    return settings.dir("shards") / f"{shard[0]}-of-{shard[1]}"


def save_shard_results(folder: Path, results: list[AssignmentResult]) -> None:
    """A shard's results as plain files: the staged folders and one JSON line per assignment result."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for result in results:
        if result.staged:
            target = folder / "staged" / result.learner / result.assignment
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(result.staged, target)
            result.staged = str(target.relative_to(folder))
        data = asdict(result)
        lines.append(json.dumps(data, ensure_ascii=False))
    with open(folder / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


def merge_shards(settings: GradingPipeline) -> int:
    """Merge every shard folder under ``shards/`` into the course gradebook (one writer), then remove it."""
    root = settings.dir("shards")
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not folders:
        print(f"[merge-shards] {root} 下没有分片结果（no shard results; run `make autograde SHARD=k/N` first）")
        return 0
    merged = 0
    for folder in folders:
        by_learner: dict[str, list[AssignmentResult]] = {}
        path = folder / "results.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            data = json.loads(line)
            notebooks = [NotebookResult(**n) for n in data.pop("notebooks")]
            result = AssignmentResult(**data, notebooks=notebooks)
            if result.staged:
                result.staged = str(folder / result.staged)
            by_learner.setdefault(result.learner, []).append(result)
        for learner in sorted(by_learner):
            merge(settings, by_learner[learner])
            merged += len(by_learner[learner])
        shutil.rmtree(folder)
        print(f"[merge-shards] merged {folder.name}")
    print(f"[merge-shards] {merged} assignment result(s) from {len(folders)} shard(s) -> {settings.db_path}")
    return 0


# ----------------------------------------------------------------------------- feedback
def feedback(settings: GradingPipeline) -> int:
    """nbgrader's generate_feedback for every assignment (HTML per learner under feedback/), through nbgrader's
    API in this process: one nbgrader start for the whole course instead of one process per assignment."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    with Gradebook(settings.db_url, settings.course_id) as gb:
        assignments = sorted(a.name for a in gb.assignments)
    config = PyFileConfigLoader(settings.config_file.name, path=str(settings.course)).load_config()
    config.CourseDirectory.root = str(settings.course)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    api.log.setLevel("WARN")
    status = 0
    for assignment in assignments:
        if not any((settings.dir("autograded")).glob(f"*/{assignment}/*.ipynb")):
            continue
        done = api.generate_feedback(assignment, force=True)
        if not done.get("success"):
            print(
                f"[feedback] {assignment}: nbgrader generate_feedback failed\n"
                + (done.get("error") or done.get("log") or "")[-3000:]
            )
            status = 1
    count = len(list(settings.dir("feedback").glob("*/*/*.html")))
    print(f"[feedback] {count} HTML file(s) under {settings.dir('feedback')}")
    return status


# ----------------------------------------------------------------------------- grades
def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fit(text: str, width: int) -> str:
    out, used = "", 0
    for ch in text:
        w = _width(ch)
        if used + w > width:
            return out[:-1] + "…" if out else ""
        out, used = out + ch, used + w
    return out + " " * (width - used)


def _write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    tmp = path.with_suffix(".csv.tmp")
    tmp.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(tmp, path)


def score_text(row: dict) -> str:
    """The score column of `make grades`: "14/22"; "无自动评分" for a lesson without any points."""
    if not row["max_score"]:
        return NO_AUTO_POINTS
    return f"{row['score']:g}/{row['max_score']:g}"


def grades(settings: GradingPipeline) -> int:
    rows, test_rows = export_rows(settings)
    _write_csv(settings.course / "grades.csv", GRADE_FIELDS, rows)
    _write_csv(settings.course / "grades_by_test.csv", TEST_FIELDS, test_rows)
    columns = shutil.get_terminal_size((160, 40)).columns
    reason_width = max(30, columns - 30 - 24 - 12 - 10 - 14 - 6)
    header = (
        _fit("learner", 30)
        + " "
        + _fit("assignment", 24)
        + " "
        + _fit("score", 12)
        + " "
        + _fit("status", 10)
        + " "
        + _fit("reason", reason_width)
        + " flags"
    )
    print(header)
    print("-" * min(columns, _width(header) + 10))
    for row in rows:
        score = score_text(row)
        print(
            _fit(row["learner"], 30),
            _fit(row["assignment"], 24),
            _fit(score, 12),
            _fit(row["status"], 10),
            _fit(row["reason"] or "-", reason_width),
            row["flags"],
        )
    print(
        f"\n[grades] {len(rows)} row(s) -> {settings.course / 'grades.csv'}; "
        f"{len(test_rows)} test row(s) -> {settings.course / 'grades_by_test.csv'}"
    )
    return 0


# ----------------------------------------------------------------------------- probe
def probe_result(settings: GradingPipeline, import_mode: str = "import") -> dict:
    """The instructor's pre-flight as data: the sandbox probed as grading uses it (kernel and oracle driver, each
    importing torch, ipykernel, nbformat and the graded lessons' imports inside it: probe.py), what either could read
    of the secrets, and ``ok``; or the problems that stop grading here, each with its cause and its fix."""
    base = Path(tempfile.mkdtemp(prefix="grpo-probe-"))
    try:
        sandbox = choose_sandbox(settings, base, probe_driver=True, import_mode=import_mode)
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
    kernel = {k: v for k, v in sandbox.probe.items() if k != "oracle"}
    oracle = sandbox.probe.get("oracle") or {}
    grader = _own_ipc_namespace()
    # (each sandbox unshares one; probed one after the other, two may show the same recycled number)
    own_ipc = all(ns and ns != grader for ns in (oracle.get("ipc_namespace"), kernel.get("ipc_namespace")))
    readable = sorted({p for report in (kernel, oracle) for p, ok in report.get("readable", {}).items() if ok})
    seed = bool(kernel.get("seed_in_environ") or oracle.get("seed_in_environ"))
    return {
        "ok": not readable and not seed,
        "sandbox": sandbox.mode,
        "describe": sandbox.describe(),
        "not_available": sandbox.problems,
        "problems": [],
        "kernel": kernel,
        "oracle": oracle,
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
    kernel, oracle = result["kernel"], result["oracle"]
    print(f"sandbox: {result['describe']}")
    for problem in result["not_available"]:
        print(f"  not available: {problem}")
    for who, report in (("", kernel), ("oracle driver: ", oracle)):
        for path, readable in report.get("readable", {}).items():
            print(f"  {who}{'READABLE' if readable else 'hidden  '}  {path}")
    for path in result["paths"].get("bind", []):
        print(f"  bound read-only (outside the virtual environment, on sys.path): {path}")
    for who, report in (("kernel", kernel), ("oracle driver", oracle)):
        loaded = [name for name, error in report.get("imports", {}).items() if error == "ok"]
        print(
            f"  {who}: {len(loaded)}/{len(report.get('imports', {}))} imports load inside the sandbox "
            "(torch, ipykernel, nbformat" + (" and the graded lessons' import lines)" if who == "kernel" else ")")
        )
    forked = " (forked from a zygote)" if kernel.get("zygote") else ""
    print(
        f"  kernel{forked} uid {kernel.get('uid')}, processes visible {kernel.get('visible_pids')}, "
        f"network {'available' if kernel.get('network') else 'none'}, "
        f"rest of the file system {'read-only' if kernel.get('readonly_root') else 'as usual'}, "
        f"address-space limit {kernel.get('rlimit_as', 0) / 2**30:.1f} GiB"
    )
    if oracle:
        print(
            f"  oracle driver (beside the kernel{', forked from a zygote' if oracle.get('zygote') else ''}): "
            f"uid {oracle.get('uid')}, processes visible {oracle.get('visible_pids')}, "
            f"network {'available' if oracle.get('network') else 'none'}, "
            f"IPC namespace {'its own' if result['ipc_own'] else 'SHARED'}"
        )
    if result["seed_visible"]:
        print("  GRADING SEED VISIBLE in a sandboxed process's environment")
    print("OK: grading can start here" if result["ok"] else "NOT OK: a sandboxed process can read secrets (above)")
    return 0 if result["ok"] else 1


# ----------------------------------------------------------------------------- CLI
def _own_ipc_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/ipc")
    except OSError:
        return ""


README = Path(__file__).resolve().parent / "README.md"


def _with_generated(text: str, name: str, generate) -> str:
    """``text`` with the block between the markers ``<!-- name:<language> (generated) -->`` and
    ``<!-- /name:<language> -->`` of each language half rewritten as ``generate(language)``."""
    for language in ("zh", "en"):
        begin, end = f"<!-- {name}:{language} (generated) -->", f"<!-- /{name}:{language} -->"
        if begin not in text or end not in text:
            raise ValueError(f"{README}: the markers {begin} ... {end} are missing")
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = f"{head}{begin}\n{generate(language)}\n{end}{tail}"
    return text


def readme_with_settings_tables(text: str, settings: GradingPipeline) -> str:
    """``text`` (autograde/README.md) with its generated settings blocks rewritten from the settings' definitions."""
    return _with_generated(text, "settings-table", lambda language: settings_tables(language, settings))


def readme_with_view(text: str) -> str:
    """``text`` (autograde/README.md) with its generated sections on the sandbox's view rewritten from view.py."""
    return _with_generated(text, "sandbox-view", view.describe)


def settings_command(settings: GradingPipeline, write: bool, check: bool) -> int:
    """Print every setting with the value in force; ``--write``/``--check`` the README's generated tables."""
    if write or check:
        current = README.read_text(encoding="utf-8")
        wanted = readme_with_view(readme_with_settings_tables(current, settings))
        if check:
            print(
                "settings tables and sandbox view up to date"
                if wanted == current
                else f"STALE {README}: run `python -m autograde.pipeline settings --write` (or `make release`)"
            )
            return 0 if wanted == current else 1
        if wanted != current:
            README.write_text(wanted, encoding="utf-8")
            print(f"wrote {README}")
        return 0
    for name in GradingPipeline.class_trait_names(config=True):
        print(f"c.GradingPipeline.{name} = {getattr(settings, name)!r}")
    print(f"c.Execute.timeout = {settings.cell_timeout!r}  # cell timeout (nbgrader's section)")
    print(f"c.CourseDirectory.course_id = {settings.course_id!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "command", choices=["autograde", "merge-shards", "feedback", "grades", "sample", "probe", "prepare", "settings"]
    )
    parser.add_argument("--shard", default=None, help="autograde: grade only shard k of N learners (k/N), into shards/")
    parser.add_argument("--course", type=Path, default=None, help="nbgrader course root (default: autograde/)")
    parser.add_argument("--sample", action="store_true", help="autograde: add the bundled sample class first")
    parser.add_argument("--force", action="store_true", help="autograde: regrade unchanged submissions too")
    parser.add_argument("--learner", action="append", default=None, help="autograde: only these learners")
    parser.add_argument("--workers", type=int, default=None, help="parallel slots (default: one per core)")
    parser.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell")
    parser.add_argument("--notebook-timeout", type=int, default=None, help="hard limit per notebook (s)")
    parser.add_argument("--sandbox", default=None, choices=["auto", *SANDBOX_MODES])
    parser.add_argument("--keep", action="store_true", help="autograde: keep the temporary grading folder (logs)")
    parser.add_argument("--rebuild", action="store_true", help="sample: regenerate the sample submissions")
    parser.add_argument(
        "--check",
        action="store_true",
        help="sample, settings: fail when the sample submissions or the README's generated sections are stale",
    )
    parser.add_argument(
        "--write", action="store_true", help="settings: regenerate the README's settings tables and sandbox view"
    )
    parser.add_argument("--json", action="store_true", help="probe: print the structured result (one JSON object)")
    parser.add_argument(
        "--imports",
        default="import",
        choices=["import", "find"],
        help="probe: import what grading imports inside the sandbox (default), or only find the "
        "packages on its sys.path (a second, as a grading run's own pre-flight does)",
    )
    args = parser.parse_args(argv)
    overrides = {
        "workers": args.workers,
        "cell_timeout": args.cell_timeout,
        "notebook_timeout": args.notebook_timeout,
        "sandbox": args.sandbox,
    }
    if args.command == "autograde" and args.sample:
        for key, value in sample_class.machine_timeouts().items():
            if overrides.get(key) is None:
                overrides[key] = value
    try:
        settings = load_settings(args.course, **overrides)
    except ValueError as error:  # a setting of nbgrader_config.py that is not one (check_pipeline_options)
        print(f"[{args.command}] {error}", file=sys.stderr)
        return 2
    if args.command == "autograde":
        if args.sample:
            learners = sample_class.install(settings.dir("submitted"))
            print(f"[autograde] sample class: {len(learners)} learner(s) copied into {settings.dir('submitted')}")
        return autograde(settings, force=args.force, only=args.learner, keep=args.keep, shard=parse_shard(args.shard))
    if args.command == "merge-shards":
        return merge_shards(settings)
    if args.command == "feedback":
        return feedback(settings)
    if args.command == "grades":
        return grades(settings)
    if args.command == "sample":
        if args.rebuild:
            for path in sample_class.rebuild():
                print(f"wrote {path}")
            return 0
        stale = sample_class.check()
        for line in stale:
            print(f"STALE {line}")
        print("sample class up to date" if not stale else "run `python -m autograde.pipeline sample --rebuild`")
        return 1 if stale else 0
    if args.command == "settings":
        return settings_command(settings, write=args.write, check=args.check)
    if args.command == "prepare":  # `make setup`: the checkpoints the grading kernels load, built once
        try:
            prepare_kernel_files(settings)
        except ImportError as error:
            print(f"[prepare] 跳过：当前环境没有 {error.name}（skipped: this profile lacks {error.name}）")
            return 0
        print("[prepare] 评分内核所需的检查点已就绪（the grading kernels' checkpoints are ready）")
        return 0
    if args.command == "probe":
        return probe(settings, as_json=args.json, import_mode=args.imports)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
