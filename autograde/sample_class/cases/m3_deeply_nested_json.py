"""Valid JSON nested 100 000 levels deep inside a cell's metadata (nb01): the notebook cannot be read
safely, so it is ``invalid`` with a reason (not ``error``), and the rest of the class is graded: 0 of 17."""
CASE = {"nb01_group_advantages": {"base": "solution", "corrupt": "deep"}}
