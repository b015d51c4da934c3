"""The worked answers of nb02 saved in the old nbformat 3 layout (worksheets): upgraded to nbformat 4 and
graded normally: 16 of 16."""
CASE = {"nb02_grpo_objective": {"base": "solution", "nbformat": 3}}
