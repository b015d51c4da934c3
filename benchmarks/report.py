"""Reading results: the printed table of a run and the Markdown table of a results file."""

from __future__ import annotations


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
