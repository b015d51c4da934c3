"""The instructor's similarity report of a class, as MOSS gives it: per assignment, pairs of learners and each
learner against the reference, ranked by how far their most similar graded function is above its calibrated
threshold, each with the matching lines of both sides side by side (same colour: same matched code).

Written as ``<course>/review/similarity.html`` (one self-contained offline page: every learner text escaped, no
script, a Content-Security-Policy that forbids scripts and every load), ``similarity.csv`` and ``similarity.json``;
the class report's copy section (``class_report.copies_section``) lists the same data. A flag is for a human to read
the code; it never changes a score.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .copy_review import CAP, COMMON, MARGIN, MIN_PRINTS, REFERENCE, AssignmentReview, Match, Unit

REVIEW_DIR = "review"  # <course>/review/
HTML_NAME, CSV_NAME, JSON_NAME = "similarity.html", "similarity.csv", "similarity.json"
SHOWN_PAIRS = 100  # learner pairs listed per assignment besides the flagged ones (ranked)
PAGE_ROWS = 300  # rows of an assignment's ranking on the page (the CSV and JSON list every one)
SIDE_BY_SIDE = (40, 20)  # comparisons shown side by side per assignment: flagged, then unflagged
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; base-uri 'none'; form-action 'none'"
CSV_FIELDS = [
    "assignment",
    "rank",
    "learner",
    "other",
    "function",
    "similarity",
    "threshold",
    "flagged",
    "shared_prints",
]
COLOURS = 6


@dataclass
class Pair:
    """Learner ``a`` against ``b`` (a learner or ``REFERENCE``) on one assignment: every graded function compared."""

    assignment: str
    a: str
    b: str
    functions: list[Match] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return any(m.flagged for m in self.functions)

    @property
    def excess(self) -> float:
        return max(m.excess for m in self.functions)

    @property
    def share(self) -> float:
        flagged = [m.share for m in self.functions if m.flagged]
        return max(flagged or [m.share for m in self.functions])


def ranked(review: AssignmentReview) -> list[Pair]:
    """The assignment's comparisons grouped by pair, flagged ones first, then by distance above the threshold and
    similarity (each pair's functions in the same order)."""
    pairs: dict[tuple[str, str], Pair] = {}
    for m in review.matches:
        pairs.setdefault((m.a, m.b), Pair(review.assignment, m.a, m.b)).functions.append(m)
    for pair in pairs.values():
        pair.functions.sort(key=lambda m: (not m.flagged, -m.excess, -m.share, m.gid))
    return sorted(pairs.values(), key=lambda p: (not p.flagged, -p.excess, -p.share, p.a, p.b))


def _listed(pairs: list[Pair]) -> list[Pair]:
    """What the report lists: every comparison with the reference, every flagged pair, the first learner pairs."""
    out, learners = [], 0
    for pair in pairs:
        if pair.b == REFERENCE or pair.flagged:
            out.append(pair)
        elif learners < SHOWN_PAIRS:
            out.append(pair)
            learners += 1
    return out


def _function_stats(thresholds: dict) -> dict:
    return {gid: {k: v for k, v in stats.items() if k != "common"} for gid, stats in sorted(thresholds.items())}


def report_data(reviews: dict[str, AssignmentReview]) -> dict:
    """The report as plain data (the JSON file, the class report's data)."""
    out = {
        "rule": {"margin": MARGIN, "cap": CAP, "min_prints": MIN_PRINTS, "common": COMMON},
        "assignments": {},
    }
    for assignment, review in reviews.items():
        pairs = ranked(review)
        out["assignments"][assignment] = {
            "learners": len(review.units),
            "functions": _function_stats(review.thresholds),
            "flagged_pairs": sum(p.flagged for p in pairs if p.b != REFERENCE),
            "flagged_reference": sum(p.flagged for p in pairs if p.b == REFERENCE),
            "pairs": [
                {
                    "rank": rank,
                    "learner": p.a,
                    "other": p.b,
                    "flagged": p.flagged,
                    "similarity": round(p.share, 4),
                    "functions": [
                        {
                            "function": m.gid,
                            "similarity": round(m.share, 4),
                            "threshold": m.threshold,
                            "flagged": m.flagged,
                            "shared_prints": len(m.shared),
                        }
                        for m in p.functions
                    ],
                }
                for rank, p in enumerate(_listed(pairs), 1)
            ],
        }
    return out


def csv_text(data: dict) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for assignment, entry in data["assignments"].items():
        for pair in entry["pairs"]:
            for f in pair["functions"]:
                writer.writerow(
                    {
                        "assignment": assignment,
                        "rank": pair["rank"],
                        "learner": pair["learner"],
                        "other": pair["other"],
                        **f,
                    }
                )
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------- HTML
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
th{background:#f3f3f3}.flag{color:#a00;font-weight:600}.none{color:#888}
.side{display:grid;grid-template-columns:1fr 1fr;gap:.8em}
pre{margin:0;padding:.4em;background:#fafafa;border:1px solid #ddd;overflow-x:auto;font-size:12px}
.l{display:block;white-space:pre}.n{color:#999;user-select:none}
.m0{background:#ffd6d6}.m1{background:#d6f0ff}.m2{background:#e3ffd6}.m3{background:#fff2c2}
.m4{background:#ead6ff}.m5{background:#d6fff2}details{margin:.4em 0}summary{cursor:pointer}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _regions(pair_units: tuple[Unit, Unit], shared: set[int]) -> dict[int, int]:
    """{shared print: colour}: prints whose lines on the left touch or follow each other share a colour."""
    left = pair_units[0]
    order = sorted(shared, key=lambda h: (min(left.prints.get(h) or [0]), h))
    colours, colour, last = {}, -1, None
    for h in order:
        lines = left.prints.get(h) or [0]
        if last is None or min(lines) > last + 1:
            colour += 1
        last = max(lines) if last is None else max(last, max(lines))
        colours[h] = colour % COLOURS
    return colours


def _code(unit: Unit, colours: dict[int, int]) -> str:
    marks: dict[int, int] = {}
    for h, colour in colours.items():
        for line in unit.prints.get(h, []):
            marks.setdefault(line, colour)
    out = []
    for number, line in enumerate(unit.text.splitlines(), 1):
        cls = f"l m{marks[number]}" if number in marks else "l"
        out.append(f'<span class="{cls}"><span class="n">{number:4d} </span>{_e(line)}</span>')
    return "<pre>" + "".join(out) + "</pre>"


def _side_by_side(review: AssignmentReview, match: Match) -> str:
    left = review.units[match.a][match.gid]
    right = review.reference[match.gid] if match.b == REFERENCE else review.units[match.b][match.gid]
    colours = _regions((left, right), match.shared)
    return (
        f'<div class="side"><div><b>{_e(match.a)}</b>{_code(left, colours)}</div>'
        f"<div><b>{_e(match.b)}</b>{_code(right, colours)}</div></div>"
    )


def _threshold(value) -> str:
    return f"{100 * value:.0f}%" if value is not None else '<span class="none">不标记（not flagged）</span>'


def assignment_html(review: AssignmentReview) -> str:
    pairs = ranked(review)
    parts = [f'<h2 id="{_e(review.assignment)}">{_e(review.assignment)}</h2>']
    parts.append(
        "<p>校准（calibration）：每个函数的阈值 = 独立实现达到的最高相似度 + "
        f"{MARGIN:g}，超过 {CAP:g} 不标记；{COMMON} 个以上独立实现共有的指纹不计入；少于 {MIN_PRINTS} 个指纹不比较"
        f"（threshold = highest similarity of independent versions + {MARGIN:g}; above {CAP:g}: not flagged）。</p>"
    )
    rows = "".join(
        f"<tr><td>{_e(gid)}</td><td>{stats.get('versions', 0)}</td>"
        f"<td>{_threshold(stats.get('reference_max'))}</td><td>{_threshold(stats.get('reference_threshold'))}</td>"
        f"<td>{_threshold(stats.get('pair_max'))}</td><td>{_threshold(stats.get('pair_threshold'))}</td></tr>"
        for gid, stats in _function_stats(review.thresholds).items()
    )
    parts.append(
        "<table><tr><th>函数（function）</th><th>独立实现（versions）</th><th>与参考答案最高（max vs reference）</th>"
        "<th>阈值（threshold）</th><th>两两最高（max pair）</th><th>学员间阈值（pair threshold）</th></tr>"
        f"{rows}</table>"
    )
    listed = _listed(pairs)
    table = "".join(
        f"<tr><td>{rank}</td><td>{_e(p.a)}</td><td>{_e(p.b)}</td>"
        f'<td class="{"flag" if p.flagged else ""}">{100 * p.share:.0f}%{" ⚑" if p.flagged else ""}</td>'
        f"<td>{_e(', '.join(f'{m.gid} {100 * m.share:.0f}%' for m in p.functions[:3]))}</td></tr>"
        for rank, p in enumerate(listed[:PAGE_ROWS], 1)
    )
    more = len(listed) - PAGE_ROWS
    parts.append(
        "<table><tr><th>#</th><th>学员（learner）</th><th>对比（other）</th><th>相似度（similarity）</th>"
        f"<th>最相似的函数（closest functions）</th></tr>{table}</table>"
        + (f"<p>另有 {more} 行见 {CSV_NAME}（{more} more rows in {CSV_NAME}）。</p>" if more > 0 else "")
    )
    shown = {True: 0, False: 0}
    for rank, p in enumerate(listed, 1):
        if shown[p.flagged] >= SIDE_BY_SIDE[0 if p.flagged else 1]:
            continue
        shown[p.flagged] += 1
        head = f"#{rank} {_e(p.a)} ↔ {_e(p.b)}：{100 * p.share:.0f}%{'（已标记 flagged）' if p.flagged else ''}"
        body = "".join(
            f"<p>{_e(m.gid)}：{100 * m.share:.0f}%，阈值（threshold）{_threshold(m.threshold)}</p>"
            + _side_by_side(review, m)
            for m in p.functions
        )
        parts.append(f"<details{' open' if p.flagged and rank <= 10 else ''}><summary>{head}</summary>{body}</details>")
    return "\n".join(parts)


def html_fragment(reviews: dict[str, AssignmentReview]) -> str:
    """The report's body (no script, every learner text escaped): for the class report."""
    if not reviews:
        return "<p>没有可比较的答案（nothing to compare）。</p>"
    index = " · ".join(f'<a href="#{_e(a)}">{_e(a)}</a>' for a in reviews)
    return f"<p>{index}</p>\n" + "\n".join(assignment_html(review) for review in reviews.values())


def html_page(reviews: dict[str, AssignmentReview]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="zh-CN"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        "<title>相似度报告（similarity report）</title>"
        f"<style>{STYLE}</style></head><body>"
        "<h1>相似度报告（similarity report）</h1>"
        "<p>标记只提示人工复核，从不改分（a flag asks for a human look and never changes a score）。</p>"
        f"{html_fragment(reviews)}</body></html>\n"
    )


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(
    course: Path, reviews: dict[str, AssignmentReview], data: dict | None = None
) -> tuple[list[Path], list[str]]:
    """Write the three files under ``<course>/review/`` (``data``: ``report_data(reviews)``, made here when not
    given); (their paths, the summary lines for the terminal)."""
    folder = course / REVIEW_DIR
    folder.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = report_data(reviews)
    paths = [folder / HTML_NAME, folder / CSV_NAME, folder / JSON_NAME]
    _write(paths[0], html_page(reviews))
    _write(paths[1], csv_text(data))
    _write(paths[2], json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
    lines = []
    for assignment, entry in data["assignments"].items():
        top = [p for p in entry["pairs"] if p["flagged"]][:3]
        shown = ", ".join(f"{p['learner']}~{p['other']} {100 * p['similarity']:.0f}%" for p in top)
        lines.append(
            f"[review] {assignment}: {entry['flagged_reference']} learner(s) like the reference, "
            f"{entry['flagged_pairs']} similar pair(s){': ' + shown if shown else ''}"
        )
    lines.append(f"[review] side-by-side report -> {paths[0]} (+ {CSV_NAME}, {JSON_NAME})")
    return paths, lines
