"""The class report: one self-contained page an instructor reads at a glance (``make grades`` writes it beside
``grades.csv``), and the short summary ``make grades`` prints.

The page is built from the rows of ``grades.csv`` and ``grades_by_test.csv`` (:class:`ClassData`), in sections:
status counts (and the folders of ``submitted/`` that have no row), each learner's total (sorted), the score
distribution of each assignment (inline SVG drawn here), each check's pass rate with the failure messages most
learners got (what the class misunderstood), and every review flag in one list.

Sections are data, not markup: a section builder (``SECTION_BUILDERS``) returns a :class:`ReportSection` - title,
note, columns, rows, optional bar charts - and :func:`render_report` writes every piece of it escaped. Another
part of the grader adds a section by adding its builder to ``SECTION_BUILDERS`` (a function ``ClassData ->
ReportSection | None``); it never writes HTML. The page carries the course's Content-Security-Policy (no script,
no request) and no script of its own; it needs no network.
"""

from __future__ import annotations

import collections
import html
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .outcomes import STATUS_TEXT
from .sanitise import CSP_META

REPORT_FILE = "report.html"  # beside grades.csv in the course folder
MANUAL = "manual"  # a test outcome the instructor grades (outcomes.classify)
PASSED = "passed"
TOP_MESSAGES = 3  # failure messages shown per check
MESSAGE_CHARS = 160  # a grouped message is cut here
BINS = 10  # score distribution: tenths of the assignment's points


