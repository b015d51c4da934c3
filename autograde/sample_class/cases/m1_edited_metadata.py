"""Edited nbgrader metadata (nb01, worked answers): a duplicated test cell (same grade_id, body ``pass``),
the answer cell of compute_group_advantages renamed to ``my_answer``, changed points and checksum, a test
cell turned into markdown, an injected graded cell worth 100 points, and another kernelspec. The grader
rebuilds the metadata from the release by grade_id and position (the renamed answer is found again), so the
notebook is graded normally: 17 of 17, status graded (never ``error``), with notes on what was ignored."""
CASE = {
    "nb01_group_advantages": {
        "base": "solution",
        "duplicate": [("test_compute_group_advantages_visible", "pass")],
        "inject": [("group_relative_advantages", "print('free points')",
                    {"grade": True, "grade_id": "bonus_points", "points": 100, "locked": False, "solution": False,
                     "schema_version": 3})],
        "metadata": {
            "compute_group_advantages": {"grade_id": "my_answer"},
            "test_group_relative_advantages_visible": {"points": 100},
            "test_conventions_question_hidden": {"checksum": "0" * 32},
            "test_conventions_question_visible": {"cell_type": "markdown"},
        },
        "kernelspec": {"name": "python-evil", "display_name": "evil", "language": "python"},
    },
}
