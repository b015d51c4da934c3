"""One trusted oracle module per graded assignment, named like the assignment (see autograde/README.md,
"Writing an oracle for a lesson"). These modules run in the grader's process only; no kernel sees them."""