@dataclass(frozen=True)
class BarChart:
    """Bars drawn as inline SVG: ``labels[i]`` under a bar of height ``values[i]``."""

    title: str
    labels: tuple[str, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class ReportSection:
    """One section of the class report, as data: every string is escaped when the page is written.

    ``rows`` hold strings and numbers; a list or tuple in a cell is written as a list. ``key`` names the section
    (its anchor)."""

    key: str
    title: str
    note: str = ""
    columns: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    charts: tuple[BarChart, ...] = ()
    row_keys: tuple[dict, ...] = ()  # per row: data-* attributes (machine-readable values: learner, total)


@dataclass
class ClassData:
    """What the report is made from: the rows of ``grades.csv`` and ``grades_by_test.csv`` (as ``export_rows``
    returns them, without the skipped folders' rows), learners' display names, the folders of ``submitted/`` that
    have no row, and those whose row says they were skipped (``skipped``: their names; grades.csv has the reasons)."""

    rows: list[dict]
    test_rows: list[dict]
    names: dict[str, str] = field(default_factory=dict)
    unlisted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    copy_review: dict = field(default_factory=dict)  # similarity_report.report_data of the class ({}: none made)
    course: str = ""
    course_folder: Path | None = None  # for a builder that reads more (grading reports)


def _number(value) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _assignments(data: ClassData) -> list[str]:
    return sorted({row["assignment"] for row in data.rows})


def _statuses(data: ClassData) -> list[str]:
    present = {row["status"] for row in data.rows}
    return [s for s in STATUS_TEXT if s in present] + sorted(present - set(STATUS_TEXT))


def learner_totals(rows: Sequence[dict]) -> list[dict]:
    """Per learner: total score, total points, points waiting for the instructor, assignments submitted, flags;
    sorted by total (highest first), then by learner id."""
    totals: dict[str, dict] = {}
    for row in rows:
        entry = totals.setdefault(
            row["learner"],
            {"learner": row["learner"], "score": 0.0, "max_score": 0.0, "pending": 0.0, "submitted": 0, "flags": 0},
        )
        entry["score"] += _number(row["score"])
        entry["max_score"] += _number(row["max_score"])
        entry["pending"] += _number(row.get("manual_pending"))
        entry["submitted"] += row["status"] != "missing"
        entry["flags"] += len(str(row.get("flags") or "").split())
    return sorted(totals.values(), key=lambda t: (-t["score"], t["learner"]))


def _score(value: float) -> str:
    return f"{round(value, 2):g}"


def status_section(data: ClassData) -> ReportSection:
    statuses = _statuses(data)
    counts = collections.Counter((row["assignment"], row["status"]) for row in data.rows)
    rows = [(a, *(counts[(a, s)] for s in statuses)) for a in _assignments(data)]
    rows.append(("合计（total）", *(sum(counts[(a, s)] for a in _assignments(data)) for s in statuses)))
    note = f"{len({r['learner'] for r in data.rows})} 个学员（learners），{len(_assignments(data))} 个作业（assignments）。"
    if data.unlisted:
        note += f" submitted/ 下没有成绩行的目录（folders without a row）：{'、'.join(data.unlisted)}"
    else:
        note += " submitted/ 下的目录都有成绩行（every folder under submitted/ has rows）。"
    if data.skipped:
        note += f" 没有评分的目录（skipped folders，原因见 grades.csv）：{'、'.join(data.skipped)}"
    return ReportSection("status", "评分状态（status counts）", note, ("作业（assignment）", *statuses), tuple(rows))


def totals_section(data: ClassData) -> ReportSection:
    assignments = _assignments(data)
    by_pair = {(row["learner"], row["assignment"]): row for row in data.rows}
    rows, keys = [], []
    for rank, total in enumerate(learner_totals(data.rows), 1):
        learner = total["learner"]
        share = f"{100 * total['score'] / total['max_score']:.0f}%" if total["max_score"] else "-"
        cells = []
        for assignment in assignments:
            row = by_pair.get((learner, assignment))
            cells.append("" if row is None else f"{_score(_number(row['score']))} {row['status']}")
        rows.append(
            (
                rank,
                learner,
                data.names.get(learner, ""),
                _score(total["score"]),
                _score(total["max_score"]),
                share,
                _score(total["pending"]) if total["pending"] else "",
                total["flags"] or "",
                *cells,
            )
        )
        keys.append({"learner": learner, "total": _score(total["score"]), "max": _score(total["max_score"])})
    columns = (
        "#",
        "学员（learner）",
        "姓名（name）",
        "总分（total）",
        "满分（max）",
        "得分率",
        "待人工评分",
        "标记（flags）",
    )
    return ReportSection(
        "totals",
        "学员总分（totals per learner）",
        "按总分从高到低排列（sorted by total, highest first）；每个作业一栏：得分与状态。",
        (*columns, *assignments),
        tuple(rows),
        row_keys=tuple(keys),
    )


def distribution_section(data: ClassData) -> ReportSection:
    charts, rows = [], []
    for assignment in _assignments(data):
        mine = [row for row in data.rows if row["assignment"] == assignment]
        handed = [row for row in mine if row["status"] != "missing"]
        top = max((_number(row["max_score"]) for row in mine), default=0.0)
        scores = [_number(row["score"]) for row in handed]
        if not top or not scores:
            rows.append((assignment, len(handed), len(mine) - len(handed), "-", "-", "-", "-"))
            continue
        bins = [0] * BINS
        for score in scores:
            bins[min(BINS - 1, int(BINS * score / top))] += 1
        labels = tuple(f"{100 * k // BINS}" for k in range(BINS))
        charts.append(BarChart(f"{assignment}（满分 {_score(top)}）", labels, tuple(float(b) for b in bins)))
        rows.append(
            (
                assignment,
                len(handed),
                len(mine) - len(handed),
                _score(statistics.mean(scores)),
                _score(statistics.median(scores)),
                _score(min(scores)),
                _score(max(scores)),
            )
        )
    return ReportSection(
        "distribution",
        "分数分布（score distribution）",
        "只计交了作业的学员（missing 不计入）；柱子：得分占满分的百分比区间（每格 10%，最后一格含满分）。",
        ("作业（assignment）", "交了", "未交", "平均", "中位数", "最低", "最高"),
        tuple(rows),
        tuple(charts),
    )


_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?(?:e-?\d+)?")  # a number, not a digit of a name (float32)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def plain(text) -> str:
    """``text`` on one line without control characters (a learner's message or folder name printed on the
    instructor's terminal cannot move the cursor, recolour or retitle it)."""
    return _CONTROL.sub("\ufffd", " ".join(str(text).split()))


def message_group(message: str) -> str:
    """A failure message with its numbers (not the digits of a name: float32) replaced by ``#``, whitespace collapsed
    and control characters replaced,
    cut to MESSAGE_CHARS: the same mistake made with different values is one group."""
    text = _NUMBER.sub("#", plain(message))
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def check_rates(test_rows: Sequence[dict]) -> list[dict]:
    """Per (assignment, test) scored automatically: learners who ran it, who passed (full points), and the most
    common failure messages (grouped by :func:`message_group`) with their counts; lowest pass rate first."""
    checks: dict[tuple[str, str], dict] = {}
    for row in test_rows:
        if row.get("outcome") == MANUAL or not _number(row["max_score"]):
            continue
        entry = checks.setdefault(
            (row["assignment"], row["test"]),
            {
                "assignment": row["assignment"],
                "test": row["test"],
                "ran": 0,
                "passed": 0,
                "messages": collections.Counter(),
            },
        )
        entry["ran"] += 1
        if _number(row["score"]) >= _number(row["max_score"]):
            entry["passed"] += 1
        else:
            entry["messages"][message_group(row.get("message") or row.get("outcome") or "?")] += 1
    return sorted(checks.values(), key=lambda c: (c["passed"] / c["ran"], c["assignment"], c["test"]))


def checks_section(data: ClassData) -> ReportSection:
    rows = []
    for check in check_rates(data.test_rows):
        common = tuple(f"{count} × {message}" for message, count in check["messages"].most_common(TOP_MESSAGES))
        rate = f"{100 * check['passed'] / check['ran']:.0f}%"
        rows.append((check["assignment"], check["test"], f"{check['passed']}/{check['ran']}", rate, common))
    return ReportSection(
        "checks",
        "各项检查的通过率（pass rate per check）",
        "自动计分的测试单元，通过率低的在前；最常见的报错（数字记作 #，同样的错误归为一组）说明全班哪里没弄懂。",
        ("作业（assignment）", "检查（check）", "通过（passed）", "通过率", "最常见的报错（most common failures）"),
        tuple(rows),
    )


def flags_section(data: ClassData) -> ReportSection:
    rows = sorted(
        (flag.split(":", 1)[0], row["learner"], row["assignment"], flag)
        for row in data.rows
        for flag in str(row.get("flags") or "").split()
    )
    return ReportSection(
        "flags",
        "待复核的标记（review flags）",
        f"共 {len(rows)} 个标记；标记不改分，只提示人工看一眼（flags never change a score）。",
        ("类别（kind）", "学员（learner）", "作业（assignment）", "标记（flag）"),
        tuple(rows),
    )


COPY_ROWS = 10  # flagged pairs shown per assignment; the side-by-side report (review/similarity.html) has them all


def copies_section(data: ClassData) -> ReportSection | None:
    """The copy review's flagged pairs per assignment, highest similarity first (learner and learner, or learner and
    the reference), from ``data.copy_review`` (what ``grades`` also writes to ``review/``); None without one."""
    from .similarity_report import HTML_NAME, REVIEW_DIR

    if not data.copy_review:
        return None
    rows, total = [], 0
    for assignment, entry in sorted(data.copy_review.get("assignments", {}).items()):
        flagged = [pair for pair in entry.get("pairs", []) if pair.get("flagged")]
        total += len(flagged)
        for pair in flagged[:COPY_ROWS]:
            functions = tuple(
                f"{f['function']} {100 * f['similarity']:.0f}%（阈值 {100 * f['threshold']:.0f}%）"
                for f in pair.get("functions", [])
                if f.get("flagged") and f.get("threshold") is not None
            )
            share = f"{100 * pair['similarity']:.0f}%"
            rows.append((assignment, pair["rank"], pair["learner"], pair["other"], share, functions))
    return ReportSection(
        "copies",
        "抄袭检查（copy review）",
        f"共 {total} 对超过按函数校准的阈值（每个作业列出前 {COPY_ROWS} 对）；标记不改分。并排的对照与全部配对："
        f"{REVIEW_DIR}/{HTML_NAME}（side by side）。",
        (
            "作业（assignment）",
            "名次（rank）",
            "学员（learner）",
            "对方（other）",
            "相似度（similarity）",
            "超过阈值的函数",
        ),
        tuple(rows),
    )


# The sections of the report, in order. Add a section by adding its builder here (ClassData -> ReportSection | None).
SectionBuilder = Callable[[ClassData], "ReportSection | None"]
SECTION_BUILDERS: list[SectionBuilder] = [
    status_section,
    totals_section,
    distribution_section,
    checks_section,
    flags_section,
    copies_section,
]


def report_sections(data: ClassData, builders: Sequence[SectionBuilder] | None = None) -> list[ReportSection]:
    """The report's sections: each builder's (``SECTION_BUILDERS`` by default) in order, those returning None left
    out."""
    sections = [builder(data) for builder in (SECTION_BUILDERS if builders is None else builders)]
    return [section for section in sections if section is not None]


# ----------------------------------------------------------------------------- the page
_e = html.escape
STYLE = """
body { font: 14px/1.5 system-ui, "Noto Sans CJK SC", sans-serif; margin: 1.5em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; } th, td { border: 1px solid #ddd; padding: .2em .5em;
vertical-align: top; text-align: left; } th { background: #f3f3f3; } td ul { margin: 0; padding-left: 1.2em; }
.note { color: #555; } .charts { display: flex; flex-wrap: wrap; gap: 1em; } figure { margin: 0; }
figcaption { font-size: .9em; } nav a { margin-right: 1em; }
"""


def _cell(value) -> str:
    if isinstance(value, (list, tuple)):
        return "<ul>" + "".join(f"<li>{_e(str(item))}</li>" for item in value) + "</ul>" if value else ""
    if isinstance(value, float):
        value = _score(value)
    return _e(str(value))


def bar_chart_svg(chart: BarChart, width: int = 300, height: int = 120) -> str:
    """``chart`` as an inline SVG element (no script, no external resource; every text escaped)."""
    top = max(chart.values, default=0.0) or 1.0
    slot = width / max(1, len(chart.values))
    base = height - 18
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_e(chart.title)}">'
    ]
    for k, (label, value) in enumerate(zip(chart.labels, chart.values)):
        bar = (base - 14) * value / top
        x = k * slot
        parts.append(
            f'<rect x="{x + 2:.1f}" y="{base - bar:.1f}" width="{slot - 4:.1f}" height="{bar:.1f}" fill="#4a78b5"/>'
        )
        if value:
            parts.append(
                f'<text x="{x + slot / 2:.1f}" y="{base - bar - 2:.1f}" font-size="10" text-anchor="middle">'
                f"{_score(value)}</text>"
            )
        parts.append(
            f'<text x="{x + slot / 2:.1f}" y="{height - 4}" font-size="10" text-anchor="middle">{_e(label)}</text>'
        )
    parts.append(f'<line x1="0" y1="{base}" x2="{width}" y2="{base}" stroke="#888"/></svg>')
    return "".join(parts)


