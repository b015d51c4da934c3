"""The right notebook under the wrong file name (nb02, "nb02_grpo_objective (1).ipynb", as a browser saves a
second download): it is the only notebook in the folder, so it is graded as nb02_grpo_objective.ipynb, with a
note saying so: 16 of 16. nb01 not submitted: 0, "no submission"."""
CASE = {
    "nb02_grpo_objective": {"base": "solution", "filename": "nb02_grpo_objective (1).ipynb"},
}
