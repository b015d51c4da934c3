"""tools.project_runtime: the course root found from nested folders (a clear error otherwise), where records go, and
the one run-label rule that every record and its schema share."""

import json
import shutil
from pathlib import Path

import pytest

from tools.project_runtime import RUN_LABEL_PATTERN, check_run_label, resolve_project_root

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


# ------------------------------------------------------------------------------------------- the run-label rule
SCHEMAS = REPO_ROOT / "tools" / "schemas"


def run_label_patterns(folder: Path) -> dict[str, str | None]:
    """{schema file: the ``pattern`` of its top-level ``run_label`` property (None without one)} of every schema under
    ``folder`` that has a ``run_label`` property."""
    patterns = {}
    for path in sorted(folder.glob("*.json")):
        label = json.loads(path.read_text(encoding="utf-8")).get("properties", {}).get("run_label")
        if label is not None:
            patterns[path.name] = label.get("pattern")
    return patterns


def divergent_label_patterns(folder: Path) -> dict[str, str | None]:
    """The schemas under ``folder`` whose ``run_label`` pattern is not the one home's, ``RUN_LABEL_PATTERN``."""
    return {name: p for name, p in run_label_patterns(folder).items() if p != RUN_LABEL_PATTERN.pattern}


def test_every_schema_states_the_one_run_label_rule():
    """The evidence schemas cannot import the rule: each restates the pattern, and each copy is the home's (nb06's
    record, nb07's record and multi-seed summary), so the schema accepts exactly the labels check_run_label accepts."""
    assert set(run_label_patterns(SCHEMAS)) >= {
        "post-training-mechanism-gpu-v2.json",
        "online-grpo-v2.json",
        "online-grpo-seeds-v2.json",
    }
    assert divergent_label_patterns(SCHEMAS) == {}


def test_a_divergent_run_label_pattern_is_reported(tmp_path):
    """The check above can fail: a schema whose pattern allows 65 characters, and one that drops the pattern, are
    reported; the unchanged copies are not."""
    for path in SCHEMAS.glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    for name, edit in (
        ("online-grpo-v2.json", lambda p: p.update(pattern=p["pattern"].replace("{0,63}", "{0,64}"))),
        ("online-grpo-seeds-v2.json", lambda p: p.pop("pattern")),
    ):
        schema = json.loads((tmp_path / name).read_text(encoding="utf-8"))
        edit(schema["properties"]["run_label"])
        (tmp_path / name).write_text(json.dumps(schema), encoding="utf-8")
    found = divergent_label_patterns(tmp_path)
    assert set(found) == {"online-grpo-v2.json", "online-grpo-seeds-v2.json"}, found
    assert found["online-grpo-seeds-v2.json"] is None


@pytest.mark.parametrize("label", ["default", "my_run", "v1.2-a", "a" * 64, "0"])
def test_check_run_label_accepts_file_name_parts(label):
    assert check_run_label(label) == label


@pytest.mark.parametrize("label", ["", "a b", "../x", "-x", ".hidden", "a" * 65, "标签", None, 3])
def test_check_run_label_rejects_the_rest_in_chinese_and_english(label):
    with pytest.raises(ValueError, match="RUN_LABEL") as error:
        check_run_label(label)
    assert "只能用字母" in str(error.value) and "letters, digits" in str(error.value)


def test_nb06_and_nb07_check_labels_with_the_one_rule():
    """nb06's settings (``make experiment``) and nb07's runtime (``make online``) use the one check, not copies."""
    from tools import experiment_settings
    from tools import online_grpo as og

    assert experiment_settings.check_run_label is check_run_label and og.check_run_label is check_run_label
