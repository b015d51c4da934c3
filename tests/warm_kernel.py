"""Wrong-answer checks in one warm kernel per notebook (one execution instead of one per wrong answer).

``warm_notebook(base, variants)`` returns ``base`` (a built source notebook with correct answers in place)
followed, for each variant, by a tagged copy of the cells from the variant's first answer cell through its last
checked cell, with the variant's answers in place (grade_ids ``<grade_id>@<tag>``), then the same span again with
the correct answers (``<grade_id>@restore-<tag>``) so that the next variant starts from correct state. A variant
that patches the interpreter for good (``restore=False``, e.g. ``torch.allclose = ...``) must come last.

Executed top to bottom, the tagged cells give the same results as a fresh execution of ``base`` with the
variant's answers: cells before the span do not depend on the variant's answers, and the span re-runs every cell
that does (the test modules check the restored copies pass, so a failure comes from its variant alone).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import tools.chain.notebooks as chain


def grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def is_test(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("nbgrader", {}).get("grade"))


@dataclass
class Variant:
    tag: str
    answers: dict[str, str]  # grade_id -> answer source (the wrong answers)
    last: list[str]  # grade_ids the span must reach (the cells the check looks at)
    restore: bool = True  # False: it patches the interpreter for good; put it last
    hidden_only: bool = False  # test cells of the span keep only their hidden tests
    first: list[str] = field(default_factory=list)  # extra grade_ids the span must start at or before


def tagged(cell, tag: str, answers: dict[str, str], hidden_only: bool = False):
    """A copy of ``cell`` for a tagged span: answer cells take ``answers``; with ``hidden_only`` test cells keep
    only their hidden tests; the copy's grade_id is ``<grade_id>@<tag>`` and its outputs are cleared."""
    out = copy.deepcopy(cell)
    gid = grade_id(cell)
    if gid in answers:
        out.source = answers[gid]
    if hidden_only and is_test(out):
        regions = chain.hidden_tests(out.source)
        assert regions, f"{gid} has no hidden tests"
        out.source = "\n".join(regions)
    if gid:
        out.metadata["nbgrader"] = dict(out.metadata["nbgrader"], grade_id=f"{gid}@{tag}")
    out["id"] = re.sub(r"[^A-Za-z0-9-]", "-", f"{out.get('id', 'cell')}-{tag}")[:64]
    if out.cell_type == "code":
        out.outputs, out.execution_count = [], None
    return out


def warm_notebook(base, variants: list[Variant], correct: dict[str, str] | None = None):
    """``base`` plus one tagged span per variant (and its restore span); ``correct``: the answers the restore
    spans put back (default: the sources ``base`` already holds)."""
    index = {grade_id(c): i for i, c in enumerate(base.cells) if grade_id(c)}
    seen_final = False
    cells = list(base.cells)
    for variant in variants:
        assert not seen_final, f"{variant.tag}: a variant without restore must be the last one"
        first = min(index[g] for g in [*variant.answers, *variant.first])
        last = max(index[g] for g in variant.last)
        assert first <= last, f"{variant.tag}: the checked cells must come after the answer cells"
        span = base.cells[first : last + 1]
        cells += [tagged(c, variant.tag, variant.answers, variant.hidden_only) for c in span]
        if variant.restore:
            cells += [tagged(c, f"restore-{variant.tag}", correct or {}, variant.hidden_only) for c in span]
        else:
            seen_final = True
    out = copy.deepcopy(base)
    out.cells = cells
    return out


def without_demo_cells(nb, assignment: str):
    """``nb`` without the lesson's demonstration cells (``SafeExecute.demo_cells``), as the grading kernel runs it:
    the answers and tests do not depend on them (tests/test_autograde.py checks that no later cell reads a name they
    define), and the solution's own execution (tests/test_notebooks.py) still runs them. A warm run checks answers;
    the lesson's timing loops, memory probe and figures would only add their seconds to it."""
    from autograde.grpo_grader.course import load_settings
    from autograde.grpo_grader.preprocessors import is_demo_cell

    markers = load_settings().demo_cells.get(assignment, ())
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if not is_demo_cell(c, markers)]
    return out


def base_part(done, base):
    """The executed copy of the ``base`` cells only (what a fresh execution of ``base`` gives)."""
    out = copy.deepcopy(done)
    out.cells = out.cells[: len(base.cells)]
    return out
