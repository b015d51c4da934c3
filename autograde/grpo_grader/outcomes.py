"""What grading a learner says: the results of a notebook and of an assignment, each graded cell's outcome with its
message, the reason of a score, and the grading note at the top of the autograded notebook and its feedback."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

STUB_MESSAGE = "请先完成这个 TODO"  # the text of nbgrader's ClearSolutions stub (autograde/nbgrader_config.py)
NOTE_TAG = "grading-note"
LEARNER_OUTPUT = "学员程序输出（learner output）"  # what the learner's code printed, raised or wrote
LEARNER_CONTENT = "学员提交的内容（from the submission）"  # names and text taken from the submitted file
_QUOTES = {"「": "\\u300c", "」": "\\u300d", "\\": "\\\\"}


def learner_words(text, limit: int = 200, label: str = LEARNER_OUTPUT) -> str:
    """Text the learner controls (an exception message, stderr, a traceback line, a name in the submission) as the
    grader may quote it in ``reason``, a gradebook comment or the feedback note: line breaks, tabs and every other
    non-printable character escaped (``\\n``, ``\\x1b``...), the quotation marks escaped too, at most ``limit``
    characters, inside 「」 after ``label``: it can never pose as the grader's own sentence."""
    out = []
    for ch in str(text):
        if ch in _QUOTES:
            out.append(_QUOTES[ch])
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable():
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    escaped = "".join(out)
    if len(escaped) > limit:
        escaped = escaped[:limit] + "…"
    return f"{label}：「{escaped}」"


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
    answers: dict = field(default_factory=dict)  # answer grade_id -> the learner's unit (learner_code.Unit, copies)
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


def _first_line(text: str, limit: int = 160) -> str:
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "")
    return line if len(line) <= limit else line[:limit] + "…"


def cell_message(cell, cell_timeout: int) -> str:
    """Why a test cell failed in the kernel, from its outputs: the grader's words, the learner's quoted
    (``learner_words``: an error's value, what went to stderr, an error class name that is not a plain name)."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            ename = str(out.get("ename", "Error"))
            if ename == "CellTimeoutError":
                return f"CellTimeoutError: 单元运行超过 {cell_timeout} 秒被中断（cell timeout）"
            if ename == "KeyboardInterrupt":
                return f"KeyboardInterrupt: 单元运行超过 {cell_timeout} 秒被中断（cell timeout）"
            name = ename if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,59}", ename) else learner_words(ename, 60)
            evalue = _first_line(out.get("evalue", ""))
            if evalue == STUB_MESSAGE:  # an untouched TODO: the course's own stub text
                return f"{name}: {evalue}"
            return f"{name}: {learner_words(evalue, 160)}" if evalue else name
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return (
                f"向 stderr 输出了内容（nbgrader 判为未通过）：{learner_words(_first_line(out.get('text', '')), 160)}"
            )
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


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>~$&-])")


def markdown_text(text: str) -> str:
    """``text`` (a test's message, a reason: the learner's code may have written it) as Markdown that renders as
    that very text on one line: no markup, link, formula or extra list item of its own."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


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
        lines.append(f"- 原因：{markdown_text(result.reason)}")
    lines += [f"- 说明：{markdown_text(note)}" for note in result.notes]
    failed = [t for t in result.tests if t["outcome"] in ("failed", "partial", "not run")]
    if failed and result.status == "graded":
        lines.append("- 未通过的测试：")
        lines += [
            f"  - `{t['grade_id']}`（{t['score']:g} / {t['max_score']:g} 分）：{markdown_text(t['message'] or t['outcome'])}"
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
