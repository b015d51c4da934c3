"""Another lesson's notebook under this lesson's name: the worked nb02 notebook handed in as
nb01_group_advantages/nb01_group_advantages.ipynb. Its nbgrader cells are nb02's release (one shared id, the
bootstrap cell, is nb01's too): the learner's mistake, so status invalid with a reason naming nb02, 0 of 17, and the
run exits 0 (it was once `error`, "grader error ... KeyError", and a failed run)."""
CASE = {
    "nb01_group_advantages": {"base": "solution", "notebook_of": "nb02_grpo_objective"},
}
