"""Shared fixtures of the test suite.

``notebook_runs`` (session scope) executes a notebook at most once per test run and shares the result:

    def test_something(notebook_runs):
        nb = notebook_runs.solution("nb01_group_advantages")      # executed solution (nbgrader source) version
        nb = notebook_runs.learner("nb01_group_advantages")       # executed learner version (notebooks/)
        nb = notebook_runs.run(variant_nb, cwd=ROOT, env={...})  # any notebook (e.g. substituted answers)

Results are cached by the notebook's JSON, the working directory and the extra environment, so two tests that
ask for the same execution share one kernel run. Executed notebooks are returned as deep copies: a test may
modify what it gets. ``notebook_runs.count(key)`` says how often a given execution really ran (always 0 or 1).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import nbformat
import pytest

import tools.chain.notebooks as chain


class NotebookRuns:
    def __init__(self) -> None:
        self._done: dict[str, tuple[nbformat.NotebookNode, float]] = {}
        self.executions: dict[str, int] = {}

    @staticmethod
    def key(nb: nbformat.NotebookNode, cwd: Path, env: dict[str, str] | None) -> str:
        text = json.dumps(nb, sort_keys=True) + "\0" + str(cwd) + "\0" + json.dumps(env or {}, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def run_timed(
        self, nb: nbformat.NotebookNode, cwd: Path = chain.ROOT, timeout: int = 600, env: dict[str, str] | None = None
    ) -> tuple[nbformat.NotebookNode, float]:
        """(executed copy, seconds of the one real execution, kernel start included)."""
        import time

        key = self.key(nb, Path(cwd), env)
        if key not in self._done:
            started = time.perf_counter()
            done = chain.execute(nb, Path(cwd), timeout=timeout, env=env)
            self._done[key] = (done, time.perf_counter() - started)
            self.executions[key] = self.executions.get(key, 0) + 1
        done, seconds = self._done[key]
        return copy.deepcopy(done), seconds

    def run(
        self, nb: nbformat.NotebookNode, cwd: Path = chain.ROOT, timeout: int = 600, env: dict[str, str] | None = None
    ) -> nbformat.NotebookNode:
        return self.run_timed(nb, cwd, timeout, env)[0]

    def solution_timed(self, assignment: str) -> tuple[nbformat.NotebookNode, float]:
        path = chain.COURSE / "source" / assignment / f"{assignment}.ipynb"
        nb = chain.build_notebook(assignment)
        chain.write_notebook(nb, path)
        return self.run_timed(nbformat.read(path, as_version=4), path.parent)

    def solution(self, assignment: str) -> nbformat.NotebookNode:
        return self.solution_timed(assignment)[0]

    def learner_timed(self, assignment: str) -> tuple[nbformat.NotebookNode, float]:
        path = chain.NOTEBOOKS / assignment / f"{assignment}.ipynb"
        return self.run_timed(nbformat.read(path, as_version=4), path.parent)

    def learner(self, assignment: str) -> nbformat.NotebookNode:
        return self.learner_timed(assignment)[0]


@pytest.fixture(scope="session")
def notebook_runs() -> NotebookRuns:
    return NotebookRuns()
