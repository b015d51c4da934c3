"""Reading results: the printed table of a run, the Markdown table of a results file, and the README's table
of the committed result files.

The README's table (between ``<!-- bench-table (generated) -->`` and ``<!-- /bench-table -->`` in
``benchmarks/README.md``) holds, for every metric, its newest committed measurement: of the full or partial runs
``benchmarks/results/*.json`` (``mode: "full"``), the one with the latest ``machine.date_utc``. Its rows follow
``latest.json`` (the last ``make bench``); a metric that file lacks follows in the order the files name it.
``python benchmarks/run.py --readme-table --write`` rewrites it, ``--check`` fails when it is stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.harness import RESULTS, ROOT

README = ROOT / "benchmarks" / "README.md"
TABLE_START, TABLE_END = "<!-- bench-table (generated) -->", "<!-- /bench-table -->"
LATEST = "latest.json"  # what a full `make bench` writes: its metric order is the table's


def _fmt(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def table(results: dict) -> str:
    rows = [("metric", "value", "unit", "baseline", "goal", "met")]
    for m in results["metrics"]:
        detail = m["detail"]
        met = detail.get("goal_met")
        rows.append(
            (
                m["name"],
                _fmt(m["value"]),
                m["unit"],
                _fmt(m["baseline"].get("value")),
                detail.get("goal", "-"),
                "-" if met is None else ("yes" if met else "NO"),
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"  {m['name']}: {m['detail']['status']}" for m in results["metrics"] if "status" in m["detail"]]
    return "\n".join(lines + notes)


def _markdown_cells(m: dict) -> list[str]:
    """metric, value, unit, baseline, goal, met: one metric as Markdown table cells."""
    detail = m["detail"]
    met = detail.get("goal_met")
    value = _fmt(m["value"]) if m["value"] is not None else f"n/a ({detail.get('status', '')})"
    return [
        f"`{m['name']}`",
        value,
        m["unit"],
        f"{_fmt(m['baseline'].get('value'))} {m['baseline'].get('unit', '')}",
        detail.get("goal", "-"),
        "-" if met is None else ("yes" if met else "**no**"),
    ]


def markdown_table(results: dict) -> str:
    """The Markdown table of one results file (``--markdown PATH``)."""
    lines = ["| metric | value | unit | baseline | goal | met |", "| --- | ---: | --- | ---: | --- | --- |"]
    lines += ["| " + " | ".join(_markdown_cells(m)) + " |" for m in results["metrics"]]
    return "\n".join(lines)


def result_files(folder: Path = RESULTS) -> dict[str, dict]:
    """``{file name: results}`` of the committed runs in ``folder`` (not its sub-folders, which hold the lessons'
    run records): every ``*.json`` with ``machine`` and ``metrics`` and ``mode: "full"``."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(results, dict) and {"machine", "metrics"} <= set(results) and results.get("mode") == "full":
            found[path.name] = results
    return found


def newest_measurements(files: dict[str, dict]) -> list[tuple[dict, str, dict]]:
    """(metric, file name, machine) of each metric's newest measurement, in the order of ``latest.json``."""
    by_date = sorted(files.items(), key=lambda item: (item[1]["machine"].get("date_utc") or "", item[0]))
    newest = {}
    for name, results in by_date:  # a later run replaces an earlier one
        for m in results["metrics"]:
            newest[m["name"]] = (m, name, results["machine"])
    order = [m["name"] for m in files.get(LATEST, {}).get("metrics", [])]
    order += [m["name"] for _, results in by_date for m in results["metrics"] if m["name"] not in order]
    return [newest[name] for name in dict.fromkeys(order)]


def readme_table(folder: Path = RESULTS) -> str:
    """The README's block, markers included, from the committed result files in ``folder``."""
    lines = [
        TABLE_START,
        "| metric | value | unit | baseline | goal | met | commit | measured (UTC) | file |",
        "| --- | ---: | --- | ---: | --- | --- | --- | --- | --- |",
    ]
    for m, name, machine in newest_measurements(result_files(folder)):
        commit = (machine.get("git_commit") or "?")[:7]
        date = (machine.get("date_utc") or "?")[:10]
        cells = [*_markdown_cells(m), f"`{commit}`", date, f"`results/{name}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, TABLE_END])


def with_readme_table(readme: str, folder: Path = RESULTS) -> str:
    """``readme`` with its generated block replaced by the one of the files in ``folder``."""
    if readme.count(TABLE_START) != 1 or readme.count(TABLE_END) != 1:
        raise ValueError(f"benchmarks/README.md needs exactly one {TABLE_START} ... {TABLE_END} block")
    start, end = readme.index(TABLE_START), readme.index(TABLE_END) + len(TABLE_END)
    return readme[:start] + readme_table(folder) + readme[end:]


def readme_table_command(write: bool, check: bool, readme: Path = README, folder: Path = RESULTS) -> int:
    """``--readme-table``: print the block; ``--write`` it into the README; ``--check`` it (exit 1 when stale)."""
    if not (write or check):
        print(readme_table(folder))
        return 0
    text = readme.read_text(encoding="utf-8")
    current = with_readme_table(text, folder)
    shown = readme.relative_to(ROOT) if readme.is_relative_to(ROOT) else readme
    if check and current != text:
        print(
            f"{shown}: the benchmark table is stale - run `python benchmarks/run.py --readme-table --write`",
            file=sys.stderr,
        )
        return 1
    if write and current != text:
        readme.write_text(current, encoding="utf-8")
    print(f"{shown}: benchmark table {'updated' if write and current != text else 'up to date'}")
    return 0
