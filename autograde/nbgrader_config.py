"""nbgrader configuration of the course (the course root is this folder)."""
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.course_id = "grpo-in-practice"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# What a learner sees in place of an answer (nbgrader's ClearSolutions).
c.ClearSolutions.code_stub = {"python": "# 在这里写你的代码\nraise NotImplementedError(\"请先完成这个 TODO\")"}
c.ClearSolutions.text_stub = "在这里写下你的回答。"
