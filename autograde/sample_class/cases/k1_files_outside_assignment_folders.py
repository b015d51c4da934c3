"""Files outside the assignment folders: the worked nb01 notebook lies in the learner's folder itself
(k1_files_outside_assignment_folders/nb01_group_advantages.ipynb) instead of in nb01_group_advantages/. Nothing is
graded (the grader never guesses which assignment a loose file is), and the folder gets a row of its own in
grades.csv and a line in the run's summary: status skipped, with the reason and where the file belongs."""
CASE = {
    "nb01_group_advantages": {"base": "solution", "layout": "flat"},
}
