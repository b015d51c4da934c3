"""Grade one learner in a slot: pick and check the submitted files, run nbgrader per notebook, read back
grades and test outcomes, and stage the autograded notebooks (with a grading note) for the merge."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat

from .course import GRADER_VERSION, ROOT, GradingPipeline
from .digests import oracle_digest, seed_digest
from .slots import Slot
from .submission import answer_fingerprints, containment, fingerprints, read_notebook, rebuild_metadata, worked_answers

if TYPE_CHECKING:  # the oracles (and torch) are imported when a notebook is graded, not by the other commands
    from .oracle_job import OracleOutcome

STUB_MESSAGE = "请先完成这个 TODO"  # the text of nbgrader's ClearSolutions stub (autograde/nbgrader_config.py)
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}$")
NOTE_TAG = "grading-note"

# Patterns worth a human look in answer cells; they never change a score.
FLAG_PATTERNS = [
    (
        "ipython-hooks",
        r"input_transformers|ast_transformers|events\.register|set_custom_exc|register_magic"
        r"|\.run_cell\b|showtraceback",
    ),
    ("grader-internals", r"tools\.grading|_ORIGINALS|\btampered\b|sys\.modules"),
    (
        "monkeypatch",
        r"\b(?:torch|torch\.testing|torch\.Tensor|builtins|math|numpy|np)\.[A-Za-z_]+\s*=(?!=)"
        r"|__builtins__|setattr\(\s*(?:torch|builtins|math)",
    ),
    ("exit", r"os\._exit|sys\.exit|\bquit\(|\bexit\(|SystemExit|os\.kill\b"),
    ("file-access", r"\bopen\(|os\.walk|\bglob\b|listdir|scandir|read_text|read_bytes|gradebook|solutions/"),
    ("processes", r"subprocess|os\.system|os\.popen|os\.fork|ctypes|multiprocessing|\bsocket\b"),
]


@dataclass
class NotebookResult:
    notebook: str
    status: str  # graded | timeout | invalid | missing | error
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    grades: dict = field(default_factory=dict)  # grade_id -> {"auto_score", "needs_manual_grade"}
    comments: dict = field(default_factory=dict)  # grade_id -> auto_comment
    late_penalty: float | None = None
    tests: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    answers: dict = field(default_factory=dict)  # answer grade_id -> its winnowed fingerprint (copies)
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)  # seconds per step: nbgrader, oracle
    score: float = 0.0
    max_score: float = 0.0


@dataclass
class AssignmentResult:
    learner: str
    assignment: str
    fingerprint: str
    timestamp: str | None = None
    files: list[str] = field(default_factory=list)
    notebooks: list[NotebookResult] = field(default_factory=list)
    staged: str | None = None  # folder holding the autograded notebooks + grading_report.json

    @property
    def status(self) -> str:
        order = ["error", "invalid", "timeout", "missing", "graded"]
        return min((n.status for n in self.notebooks), key=order.index, default="missing")

    @property
    def score(self) -> float:
        return sum(n.score for n in self.notebooks)

    @property
    def max_score(self) -> float:
        return sum(n.max_score for n in self.notebooks)

    @property
    def reason(self) -> str:
        parts = []
        for n in self.notebooks:
            text = "；".join([p for p in [n.reason, *n.notes] if p])
            if text:
                parts.append(text if len(self.notebooks) == 1 else f"{n.notebook}: {text}")
        return " | ".join(parts)

    def report(self) -> dict:
        data = asdict(self)
        data.update(status=self.status, score=self.score, max_score=self.max_score, reason=self.reason)
        return data


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
        notes.append(f"文件名应为 {notebooks[0]}.ipynb，收到 {others[0].name}，已按前者评分（renamed）")
    problems = {}
    listing = ", ".join(p.name for p in sorted(folder.iterdir())) if folder.is_dir() else ""
    for name in notebooks:
        if name not in chosen:
            problems[name] = f"没有找到 {name}.ipynb（提交的文件：{listing or '无'}）（missing notebook）"
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


def compare_with_release(
    submitted: nbformat.NotebookNode, release: nbformat.NotebookNode
) -> tuple[list[str], list[str], str]:
    """(locked cells the learner edited, locked cells the learner deleted, the code the learner wrote).

    nbgrader restores both kinds of locked cells from the gradebook; the learner's own code is every line of a
    code cell that no code cell of the released notebook has (answers, added cells, lines added to a setup
    cell): ``import numpy as np`` added to the imports cell is the learner's, the cell's released lines are not.
    """

    def locked(cell):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        return meta.get("grade_id") and meta.get("locked") and not meta.get("solution")

    released = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells if locked(c)}
    mine = {}
    for cell in submitted.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            mine.setdefault(gid, cell)
    edited = [gid for gid, cell in released.items() if gid in mine and mine[gid].source != cell.source]
    deleted = [gid for gid in released if gid not in mine]
    release_lines = {line.strip() for c in release.cells if c.cell_type == "code" for line in c.source.splitlines()}
    written = "\n".join(
        line
        for c in submitted.cells
        if c.cell_type == "code"
        for line in c.source.splitlines()
        if line.strip() not in release_lines
    )
    return edited, deleted, written


COPY_THRESHOLD = 0.8  # share of an answer's fingerprint found in the reference (or another learner's answer)


@functools.cache
def reference_fingerprints(assignment: str, course: Path) -> dict[str, frozenset]:
    """{answer grade_id: fingerprint of the course's worked answer}, read from nbgrader's source version of the lesson
    (``<course>/source/<assignment>/<assignment>.ipynb``, which `make release` builds from ``solutions/``), and under
    ``"*"`` the fingerprint of the lesson's exported module (``tools/lessons/<assignment>.py``); empty where neither
    exists."""
    out: dict[str, frozenset] = {}
    source = course / "source" / assignment / f"{assignment}.ipynb"
    if source.is_file() and not source.is_symlink():
        nb, _ = read_notebook(source.read_text(encoding="utf-8"))
        if nb is not None:
            out = {gid: frozenset(fingerprints(text)) for gid, text in worked_answers(nb).items()}
    module = ROOT / "tools" / "lessons" / f"{assignment}.py"
    if module.is_file():
        out["*"] = frozenset(fingerprints(module.read_text(encoding="utf-8")))
    return out


def copies_reference(assignment: str, answers: dict[str, list[int]], course: Path) -> list[str]:
    """``copies-reference:<share>%`` when an answer cell is (nearly) the course's reference answer: most of its
    fingerprint is in the worked answer or the lesson module (a flag for a human; never a score change)."""
    reference = reference_fingerprints(assignment, course)
    shares = [
        containment(prints, reference.get(gid, frozenset()) | reference.get("*", frozenset()))
        for gid, prints in answers.items()
    ]
    best = max(shares, default=0.0)
    return [f"copies-reference:{round(100 * best)}%"] if best >= COPY_THRESHOLD else []


def scan_flags(code: str) -> list[str]:
    """Review flags for code the learner wrote; they never change a score."""
    return [name for name, pattern in FLAG_PATTERNS if re.search(pattern, code)]


# ----------------------------------------------------------------------------- outcomes
def _first_line(text: str, limit: int = 160) -> str:
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[:limit] + "…"


def cell_message(cell, cell_timeout: int) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            ename = out.get("ename", "Error")
            if ename == "CellTimeoutError":
                return f"CellTimeoutError: 单元运行超过 {cell_timeout} 秒被中断（cell timeout）"
            if ename == "KeyboardInterrupt":
                return f"KeyboardInterrupt: 单元运行超过 {cell_timeout} 秒被中断（cell timeout）"
            return f"{ename}: {_first_line(out.get('evalue', ''))}".rstrip(": ")
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return f"向 stderr 输出了内容（nbgrader 判为未通过）：{_first_line(out.get('text', ''))}"
    return ""


def test_outcomes(nb: nbformat.NotebookNode | None, cells: dict, grades: dict, cell_timeout: int) -> list[dict]:
    """One row per graded cell of the notebook, in notebook order."""
    by_id = {}
    if nb is not None:
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid:
                by_id[gid] = cell
    rows = []
    for gid, info in cells.items():
        grade = grades.get(gid, {})
        score = grade.get("auto_score")
        cell = by_id.get(gid)
        if info["kind"] == "manual":
            outcome, message = "manual", "需要人工评分（manual grading）"
        elif score is None:
            outcome, message = "not run", "未运行（not run）"
        elif score >= info["max_score"]:
            outcome, message = "passed", ""
        else:
            outcome = "failed" if score == 0 else "partial"
            message = cell_message(cell, cell_timeout) if cell is not None else "未运行（not run）"
        rows.append(
            {
                "grade_id": gid,
                "max_score": info["max_score"],
                "score": score or 0.0,
                "outcome": outcome,
                "message": message,
            }
        )
    return rows


def summarise(tests: list[dict]) -> str:
    failed = [t for t in tests if t["outcome"] in ("failed", "partial", "not run")]
    if not failed:
        return ""
    messages = {t["message"] for t in failed}
    nothing_passed = all(t["outcome"] != "passed" for t in tests if t["outcome"] != "manual")
    if nothing_passed and len(messages) == 1:
        message = messages.pop()
        if message == f"NotImplementedError: {STUB_MESSAGE}":
            return "所有 TODO 都未完成：NotImplementedError（no TODO done）"
        return f"所有测试都未通过：{message}（all tests failed）"
    parts = [f"{t['grade_id']}: {t['message'] or t['outcome']}" for t in failed[:6]]
    if len(failed) > 6:
        parts.append(f"…另有 {len(failed) - 6} 项未通过")
    return "未通过 " + "；".join(parts)


# ----------------------------------------------------------------------------- the grading note
STATUS_TEXT = {
    "graded": "已评分（graded）",
    "timeout": "超时终止（timeout）",
    "invalid": "无法评分（invalid）",
    "missing": "未提交（missing）",
    "error": "评分出错（error）",
}


NO_AUTO_POINTS = "无自动评分"


def manual_pending_text(points: float) -> str:
    """How a grade row and the note say that points wait for the instructor (never a bare '-' or a lost point)."""
    return f"待人工评分 {points:g} 分"


def manual_points(result: NotebookResult) -> float:
    """The notebook's points that only the instructor can give (manually graded answers)."""
    return sum(t["max_score"] for t in result.tests if t["outcome"] == "manual")


def note_markdown(result: NotebookResult) -> str:
    manual = manual_points(result)
    automatic = result.max_score - manual
    lines = ["### 自动评分说明（autograder note）", "", f"- 状态：{STATUS_TEXT.get(result.status, result.status)}"]
    if automatic > 0:
        lines.append(f"- 自动评分得分：{result.score:g} / {automatic:g}（教师人工调整后以上方总分为准）")
    else:
        lines.append(f"- 自动评分：{NO_AUTO_POINTS}（这一课没有自动计分的测试）")
    if manual > 0:
        lines.append(f"- {manual_pending_text(manual)}：问答题由教师评阅后计入总分（满分共 {result.max_score:g} 分）")
    if result.reason:
        lines.append(f"- 原因：{result.reason}")
    lines += [f"- 说明：{note}" for note in result.notes]
    failed = [t for t in result.tests if t["outcome"] in ("failed", "partial", "not run")]
    if failed and result.status == "graded":
        lines.append("- 未通过的测试：")
        lines += [
            f"  - `{t['grade_id']}`（{t['score']:g} / {t['max_score']:g} 分）：{t['message'] or t['outcome']}"
            for t in failed
        ]
    return "\n".join(lines)


def add_note(path: Path, result: NotebookResult) -> None:
    os.chmod(path, 0o644)
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if NOTE_TAG not in c.get("metadata", {}).get("tags", [])]
    cell = nbformat.v4.new_markdown_cell(note_markdown(result), metadata={"tags": [NOTE_TAG]})
    cell["id"] = NOTE_TAG
    nb.cells.insert(0, cell)
    nbformat.write(nb, path)


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
            release = placeholder(settings, assignment, name)  # read once: the oracle's job and the review below
            oracle_run = OracleRun(slot, settings, assignment, release, rebuilt[name], learner, seed)
            try:
                graded_outside = sorted(oracle_run.oracle.tests) if oracle_run.oracle is not None else []
                returncode, timed_out, seconds = slot.run_nbgrader(assignment, learner, name, log, graded_outside)
                if timed_out or returncode != 0:
                    oracle_run.cancel()  # this notebook cannot be graded: its oracle result would be discarded
            finally:
                oracle_run.wait()  # never leave the driver running into the next notebook's reset_work()
            nres.seconds = round(time.monotonic() - started, 1)
            nres.phases["nbgrader"] = round(seconds, 2)
            nres.answers = answer_fingerprints(rebuilt[name], release)
            edited, deleted = [], []
            try:
                edited, deleted, written = compare_with_release(rebuilt[name], release)
                nres.flags = scan_flags(written) + copies_reference(assignment, nres.answers, settings.course)
            except Exception:  # checked readable above; this review never blocks grading
                nres.flags = []
            if timed_out:
                nres.status = "timeout"
                nres.reason = (
                    f"得 0 分：整本笔记本运行超过 {settings.notebook_timeout} 秒的总时限，"
                    f"内核与评分进程已被终止（hard time limit）"
                )
            elif returncode != 0 or not out_path.exists():
                nres.status = "error"
                nres.reason = f"得 0 分：nbgrader 无法处理此提交（grader error）：{_log_tail(log)}"
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
                if any("KernelDied" == o.get("ename") for c in executed.cells for o in c.get("outputs", [])):
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
                oracle_messages = apply_oracle(oracle_run, cells, nres, stripped_tests(executed))
            except Exception as error:  # a fault of the grader's oracle: this notebook only, status error
                nres.status = "error"
                nres.reason = f"得 0 分：评分器的 oracle 出错（grader error）：{type(error).__name__}: {error}"[:500]
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


