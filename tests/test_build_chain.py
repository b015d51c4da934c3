"""The single-source chain on a small fixture source: build, release, staleness, leak checks, harness."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

import tools.chain.notebooks as chain

FIXTURE = Path(__file__).parent / "fixtures" / "chain_demo.py"


@pytest.fixture()
def course(tmp_path, monkeypatch):
    """A throwaway course: solutions/, autograde/ (with the real nbgrader config), notebooks/."""
    (tmp_path / "solutions").mkdir()
    shutil.copy(FIXTURE, tmp_path / "solutions" / "chain_demo.py")
    (tmp_path / "autograde").mkdir()
    shutil.copy(chain.COURSE / "nbgrader_config.py", tmp_path / "autograde" / "nbgrader_config.py")
    monkeypatch.setattr(chain, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(chain, "COURSE", tmp_path / "autograde")
    monkeypatch.setattr(chain, "NOTEBOOKS", tmp_path / "notebooks")
    shutil.copy(chain.ROOT / "course.toml", tmp_path / "course.toml")
    shutil.copytree(chain.ROOT / "environments", tmp_path / "environments")
    monkeypatch.setattr(chain, "ROOT", tmp_path)
    return tmp_path


def test_build_completes_metadata_and_inserts_first_cells(course):
    nb = chain.build_notebook("chain_demo")
    assert nb.cells[0].metadata["tags"] == ["course-badges"]
    assert "colab.research.google.com" in nb.cells[0].source
    boot = nb.cells[1]
    assert boot.metadata["nbgrader"] == {
        "grade": False,
        "grade_id": "bootstrap",
        "locked": True,
        "schema_version": 3,
        "solution": False,
    }
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "f")
    assert answer.metadata["nbgrader"] == {
        "grade": False,
        "grade_id": "f",
        "locked": False,
        "schema_version": 3,
        "solution": True,
    }
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_f")
    assert test.metadata["nbgrader"]["locked"] is True and test.metadata["nbgrader"]["points"] == 2
    assert [c["id"] for c in nb.cells][:2] == ["cell-000", "bootstrap"]


@pytest.mark.release
def test_release_is_byte_stable_strips_answers_and_passes_check(course):
    first = chain.release()[0].read_bytes()
    second = chain.release()[0].read_bytes()
    assert first == second, "two releases of the same source must be byte-identical"
    learner = nbformat.reads(first.decode(), as_version=4)
    text = "\n".join(c.source for c in learner.cells)
    assert "return x + 1" not in text and "assert f(2) == 3" not in text and "解析" not in text
    assert "raise NotImplementedError" in text
    assert chain.check() == 0


@pytest.mark.release
def test_check_fails_on_stale_and_on_leak(course, capsys):
    path = chain.release()[0]
    nb = nbformat.read(path, as_version=4)
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "f")
    answer.source = answer.source.replace('raise NotImplementedError("请先完成这个 TODO")', "return x + 1")
    nbformat.write(nb, path)
    assert chain.check() == 1
    out = capsys.readouterr().out
    assert "stale" in out and "leaks answer line: 'return x + 1'" in out
    chain.release()
    source = course / "solutions" / "chain_demo.py"
    source.write_text(source.read_text().replace("return x + 1", "return 1 + x"))
    assert chain.check() == 0, "an answer change does not change the learner version"
    source.write_text(source.read_text().replace('"""doc"""', '"""Add one."""'))
    assert chain.check() == 1, "a changed visible part must make the committed release stale"


def test_bad_sources_are_rejected(course):
    src = course / "solutions" / "chain_demo.py"
    text = src.read_text()
    src.write_text(text.replace('"grade_id": "test_f", "points": 2', '"grade_id": "f", "points": 2'))
    with pytest.raises(ValueError, match="duplicate grade_id"):
        chain.build_notebook("chain_demo")
    src.write_text(text.replace(', "points": 2', ""))
    with pytest.raises(ValueError, match="without points"):
        chain.build_notebook("chain_demo")


@pytest.mark.slow
def test_harness_grades_alternative_answers(course):
    chain.release()
    nb = chain.build_notebook("chain_demo")
    ok = chain.execute(chain.substitute_answers(nb, {"f": "def f(x):\n    return 1 + x"}), course)
    assert chain.cell_results(ok)["test_f"] is None
    wrong = chain.execute(chain.substitute_answers(nb, {"f": "def f(x):\n    return 2 if x == 1 else 0"}), course)
    assert chain.cell_results(wrong)["test_f"].startswith("AssertionError")
    learner = nbformat.read(course / "notebooks" / "chain_demo" / "chain_demo.ipynb", as_version=4)
    done = chain.execute(learner, course)
    assert chain.learner_problems(done) == []
    assert chain.cell_results(done)["test_f"].startswith("NotImplementedError")


def test_in_process_alembic_head_is_the_revision_nbgrader_stamps(monkeypatch, released_course):
    """chain.alembic_head (read in this process) == nbgrader.api.get_alembic_version (an `alembic heads` subprocess),
    and it is the revision the chain's release stamped into the new gradebook."""
    import os
    import sqlite3
    import sys

    import nbgrader.api

    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    assert chain.alembic_head() == nbgrader.api.get_alembic_version()
    with sqlite3.connect(released_course["course"] / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(chain.alembic_head(),)]
