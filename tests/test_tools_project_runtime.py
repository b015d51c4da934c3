"""tools.project_runtime.resolve_project_root: found from nested folders, clear error otherwise."""

from pathlib import Path

import pytest

from tools.project_runtime import resolve_project_root

REPO_ROOT = Path(__file__).resolve().parents[1]


def _course(tmp_path):
    root = tmp_path / "clone"
    (root / "autograde" / "autograded" / "alice" / "nb01_group_advantages").mkdir(parents=True)
    (root / "notebooks" / "nb01_group_advantages").mkdir(parents=True)
    (root / "course.toml").write_text("[course]\n")
    return root


def test_found_from_nested_folders_and_files(tmp_path):
    root = _course(tmp_path)
    assert resolve_project_root(root) == root
    assert resolve_project_root(root / "notebooks" / "nb01_group_advantages") == root
    nested = root / "autograde" / "autograded" / "alice" / "nb01_group_advantages"
    assert resolve_project_root(str(nested)) == root
    notebook = nested / "nb01_group_advantages.ipynb"
    notebook.write_text("{}")
    assert resolve_project_root(notebook) == root


def test_default_start_is_the_working_directory(tmp_path, monkeypatch):
    root = _course(tmp_path)
    monkeypatch.chdir(root / "notebooks" / "nb01_group_advantages")
    assert resolve_project_root() == root


def test_default_falls_back_to_the_imported_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # like Colab's /content: outside the clone
    assert resolve_project_root() == REPO_ROOT
    assert (REPO_ROOT / "course.toml").is_file()


def test_clear_error_without_marker(tmp_path):
    start = tmp_path / "a" / "b"
    start.mkdir(parents=True)
    with pytest.raises(FileNotFoundError) as caught:
        resolve_project_root(start)
    message = str(caught.value)
    assert "course.toml" in message
    assert str(start) in message and str(tmp_path) in message  # the folders searched
    assert "Fix" in message and "修复" in message


def test_course_settings_come_from_course_toml_only(tmp_path):
    from tools.project_runtime import course_id, course_settings

    (tmp_path / "course.toml").write_text('[course]\nid = "fork-course"\nrepository = "me/fork"\n', encoding="utf-8")
    (tmp_path / "deep").mkdir()
    assert course_id(tmp_path / "deep") == "fork-course"
    assert course_settings(tmp_path)["repository"] == "me/fork"
    # the checkout's own id, which nbgrader's config and the gradebook must use
    assert course_id(Path(__file__)) == "grpo-in-practice"


def test_records_of_other_labels_go_to_the_ignored_local_folder():
    """Reference labels stay in benchmarks/results/<kind>/; any other label goes to benchmarks/results/local/,
    which git ignores (so a learner's run never shows in `git status`)."""
    import subprocess

    from tools.project_runtime import record_relative_path

    ref = record_relative_path("pt_grpo", "w", "tiny_cpu_reference", ("tiny_cpu_reference",))
    mine = record_relative_path("pt_grpo", "w", "learner_r2", ("tiny_cpu_reference",))
    assert ref.as_posix() == "benchmarks/results/pt_grpo/w_tiny_cpu_reference.json"
    assert mine.as_posix() == "benchmarks/results/local/pt_grpo/w_learner_r2.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", mine.as_posix()], cwd=REPO_ROOT)
    kept = subprocess.run(["git", "check-ignore", "-q", ref.as_posix()], cwd=REPO_ROOT)
    assert (ignored.returncode, kept.returncode) == (0, 1)
