"""Full marks: the worked answers of solutions/ in both notebooks."""
CASE = {
    "nb01_group_advantages": {"base": "solution"},
    "nb02_grpo_objective": {"base": "solution"},
}
