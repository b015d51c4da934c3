"""Every notebook of the series: learner versions up to date and leak-free, solutions run green,
learner versions fail only with NotImplementedError."""

from __future__ import annotations

import pytest

import tools.chain.notebooks as chain

ASSIGNMENTS = chain.assignments()


@pytest.mark.release
def test_every_source_has_a_learner_version_and_nothing_leaks(released_course):
    assert ASSIGNMENTS, "solutions/ holds no notebook source"
    released = (released_course["course"], released_course["notebooks"])  # the test run's one release
    assert chain.check(released=released) == 0, "run `make release` (see the FAIL lines above)"


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solution_runs_green(assignment, notebook_runs):
    nb, seconds = notebook_runs.solution_timed(assignment)
    errors = chain.cell_errors(nb)
    assert not errors, f"{assignment}: cells raised {errors}"
    print(f"{assignment}: solution executed in {seconds:.1f} s (kernel start included)")


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_learner_version_fails_only_with_not_implemented(assignment, notebook_runs):
    nb = notebook_runs.learner(assignment)
    assert chain.learner_problems(nb) == []