_CASES_LOCK = threading.Lock()


def oracle_cases(oracle, settings: GradingPipeline, learner: str, seed: str):
    """The cases of an assignment for one learner: drawn from a key derived from this run's ``seed``, the learner and
    the assignment (``oracle.case_generator``). One slot at a time: an oracle's first draw may load a model (lesson
    7), and two threads importing transformers at once can fail."""
    with _CASES_LOCK:
        return oracle.cases(seed, settings.oracle_flags.get(oracle.assignment, {}), learner=learner)


class OracleRun:
    """The oracle's driver for one notebook. Where the slot allows it (``Slot.concurrent_oracle``), it starts at
    once and runs beside nbgrader's execution, in a sandbox of its own (its own uid as root): both
    mostly wait on their interpreters and torch's import, so the notebook takes about as long as the slower of
    the two. Otherwise it runs when ``outcome()`` is first asked for, after nbgrader, as before. Either way it
    is the same driver on the same job (inputs drawn from the grading seed); a notebook that nbgrader could not
    grade discards its result."""

    def __init__(
        self,
        slot: Slot,
        settings: GradingPipeline,
        assignment: str,
        release: nbformat.NotebookNode,
        rebuilt: nbformat.NotebookNode,
        learner: str,
        seed: str,
    ) -> None:
        self._slot, self._settings, self._release, self._rebuilt = slot, settings, release, rebuilt
        self._result: OracleOutcome | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.oracle = self.cases = None
        self.concurrent = False
        try:
            from .oracle import load_oracle

            self.oracle = load_oracle(assignment)
            if self.oracle is not None:
                self.cases = oracle_cases(self.oracle, settings, learner, seed)
        except Exception as error:  # reported as the grader's fault by outcome(), for this notebook only
            self._error = error
            return
        self.concurrent = self.oracle is not None and slot.concurrent_oracle
        if self.concurrent:
            self._thread = threading.Thread(target=self._run, name=f"oracle-{slot.dir.name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            from .oracle_job import run_oracle

            self._result = run_oracle(
                self._slot,
                self.oracle,
                self.cases,
                self._release,
                self._rebuilt,
                self._settings.cell_timeout,
                self._settings.notebook_timeout,
                self._settings.demo_cells.get(self.oracle.assignment, ()),
            )
        except BaseException as error:  # noqa: BLE001 - handed to outcome()
            self._error = error

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def cancel(self) -> None:
        """Kill a driver that runs beside nbgrader (its result is not needed)."""
        if self._thread is not None and self._thread.is_alive():
            self._slot.stop_oracle()
        self.wait()

    def outcome(self) -> OracleOutcome | None:
        """The driver's outcome (None: this notebook has no oracle); raises what went wrong on the grader's side."""
        if self._error is None and self._result is None and self.oracle is not None:
            if self._thread is None:
                self._run()
            else:
                self.wait()
        if self._error is not None:
            raise self._error
        return self._result


def stripped_tests(executed: nbformat.NotebookNode | None) -> set[str]:
    """The test cells whose hidden tests did not run in the kernel (``StripHiddenTests``)."""
    from .preprocessors import STRIPPED_NOTE

    return {
        c.metadata["nbgrader"]["grade_id"]
        for c in (executed.cells if executed is not None else [])
        if c.cell_type == "code"
        and STRIPPED_NOTE in c.source
        and c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


def apply_oracle(run: OracleRun, cells: dict, nres: NotebookResult, stripped: set[str] = frozenset()) -> dict[str, str]:
    """Replace the in-kernel scores of the oracle's test cells by the oracle's verdicts; {grade_id: message}.
    ``stripped``: test cells that ran without their hidden tests in the kernel (their in-kernel pass says little)."""
    outcome = run.outcome()
    oracle = run.oracle
    if outcome is None:
        nres.flags = sorted({*nres.flags, "no-oracle"})
        return {}
    if not run.concurrent:  # ran after nbgrader: its time adds up
        nres.seconds = round(nres.seconds + outcome.seconds, 1)
    nres.phases["oracle"] = outcome.seconds
    if outcome.problem:
        nres.notes.append(outcome.problem)
    messages, comments = {}, {}
    in_kernel = {gid: (nres.grades.get(gid) or {}).get("auto_score") or 0.0 for gid in outcome.verdicts if gid in cells}
    for gid, verdict in outcome.verdicts.items():
        if gid not in cells:
            continue
        nres.grades[gid] = {
            "auto_score": cells[gid]["max_score"] if verdict.passed else 0.0,
            "needs_manual_grade": False,
        }
        messages[gid] = verdict.message
        answer = oracle.tests[gid]
        line = f"{gid}：{'通过' if verdict.passed else '未通过'}（{verdict.cases - verdict.failed}/{verdict.cases} 个用例）"
        comments.setdefault(answer, []).append(line + (f"：{verdict.message}" if verdict.message else ""))
    for gid, info in cells.items():
        if info["kind"] == "test" and gid not in outcome.verdicts:
            nres.flags = sorted({*nres.flags, "in-kernel-test"})
    # tests that passed in the learner's kernel but not in the oracle: worth a look (a trick, or flaky code)
    if any(in_kernel[gid] > nres.grades[gid]["auto_score"] for gid in in_kernel if gid not in stripped):
        nres.flags = sorted({*nres.flags, "kernel-disagrees"})
    nres.phases["in_kernel_score"] = sum(in_kernel.values())
    for answer, lines in comments.items():
        nres.comments[answer] = "评分器（在学员内核之外、用评分时抽取的输入）的判定：\n" + "\n".join(lines)
    return messages


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
