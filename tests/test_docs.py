"""The documents match each other and the tree: a bilingual document's two halves have the same sections (the same
heading levels in the same order, each pair with the same code spans), and every layout table names what is there
(each path it lists exists; each module of the folder it maps is listed). Each check has a meta-test."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
CODE_SPAN = re.compile(r"`([^`]+)`")


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, text) of every Markdown heading outside fenced code blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def section_problems(first: list[tuple[int, str]], second: list[tuple[int, str]], shift: int = 0) -> list[str]:
    """Where two halves' sections differ: another count, another level at the same place, or other code spans in a
    heading pair. ``shift``: how many levels deeper the second half's headings sit (an English section nested under
    one ``## English`` heading)."""
    problems = []
    if len(first) != len(second):
        problems.append(
            f"{len(first)} headings against {len(second)}: {[t for _, t in first]} / {[t for _, t in second]}"
        )
    for (level_a, text_a), (level_b, text_b) in zip(first, second):
        if level_a + shift != level_b:
            problems.append(f"level {level_a} {text_a!r} against level {level_b} {text_b!r}")
        if CODE_SPAN.findall(text_a) != CODE_SPAN.findall(text_b):
            problems.append(f"code spans differ: {text_a!r} / {text_b!r}")
    return problems


def autograde_halves(text: str) -> tuple[str, str]:
    """autograde/README.md: the Chinese half, then one ``---`` rule, then the English half."""
    parts = re.split(r"^---$", text, flags=re.M)
    assert len(parts) == 2, "autograde/README.md: exactly one --- rule between the two halves"
    return parts[0], parts[1]


def readme_halves(text: str) -> tuple[str, str]:
    """README.md: the Chinese document, then ``## English`` whose subsections mirror the Chinese sections."""
    chinese, english = text.split("\n## English\n", 1)
    return chinese, english


def test_autograde_readme_halves_have_the_same_sections():
    chinese, english = autograde_halves((ROOT / "autograde" / "README.md").read_text(encoding="utf-8"))
    first, second = headings(chinese), headings(english)
    assert len(first) >= 13
    assert section_problems(first, second) == []


def test_readme_english_section_mirrors_the_chinese_sections():
    chinese, english = readme_halves((ROOT / "README.md").read_text(encoding="utf-8"))
    first = [(level, text) for level, text in headings(chinese) if level == 2]
    second = [(level, text) for level, text in headings(english) if level == 3]
    assert len(first) >= 8
    assert section_problems(first, second, shift=1) == []


def test_the_section_check_finds_a_missing_or_moved_section():
    zh = [(2, "设置（`nbgrader_config.py`）"), (2, "示例班级"), (3, "细节")]
    en = [(2, "Settings (`nbgrader_config.py`)"), (2, "The sample class"), (3, "Details")]
    assert section_problems(zh, en) == []
    assert section_problems(zh, en[:2])  # a section only one half has
    assert section_problems(zh, [en[0], (3, "The sample class"), en[2]])  # another level
    assert section_problems(zh, [(2, "Settings (`config.py`)"), *en[1:]])  # another code span
    assert section_problems([(2, "a")], [(3, "a")], shift=1) == []


# ------------------------------------------------------------------------------------------- layout tables
ROW = re.compile(r"^\|\s*([^|]+?)\s*\|")


def first_column_paths(markdown: str, after: str) -> list[str]:
    """The code spans of the first column of the first table after the heading ``after``."""
    lines = markdown.split(after, 1)[1].splitlines()
    paths, started = [], False
    for line in lines:
        if line.startswith("|"):
            started = True
            cell = ROW.match(line)
            if cell and not set(cell.group(1)) <= set("- :"):
                paths += CODE_SPAN.findall(cell.group(1))
        elif started:
            break
    return paths


def tracked_top_level(root: Path = ROOT) -> set[str]:
    listed = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True, check=True).stdout
    return {line.split("/", 1)[0] + "/" for line in listed.splitlines() if "/" in line and not line.startswith(".")}


def layout_problems(paths: list[str], base: Path, required: set[str], ignored: set[str]) -> list[str]:
    """Paths a layout table lists that are not there (``ignored``: generated, git-ignored folders it may name), and
    the ``required`` entries it leaves out."""
    problems = [f"{p} is listed but not there" for p in paths if p not in ignored and not (base / p).exists()]
    listed = {p.split("<", 1)[0] for p in paths} | {p.split("/", 1)[0] + "/" for p in paths if "/" in p}
    problems += [f"{r} is not listed" for r in sorted(required) if r not in listed]
    return problems


def test_the_readme_layout_tables_name_the_tree():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    required = tracked_top_level()
    for heading in ("## 目录结构", "### Layout"):
        paths = first_column_paths(text, heading)
        assert layout_problems(paths, ROOT, required, ignored={"work/"}) == [], heading


def grader_modules() -> set[str]:
    """Every hand-written module of the grader, relative to autograde/ (the oracles as one entry)."""
    names = {"pipeline.py"}
    names |= {p.relative_to(ROOT / "autograde").as_posix() for p in (ROOT / "autograde" / "commands").glob("*.py")}
    names |= {
        p.relative_to(ROOT / "autograde").as_posix()
        for p in (ROOT / "autograde" / "grpo_grader").glob("*.py")
        if p.name != "__init__.py"
    }
    return {n for n in names if not n.endswith("__init__.py")}


def test_the_grader_module_tables_list_every_module():
    text = (ROOT / "autograde" / "README.md").read_text(encoding="utf-8")
    for half, heading in zip(autograde_halves(text), ("| 模块 | 内容 |", "| module | holds |")):
        assert heading in half, heading
        paths = first_column_paths(half, heading.split("|")[1].strip() + " |")
        listed = {p for p in paths if p.endswith(".py") and "<" not in p}
        covered = listed | {f"commands/{p.stem}.py" for p in (ROOT / "autograde" / "commands").glob("*.py")}
        assert "commands/<子命令>.py" in paths or "commands/<subcommand>.py" in paths
        assert grader_modules() - covered == set(), f"{heading}: not listed {sorted(grader_modules() - covered)}"
        assert layout_problems(sorted(listed), ROOT / "autograde", set(), set()) == []


def test_the_benchmark_code_map_lists_every_module():
    text = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    paths = first_column_paths(text, "| file | what it holds |")
    modules = {p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py"}
    assert layout_problems(paths, ROOT / "benchmarks", modules, set()) == []


def test_the_layout_check_finds_a_stale_or_missing_entry(tmp_path):
    (tmp_path / "tools").mkdir()
    (tmp_path / "docs").mkdir()
    table = "## 目录结构\n\n| 路径 | 内容 |\n| --- | --- |\n| `tools/` | x |\n| `gone/` | y |\n\nprose\n"
    paths = first_column_paths(table, "## 目录结构")
    assert paths == ["tools/", "gone/"]
    problems = layout_problems(paths, tmp_path, {"tools/", "docs/"}, set())
    assert problems == ["gone/ is listed but not there", "docs/ is not listed"]