def _table(section: ReportSection) -> str:
    if not section.rows:
        return '<p class="note">（没有 / none）</p>'
    head = "".join(f"<th>{_e(c)}</th>" for c in section.columns)
    body = []
    for k, row in enumerate(section.rows):
        keys = section.row_keys[k] if k < len(section.row_keys) else {}
        attributes = "".join(f' data-{_e(name)}="{_e(str(value))}"' for name, value in keys.items())
        body.append(f"<tr{attributes}>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_report(data: ClassData, sections: Sequence[ReportSection] | None = None) -> str:
    """The whole page (HTML, self-contained, no script, the course's Content-Security-Policy)."""
    sections = report_sections(data) if sections is None else sections
    title = f"班级成绩报告（class report）{(' · ' + data.course) if data.course else ''}"
    out = [
        '<!DOCTYPE html>\n<html lang="zh">\n<head>\n',
        CSP_META,
        '\n<meta charset="utf-8">\n',
        f"<title>{_e(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{_e(title)}</h1>\n<nav>",
        "".join(f'<a href="#{_e(s.key)}">{_e(s.title)}</a>' for s in sections),
        "</nav>\n",
    ]
    for section in sections:
        out.append(f'<section id="{_e(section.key)}">\n<h2>{_e(section.title)}</h2>\n')
        if section.note:
            out.append(f'<p class="note">{_e(section.note)}</p>\n')
        if section.charts:
            figures = "".join(
                f"<figure>{bar_chart_svg(c)}<figcaption>{_e(c.title)}</figcaption></figure>" for c in section.charts
            )
            out.append(f'<div class="charts">{figures}</div>\n')
        if section.columns:
            out.append(_table(section) + "\n")
        out.append("</section>\n")
    out.append("</body>\n</html>\n")
    return "".join(out)


# ----------------------------------------------------------------------------- the terminal
def summary_lines(data: ClassData, hardest: int = 5) -> list[str]:
    """The short summary ``make grades`` prints instead of one row per learner and assignment."""
    learners = len({row["learner"] for row in data.rows})
    counts = collections.Counter(row["status"] for row in data.rows)
    lines = [
        f"[grades] {learners} 个学员 × {len(_assignments(data))} 个作业（learners × assignments）："
        + "，".join(f"{status} {counts[status]}" for status in _statuses(data))
        + (f"；没有成绩行的目录 {len(data.unlisted)} 个：{plain(' '.join(data.unlisted))}" if data.unlisted else "")
        + (
            f"；没有评分的目录 {len(data.skipped)} 个（skipped）：{plain(' '.join(data.skipped))}"
            if data.skipped
            else ""
        )
    ]
    for row in distribution_section(data).rows:
        assignment, handed, missing, mean, median, low, high = row
        lines.append(
            f"  {assignment:<26} 交了 {handed:>3}  未交 {missing:>3}  平均 {mean:>6}  中位数 {median:>6}  "
            f"最低 {low:>6}  最高 {high:>6}"
        )
    rates = check_rates(data.test_rows)[:hardest]
    if rates:
        lines.append("[grades] 通过率最低的检查（hardest checks）：")
        for check in rates:
            common = check["messages"].most_common(1)
            said = f"  ← {common[0][1]} × {common[0][0][:80]}" if common else ""
            lines.append(f"  {check['assignment']} {check['test']}: {check['passed']}/{check['ran']}{said}")
    flags = collections.Counter(
        flag.split(":", 1)[0] for row in data.rows for flag in str(row.get("flags") or "").split()
    )
    if flags:
        lines.append(
            f"[grades] 待复核的标记（review flags）{sum(flags.values())} 个："
            + "，".join(f"{kind} {n}" for kind, n in sorted(flags.items()))
        )
    top = learner_totals(data.rows)
    if top:
        lines.append(
            "[grades] 总分最高 / 最低（top / bottom）："
            + f"{plain(top[0]['learner'])} {_score(top[0]['score'])}/{_score(top[0]['max_score'])}，"
            + f"{plain(top[-1]['learner'])} {_score(top[-1]['score'])}/{_score(top[-1]['max_score'])}"
        )
    return lines
