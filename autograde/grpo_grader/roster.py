"""Learners' names for nbgrader's gradebook: ``[roster]`` of ``course.toml``, else the learner id.

    [roster]
    alice = "Alice Wang"                                  # the whole name (shown as is)
    s2024001 = { first_name = "小明", last_name = "王" }  # nbgrader's two fields

nbgrader's collect does not put learners into the gradebook, and the pipeline adds them by id only, so the
formgrader showed "None, None" for every learner. :func:`name_learners` gives each learner of the gradebook
without a name the roster's name, or the learner id: the formgrader (``last_name, first_name``) then shows
the name or the id. Names an instructor typed in the formgrader are kept.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


def roster(course_toml: Path) -> dict[str, dict[str, str]]:
    """``{learner id: {"first_name": ..., "last_name": ...}}`` from ``[roster]`` (empty when there is none).

    Raises ValueError naming the entry when an entry is neither a string nor a table of those two fields."""
    try:
        with open(course_toml, "rb") as handle:
            table = tomllib.load(handle).get("roster", {})
    except FileNotFoundError:
        return {}
    names = {}
    for learner, entry in table.items():
        if isinstance(entry, str):
            names[learner] = {"first_name": "", "last_name": entry}
        elif isinstance(entry, dict) and set(entry) <= {"first_name", "last_name"} and entry:
            names[learner] = {
                "first_name": str(entry.get("first_name", "")),
                "last_name": str(entry.get("last_name", "")),
            }
        else:
            raise ValueError(
                f'{course_toml} [roster] {learner} = {entry!r}: write a name ("Alice Wang") or '
                "{ first_name = ..., last_name = ... }"
            )
    return names


def learner_name(learner: str, names: dict[str, dict[str, str]]) -> dict[str, str]:
    """The gradebook fields for ``learner``: the roster's entry, else the id as the last name."""
    return names.get(learner) or {"first_name": "", "last_name": learner}


def display_name(learner: str, names: dict[str, dict[str, str]]) -> str:
    """How the course shows ``learner``: "last, first" when the roster gives both (nbgrader's formgrader order),
    the one given when only one is, else the learner id (never "None, None" nor a trailing comma). The formgrader's
    lists show the same (:data:`.formgrader_guard.NAME_DISPLAY_JS`)."""
    entry = names.get(learner) or {}
    parts = [str(entry.get("last_name") or "").strip(), str(entry.get("first_name") or "").strip()]
    return ", ".join(part for part in parts if part) or learner


def name_learners(gradebook, course_toml: Path, learners=()) -> list[str]:
    """Add ``learners`` to ``gradebook`` (an open ``nbgrader.api.Gradebook``) and give every learner without a
    first and last name one (:func:`learner_name`). Returns the ids it named."""
    names = roster(course_toml)
    for learner in learners:
        if not any(student.id == learner for student in gradebook.students):
            gradebook.update_or_create_student(learner, **learner_name(learner, names))
    named = []
    for student in gradebook.students:
        if student.first_name is None and student.last_name is None:
            gradebook.update_or_create_student(student.id, **learner_name(student.id, names))
            named.append(student.id)
    return named
