"""``python -m autograde.pipeline review``: the class's copy review - the side-by-side similarity report
(``<course>/review/similarity.html``, ``.csv``, ``.json``) and its summary; ``--calibrate`` recomputes the copy
review's calibration and its precision and recall on the sample class (``grpo_grader/copy_calibration.json`` and
the generated section of autograde/README.md). ``make grades`` writes the same report."""

from __future__ import annotations

from autograde.grpo_grader.copy_review import AssignmentReview, review_class
from autograde.grpo_grader.course import ROOT, GradingPipeline
from autograde.grpo_grader.gradebook import class_reports
from autograde.grpo_grader.similarity_report import write_report


def class_review(settings: GradingPipeline) -> dict[str, AssignmentReview]:
    """The copy review of the course's graded class (its grading reports)."""
    return review_class(settings.course, class_reports(settings), ROOT / "notebooks")


def review(settings: GradingPipeline, calibrate: bool = False) -> int:
    if calibrate:
        from autograde.commands.settings import README
        from autograde.sample_class.copy_calibration import review_sample_class, write

        result = review_sample_class()
        for path in write(result, README):
            print(f"wrote {path}")
        print(
            f"[review] sample class: recall {result['found']}/{len(result['positives'])}, "
            f"{result['false_positives']} of {len(result['negatives'])} honest submissions flagged, "
            f"{result['held_out_flagged']}/{result['held_out_versions']} held-out versions flagged"
        )
        return 0
    _, lines = write_report(settings.course, class_review(settings))
    for line in lines:
        print(line)
    return 0
