"""``python -m autograde.pipeline feedback``: nbgrader's feedback pages for every autograded assignment."""

from __future__ import annotations

from autograde.grpo_grader.course import GradingPipeline
from autograde.grpo_grader.gradebook import hand_over


def feedback(settings: GradingPipeline) -> int:
    """nbgrader's generate_feedback for every assignment (HTML per learner under feedback/), through nbgrader's
    API in this process: one nbgrader start for the whole course instead of one process per assignment."""
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    with Gradebook(settings.db_url, settings.course_id) as gb:
        assignments = sorted(a.name for a in gb.assignments)
    config = PyFileConfigLoader(settings.config_file.name, path=str(settings.course)).load_config()
    config.CourseDirectory.root = str(settings.course)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    api.log.setLevel("WARN")
    status = 0
    for assignment in assignments:
        if not any((settings.dir("autograded")).glob(f"*/{assignment}/*.ipynb")):
            continue
        done = api.generate_feedback(assignment, force=True)
        if not done.get("success"):
            print(
                f"[feedback] {assignment}: nbgrader generate_feedback failed\n"
                + (done.get("error") or done.get("log") or "")[-3000:]
            )
            status = 1
    hand_over(settings, settings.dir("feedback"))  # as root: the pages are the course folder owner's
    count = len(list(settings.dir("feedback").glob("*/*/*.html")))
    print(f"[feedback] {count} HTML file(s) under {settings.dir('feedback')}")
    return status
