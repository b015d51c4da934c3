"""``python -m autograde.pipeline settings``: every setting with the value in force; ``--write`` / ``--check`` the
sections of autograde/README.md generated from their definitions (the settings tables: ``course.settings_tables``;
what a sandbox sees: ``view.describe``)."""

from __future__ import annotations

from pathlib import Path

from autograde.grpo_grader import view
from autograde.grpo_grader.course import GradingPipeline, settings_tables

README = Path(__file__).resolve().parents[1] / "README.md"


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
