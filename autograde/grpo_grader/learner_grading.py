"""Grade one learner in a slot: pick and check the submitted files, run nbgrader per notebook, read back
grades and test outcomes, and stage the autograded notebooks (with a grading note) for the merge."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import nbformat

from .course import GRADER_VERSION, ROOT, GradingPipeline
from .digests import oracle_digest, seed_digest
from .oracle_run import OracleRun, apply_oracle
from .outcomes import (
    LEARNER_CONTENT,
    NO_AUTO_POINTS,
    AssignmentResult,
    NotebookResult,
    add_note,
    learner_words,
    manual_points,
    summarise,
    test_outcomes,
)
from .review import compare_with_release, review_notebook
from .slots import Slot
from .submission import other_assignment, read_notebook, rebuild_metadata


# ----------------------------------------------------------------------------- submitted files
def fingerprint(folder: Path, settings: GradingPipeline, course_info: dict, assignment: str, seed: str) -> str:
    digest = hashlib.sha256()
    digest.update(GRADER_VERSION.encode())
    if settings.config_file.exists():
        digest.update(settings.config_file.read_bytes())
    digest.update(json.dumps(course_info[assignment]["checksums"], sort_keys=True).encode())
    digest.update(f"oracle {oracle_digest(assignment)} seed {seed_digest(seed)}".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def pick_files(folder: Path, notebooks: list[str]) -> tuple[dict[str, Path], dict[str, str], list[str]]:
    """Map each notebook of the assignment to a submitted file.

    Returns (chosen files, problems per notebook that has no usable file, notes). A single notebook under
    another name is accepted (and noted) when the assignment has exactly one notebook.
    """
    # symbolic links are never followed: the grader runs with more rights than the learner
    found = (
        sorted(p for p in folder.iterdir() if p.suffix == ".ipynb" and p.is_file() and not p.is_symlink())
        if folder.is_dir()
        else []
    )
    chosen: dict[str, Path] = {}
    notes: list[str] = []
    for name in notebooks:
        path = folder / f"{name}.ipynb"
        if path in found:
            chosen[name] = path
    others = [p for p in found if p not in chosen.values()]
    if len(notebooks) == 1 and not chosen and len(others) == 1:
        chosen[notebooks[0]] = others[0]
        received = learner_words(others[0].name, 120, LEARNER_CONTENT)
        notes.append(f"文件名应为 {notebooks[0]}.ipynb，收到 {received}，已按前者评分（renamed）")
    problems = {}
    listing = ", ".join(p.name for p in sorted(folder.iterdir())) if folder.is_dir() else ""
    listing = learner_words(listing, 200, LEARNER_CONTENT) if listing else "无"
    for name in notebooks:
        if name not in chosen:
            problems[name] = f"没有找到 {name}.ipynb（提交的文件：{listing}）（missing notebook）"
    return chosen, problems, notes


def check_notebook_file(path: Path, max_mb: int) -> str | None:
    """Why ``path`` cannot be graded, or None."""
    size = path.stat().st_size
    if size > max_mb * 2**20:
        return f"文件过大：{size / 2**20:.1f} MB，上限 {max_mb} MB（file too large）"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        return f"不是 UTF-8 文本，无法作为 notebook 读取：{error}（not a notebook）"
    return read_notebook(text)[1]


def runnable_notebooks(settings: GradingPipeline, course_info: dict, todo, enough: int | None = None) -> int:
    """How many notebooks of ``todo`` pass the file checks, i.e. will be executed (counting stops at ``enough``)."""
    count = 0
    for _learner, work in todo:
        for assignment, folder, _fp in work:
            chosen, _problems, _notes = pick_files(folder, list(course_info[assignment]["notebooks"]))
            for path in chosen.values():
                count += check_notebook_file(path, settings.max_submission_mb) is None
                if enough is not None and count >= enough:
                    return count
    return count


def placeholder(settings: GradingPipeline, assignment: str, notebook: str) -> nbformat.NotebookNode:
    """The released notebook, shown in feedback when a submission could not be executed."""
    for path in (
        settings.course / "release" / assignment / f"{notebook}.ipynb",
        ROOT / "notebooks" / assignment / f"{notebook}.ipynb",
    ):
        if path.exists():
            return nbformat.read(path, as_version=4)
    return nbformat.v4.new_notebook()


# ----------------------------------------------------------------------------- grading one learner
def _read_slot_grades(
    slot: Slot, settings: GradingPipeline, assignment: str, learner: str, notebook: str
) -> tuple[dict, dict, float | None, str | None]:
    from nbgrader.api import Gradebook, MissingEntry

    grades, comments, penalty, timestamp = {}, {}, None, None
    with Gradebook(f"sqlite:///{slot.nbgrader / 'gradebook.db'}", settings.course_id) as gb:
        try:
            submission = gb.find_submission_notebook(notebook, assignment, learner)
        except MissingEntry:
            return grades, comments, penalty, timestamp
        for grade in submission.grades:
            grades[grade.name] = {"auto_score": grade.auto_score, "needs_manual_grade": grade.needs_manual_grade}
        for comment in submission.comments:
            comments[comment.name] = comment.auto_comment
        penalty = submission.late_submission_penalty
        stamp = gb.find_submission(assignment, learner).timestamp
        timestamp = stamp.isoformat() if stamp else None
    return grades, comments, penalty, timestamp


def _log_tail(log: Path, lines: int = 6) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    interesting = [l for l in text if "ERROR" in l or "Error" in l or "Exception" in l]
    return " / ".join((interesting or text)[-lines:])[-600:]


def grade_assignment(
    slot: Slot,
    settings: GradingPipeline,
    course_info: dict,
    learner: str,
    assignment: str,
    submitted: Path,
    staging: Path,
    fp: str,
    seed: str,
) -> AssignmentResult:
    info = course_info[assignment]
    result = AssignmentResult(
        learner=learner,
        assignment=assignment,
        fingerprint=fp,
        files=sorted(str(p.relative_to(submitted)) for p in submitted.rglob("*") if p.is_file()),
    )
    stage = staging / learner / assignment
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    result.staged = str(stage)
    notebooks = list(info["notebooks"])
    chosen, problems, notes = pick_files(submitted, notebooks)
    target = slot.nbgrader / "submitted" / learner / assignment
    target.mkdir(parents=True, exist_ok=True)
    timestamp_file = submitted / "timestamp.txt"
    if timestamp_file.is_file():
        try:
            from nbgrader.utils import parse_utc

            result.timestamp = parse_utc(timestamp_file.read_text().strip()).isoformat()
            shutil.copy2(timestamp_file, target / "timestamp.txt")
        except Exception:  # unreadable timestamp: graded without one
            notes.append("timestamp.txt 无法解析，已忽略（bad timestamp）")
    usable, rebuilt, rebuild_notes = {}, {}, {}
    for name, path in chosen.items():
        problem = check_notebook_file(path, settings.max_submission_mb)
        if problem:
            problems[name] = problem
            continue
        # submission metadata is never trusted: the release's nbgrader metadata, by grade_id and position
        nb, _ = read_notebook(path.read_text(encoding="utf-8"))
        released = {a: {gid for cells in i["checksums"].values() for gid in cells} for a, i in course_info.items()}
        wrong = other_assignment(nb, assignment, released)
        if wrong:  # another lesson's notebook under this one's name: the learner's mistake, not the grader's
            problems[name] = wrong
            continue
        rebuilt[name], rebuild_notes[name] = rebuild_metadata(nb, placeholder(settings, assignment, name))
        nbformat.write(rebuilt[name], target / f"{name}.ipynb")
        usable[name] = path

    for name in notebooks:
        cells = info["notebooks"][name]["cells"]
        max_score = sum(c["max_score"] for c in cells.values())
        nres = NotebookResult(
            notebook=name,
            status="graded",
            max_score=max_score,
            notes=[*notes, *rebuild_notes.get(name, [])] if name in usable else [],
        )
        out_path = slot.nbgrader / "autograded" / learner / assignment / f"{name}.ipynb"
        executed = None
        if name in problems:
            nres.status = "missing" if problems[name].startswith("没有找到") else "invalid"
            nres.reason = f"得 0 分：{problems[name]}"
        else:
            slot.reset_work()  # run_nbgrader stages tools/lessons/ (earlier lessons only)
            log = slot.dir / "logs" / f"{learner}-{assignment}-{name}.log"
            started = time.monotonic()
            release = placeholder(settings, assignment, name)  # read once: the review below
            if slot.caps is not None:  # the kernel job's caps count from here (job_caps.py)
                slot.caps.begin()
            oracle_run = OracleRun(settings, assignment, learner, seed)
            run = slot.run_nbgrader(
                assignment,
                learner,
                name,
                log,
                oracle_run.tests,
                oracle_run.job(),
                [case.id for case in oracle_run.cases or []],
                oracle_run.case_seconds(),
            )
            nres.seconds = round(time.monotonic() - started, 1)
            nres.phases["nbgrader"] = round(run.seconds, 2)
            edited, deleted = [], []
            try:
                edited, deleted, written = compare_with_release(rebuilt[name], release)
                nres.answers, nres.flags = review_notebook(rebuilt[name], release, written)
            except Exception:  # checked readable above; this review never blocks grading
                nres.answers, nres.flags = {}, []
            if run.timed_out:
                nres.status = "timeout"
                nres.reason = (
                    f"得 0 分：整本笔记本运行超过 {settings.notebook_timeout} 秒的总时限，"
                    f"内核与评分进程已被终止（hard time limit）"
                )
            elif run.returncode != 0 or not out_path.exists():
                nres.status = "error"
                tail = learner_words(_log_tail(log), 600, "nbgrader 日志（log）")
                nres.reason = f"得 0 分：nbgrader 无法处理此提交（grader error）：{tail}"
            else:
                grades, comments, penalty, stamp = _read_slot_grades(slot, settings, assignment, learner, name)
                nres.grades, nres.comments, nres.late_penalty = grades, comments, penalty
                result.timestamp = result.timestamp or stamp
                executed = nbformat.read(out_path, as_version=4)
                log_text = log.read_text(errors="replace")
                if "restoring it as the first code cell" in log_text:
                    nres.notes.append(
                        "锁定的第一个单元（bootstrap）被删除或移动，已按原样恢复到最前（bootstrap restored）"
                    )
                if deleted:
                    nres.notes.append(
                        f"删除了锁定单元 {', '.join(deleted)}，评分时已从源文件恢复（deleted cells restored）"
                    )
                if edited:
                    nres.notes.append(
                        f"修改了锁定单元 {', '.join(edited)}，评分时已恢复原样（edited locked cells restored）"
                    )
                if run.lingered:
                    nres.notes.append(
                        f"全部评分用例的结果送出后，笔记本又运行了 {run.lingered:.0f} 秒，内核已被终止；"
                        "之后的单元没有运行，已得的分数保留（notebook ran on after its last result: kernel stopped）"
                    )
                elif any("KernelDied" == o.get("ename") for c in executed.cells for o in c.get("outputs", [])):
                    nres.notes.append("内核在运行中退出，之后的单元未执行（kernel died）")
                if any(
                    "输出超过" in o.get("text", "")
                    for c in executed.cells
                    for o in c.get("outputs", [])
                    if o.get("output_type") == "stream"
                ):
                    nres.notes.append("某些单元输出过多，已截断（output capped）")
        oracle_messages = {}
        if nres.status == "graded":
            try:
                oracle_messages = apply_oracle(oracle_run, oracle_run.outcome(run, executed), cells, nres)
            except Exception as error:  # a fault of the grader's oracle: this notebook only, status error
                nres.status = "error"
                nres.reason = f"得 0 分：评分器的 oracle 出错（grader error）：{type(error).__name__}: {error}"[:500]
        capped = slot.caps.end() if slot.caps is not None and name not in problems else None
        if nres.status != "graded":
            nres.grades = {gid: {"auto_score": 0.0, "needs_manual_grade": False} for gid in cells}
            nres.comments = {}
        nres.tests = test_outcomes(executed, cells, nres.grades, settings.cell_timeout)
        for t in nres.tests:
            if t["grade_id"] in oracle_messages and t["outcome"] != "passed":
                t["message"] = oracle_messages[t["grade_id"]]
        for t in nres.tests:  # a not-graded notebook's tests carry its reason
            if nres.status != "graded":
                t["outcome"], t["message"] = "not run", nres.reason
        nres.score = sum((g.get("auto_score") or 0.0) for g in nres.grades.values())
        if nres.late_penalty:
            nres.score = max(0.0, nres.score - nres.late_penalty)
        if nres.status == "graded":
            nres.reason = summarise(nres.tests)
            if nres.max_score - manual_points(nres) == 0 and not nres.reason:
                nres.reason = f"{NO_AUTO_POINTS}（本课没有自动计分的测试）"
            elif nres.score == 0 and not nres.reason:
                nres.reason = "得 0 分（score 0）"
        if capped:  # a job stopped at its cap: the reason first, the points earned before it stand
            nres.reason = "；".join(part for part in (capped, nres.reason) if part)
        # stage the notebook the feedback is made from
        staged_nb = stage / f"{name}.ipynb"
        if executed is not None:
            shutil.copyfile(out_path, staged_nb)
        elif out_path.exists():  # killed at the hard limit: nbgrader's sanitised copy, without outputs
            shutil.copyfile(out_path, staged_nb)
        else:
            nbformat.write(placeholder(settings, assignment, name), staged_nb)
        add_note(staged_nb, nres)
        result.notebooks.append(nres)
    (stage / "grading_report.json").write_text(json.dumps(result.report(), ensure_ascii=False, indent=1))
    return result


def grade_learner(
    slot: Slot,
    settings: GradingPipeline,
    course_info: dict,
    learner: str,
    work: list[tuple[str, Path, str]],
    staging: Path,
    template_db: Path,
    seed: str,
) -> list[AssignmentResult]:
    """Grade ``work`` = [(assignment, submitted folder, fingerprint)] for one learner in ``slot``, with the cases
    that ``seed`` (the run's grading seed: run state, never a setting) draws."""
    slot.reset_course(template_db, sorted(course_info))
    results = []
    for assignment, folder, fp in work:
        results.append(grade_assignment(slot, settings, course_info, learner, assignment, folder, staging, fp, seed))
    return results
