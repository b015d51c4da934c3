"""A file that is not valid notebook JSON (nb01, cut in half by a broken upload): 0 with the parse error as
the reason; no nbgrader run. nb02 not submitted: 0, "no submission"."""
CASE = {
    "nb01_group_advantages": {"base": "solution", "corrupt": "truncate"},
}
