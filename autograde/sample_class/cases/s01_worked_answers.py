"""Full marks: the worked answers of solutions/ in every graded notebook (nb03a, nb04 and nb05 also hold
manual-graded answers, reported as needing manual grading)."""
from autograde.sample_class.build import LESSONS

CASE = {lesson: {"base": "solution"} for lesson in LESSONS}
