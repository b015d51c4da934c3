"""Reading a submitted notebook without trusting it.

``read_notebook`` turns a file into an nbformat-4 notebook (nbformat 3 is upgraded) or a reason why it cannot
be graded (status ``invalid``). ``rebuild_metadata`` gives the submission the release's nbgrader metadata:
a cell keeps its nbgrader identity only if its ``grade_id`` is one of the release's (the first cell with that
id wins), and that identity (points, checksum, locked, cell type) is the release's, never the submission's;
answer cells whose id was renamed or removed are found again by position (the cell just before the locked
cell that follows the answer in the release); every other nbgrader metadata (unknown, duplicated, injected
graded cells) is dropped, and the notebook metadata (kernelspec included) is the release's.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

MAX_NESTING = 64
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}$")  # a learner id (a folder name under submitted/)
SKIPPED = "skipped"  # the status of a folder of submitted/ that was not graded (grades.csv, the run's summary)


# ----------------------------------------------------------------------------- the folders of submitted/
@dataclass(frozen=True)
class Skipped:
    """A folder (or file) of ``submitted/`` that is not graded, and why: a row of its own in grades.csv."""

    learner: str
    assignment: str
    reason: str


def _shown_name(name: str) -> str:
    """A name as a row may show it: control characters and the like escaped."""
    return name if name.isprintable() else ascii(name)[1:-1]


def collect_submitted(submitted: Path, assignments) -> tuple[list[tuple[str, list[Path]]], list[Skipped]]:
    """[(learner, [assignment folder])] to grade under ``submitted`` (learner folders named by id, one folder per
    known assignment in each) and everything else found there, each with its reason: a file or a symbolic link
    instead of a learner folder, a learner id that is not allowed (``SAFE_ID``), an empty learner folder, files beside
    the assignment folders, a symbolic link or an unknown name instead of an assignment folder. Symbolic links are
    never followed (the grader runs with more rights than the learner)."""
    learners, skipped = [], []
    entries = sorted(submitted.iterdir()) if submitted.is_dir() else []
    for entry in entries:
        name = _shown_name(entry.name)
        if entry.is_symlink():
            skipped.append(Skipped(name, "", "学员目录是符号链接，不评分（symbolic link）"))
            continue
        if not entry.is_dir():
            skipped.append(Skipped(name, "", "不是目录：submitted/ 下每个学员一个目录（not a learner folder）"))
            continue
        if not SAFE_ID.match(entry.name):
            skipped.append(Skipped(name, "", "学员目录名只能含字母、数字和 _.@+-（learner id not allowed）"))
            continue
        inside = sorted(entry.iterdir())
        if not inside:
            skipped.append(Skipped(name, "", "空目录，没有任何作业（empty folder）"))
            continue
        folders = []
        stray = [p.name for p in inside if not p.is_dir() or p.is_symlink()]
        for folder in (p for p in inside if p.is_dir() and not p.is_symlink()):
            if folder.name in assignments:
                folders.append(folder)
            else:
                shown = _shown_name(folder.name)
                skipped.append(Skipped(name, shown, "没有这个作业（unknown assignment; run `make release`?）"))
        links = [p.name for p in inside if p.is_symlink()]
        for link in links:
            skipped.append(Skipped(name, _shown_name(link), "作业目录是符号链接，不评分（symbolic link）"))
        files = [n for n in stray if n not in links]
        if files:
            listed = ", ".join(_shown_name(n) for n in files[:5]) + (" ..." if len(files) > 5 else "")
            skipped.append(
                Skipped(
                    name,
                    "",
                    f"作业目录之外的文件未评分：{listed}；应放在 {name}/<作业名>/<作业名>.ipynb（stray files）",
                )
            )
        if folders:
            learners.append((entry.name, folders))
    return learners, skipped


# ----------------------------------------------------------------------------- another assignment's notebook
def grade_ids(nb: nbformat.NotebookNode) -> set[str]:
    """The nbgrader ``grade_id`` of every cell that has one."""
    return {gid for gid in (_gid(cell) for cell in nb.cells) if gid}


def other_assignment(nb: nbformat.NotebookNode, assignment: str, released: dict[str, set[str]]) -> str | None:
    """Why ``nb``, submitted for ``assignment``, is another assignment's notebook (its nbgrader cells are mostly the
    release of another assignment of ``released`` = {assignment: its grade_ids}, and fewer than half are this one's:
    the learner's mistake, status ``invalid``), or None. A notebook without nbgrader metadata, or whose cells match
    no release, is graded as usual (by position)."""
    ids = grade_ids(nb)
    if not ids:
        return None
    share = {name: len(ids & cells) / len(ids) for name, cells in released.items()}
    best = max((name for name in share if name != assignment), key=lambda name: share[name], default=None)
    if best is None or share[best] <= share.get(assignment, 0.0) or share.get(assignment, 0.0) >= 0.5:
        return None
    return (
        f"这是另一份作业 {best} 的笔记本（{len(ids & released[best])}/{len(ids)} 个评分单元属于 {best}，"
        f"{len(ids & released.get(assignment, set()))} 个属于 {assignment}）：请提交 {assignment} 的笔记本"
        "（wrong assignment）"
    )


def _depth(value, limit: int) -> int:
    """Nesting depth of a JSON value, computed without recursion (stops at ``limit``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def read_notebook(text: str) -> tuple[nbformat.NotebookNode | None, str | None]:
    """(notebook as nbformat 4, None) or (None, Chinese reason)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"不是有效的 notebook JSON：第 {error.lineno} 行第 {error.colno} 列 {error.msg}（invalid JSON）"
    except RecursionError:
        return None, "notebook JSON 嵌套过深，无法读取（nested too deep）"
    if _depth(data, MAX_NESTING) > MAX_NESTING:
        return None, f"notebook JSON 嵌套超过 {MAX_NESTING} 层，无法读取（nested too deep）"
    if (
        not isinstance(data, dict)
        or "nbformat" not in data
        or not (isinstance(data.get("cells"), list) or isinstance(data.get("worksheets"), list))
    ):
        return None, "JSON 不是 notebook 格式（缺少 cells / nbformat）（not a notebook）"
    try:
        nb = nbformat.reads(text, as_version=4)
        nb = nbformat.reads(nbformat.writes(nb), as_version=4)  # a plain v4 tree (an upgraded v3 too)
    except Exception as error:  # nbformat raises many kinds of errors for damaged notebooks
        return None, f"notebook 结构损坏：{type(error).__name__}: {str(error)[:200]}（broken notebook）"
    for cell in nb.cells:
        if not isinstance(cell.get("source"), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            return None, "notebook 单元格式不对（broken cell）"
    return nb, None


def _gid(cell) -> str | None:
    meta = cell.get("metadata", {})
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    return gid if isinstance(gid, str) else None


def _plain(cell, cell_type: str):
    """A copy of ``cell`` without nbgrader metadata, as ``cell_type``."""
    meta = (
        {k: v for k, v in dict(cell.get("metadata", {})).items() if k != "nbgrader"}
        if isinstance(cell.get("metadata"), dict)
        else {}
    )
    source = cell.get("source", "")
    new = (
        nbformat.v4.new_code_cell(source)
        if cell_type == "code"
        else (nbformat.v4.new_markdown_cell(source) if cell_type == "markdown" else nbformat.v4.new_raw_cell(source))
    )
    if cell_type == "code" and cell.get("cell_type") == "code":
        new.outputs = cell.get("outputs", [])
        new.execution_count = cell.get("execution_count")
    new.metadata = nbformat.from_dict(meta)
    return new


def rebuild_metadata(
    submitted: nbformat.NotebookNode, release: nbformat.NotebookNode
) -> tuple[nbformat.NotebookNode, list[str]]:
    """The submission with the release's nbgrader metadata (see the module docstring) and notes on what changed."""
    released = {}
    order = []
    for cell in release.cells:
        gid = _gid(cell)
        if gid and gid not in released:
            released[gid] = cell
            order.append(gid)
    notes: list[str] = []
    cells, used = [], {}
    ignored = []
    for cell in submitted.cells:
        gid = _gid(cell)
        if gid in released and gid not in used:
            source_cell = released[gid]
            new = _plain(cell, source_cell.cell_type)
            new.metadata["nbgrader"] = copy.deepcopy(source_cell.metadata["nbgrader"])
            for key in ("editable", "deletable"):
                if key in source_cell.metadata:
                    new.metadata[key] = source_cell.metadata[key]
            if cell.get("cell_type") != source_cell.cell_type:
                notes.append(
                    f"单元 {gid} 的类型被改成了 {cell.get('cell_type')}，已按发布版本恢复为 {source_cell.cell_type}"
                )
            used[gid] = len(cells)
            cells.append(new)
        else:
            if gid is not None or (isinstance(cell.get("metadata"), dict) and "nbgrader" in cell.metadata):
                ignored.append(gid or "?")
            cells.append(_plain(cell, cell.get("cell_type", "code")))
    # answers whose grade_id was renamed or removed: the cell just before the next release cell found
    for index, gid in enumerate(order):
        meta = released[gid].metadata["nbgrader"]
        if gid in used or not meta.get("solution"):
            continue
        after = next((g for g in order[index + 1 :] if g in used), None)
        position = used[after] - 1 if after is not None else len(cells) - 1
        if position < 0 or _gid(cells[position]) or cells[position].cell_type != released[gid].cell_type:
            continue
        previous = next((g for g in reversed(order[:index]) if g in used), None)
        if previous is not None and used[previous] >= position:
            continue
        cells[position].metadata["nbgrader"] = copy.deepcopy(meta)
        used[gid] = position
        notes.append(f"答案单元 {gid} 的 nbgrader 元数据被改动或删除，已按位置找回")
    if ignored:
        notes.append(
            "忽略了提交中不属于发布版本（未知、重复或新加）的评分元数据：" + ", ".join(sorted(set(ignored)))[:300]
        )
    nb = nbformat.v4.new_notebook(cells=cells, metadata=copy.deepcopy(release.metadata))
    nb.nbformat, nb.nbformat_minor = 4, max(5, int(release.get("nbformat_minor", 5)))
    seen = set()
    for index, cell in enumerate(nb.cells):
        cid = cell.get("id")
        if not isinstance(cid, str) or cid in seen or not cid:
            cell["id"] = f"cell-{index}"
        seen.add(cell["id"])
    return nb, notes


def answer_sources(nb: nbformat.NotebookNode) -> dict[str, str]:
    """{answer grade_id: source} of a notebook whose metadata has been rebuilt."""
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            out.setdefault(meta["grade_id"], cell.source)
    return out


SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def worked_answers(nb: nbformat.NotebookNode) -> dict[str, str]:
    """{grade_id: source} of every answer cell of a lesson's source notebook (the course's worked answers: nbgrader's
    ``source/`` version, or the notebook the build chain makes from ``solutions/``), solution markers removed."""
    answers = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution"):
            answers[meta["grade_id"]] = "\n".join(
                l for l in cell.source.splitlines() if l.strip() not in SOLUTION_MARKERS
            )
    return answers


_KNOWN = {"torch", "math", "numbers", "np", "numpy", "F", "nn", "self", "True", "False", "None"}


def normalised_tokens(source: str) -> list[str]:
    """The code's tokens without comments, layout and string contents, local names replaced by ``N``
    (attribute names, keywords and well-known modules kept): renaming variables or reformatting does not
    change them."""
    import builtins
    import io
    import keyword
    import tokenize

    out: list[str] = []
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            kind, text = token.type, token.string
            if kind in (
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
            ):
                continue
            if kind == tokenize.STRING:
                text = "S"
            elif kind == tokenize.NUMBER:
                text = "0"
            elif (
                kind == tokenize.NAME
                and not keyword.iskeyword(text)
                and previous != "."
                and text not in _KNOWN
                and not hasattr(builtins, text)
            ):
                text = "N"
            out.append(text)
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        out = source.split()
    return out


K_GRAM = 5  # tokens per k-gram of the copy fingerprint
WINDOW = 4  # winnowing window: every run of WINDOW + K_GRAM - 1 shared tokens shares a fingerprint
MIN_PRINTS = 8  # an answer with fewer own fingerprints (beyond the released stub) is too short to compare


def fingerprints(source: str, k: int = K_GRAM, window: int = WINDOW) -> set[int]:
    """Winnowed k-gram fingerprint of ``source`` (Schleimer, Wilkerson and Aiken's winnowing, as in MOSS) over its
    normalised tokens: renaming, comments, layout and string contents change nothing; dead code or reordered
    independent statements change only the k-grams that touch them, so most of a copy's fingerprint remains."""
    import zlib

    tokens = normalised_tokens(source)
    if len(tokens) < k:
        return set()
    hashes = [zlib.crc32(" ".join(tokens[i : i + k]).encode()) for i in range(len(tokens) - k + 1)]
    if len(hashes) <= window:
        return {min(hashes)}
    return {min(hashes[i : i + window]) for i in range(len(hashes) - window + 1)}


def answer_fingerprints(
    nb: nbformat.NotebookNode, release: nbformat.NotebookNode, min_prints: int = MIN_PRINTS
) -> dict[str, list[int]]:
    """{answer grade_id: sorted fingerprints of what the learner wrote in it} (the released stub's fingerprints
    removed: the signature and docstring every learner shares say nothing), for answers long enough to compare."""
    stubs = {gid: fingerprints(source) for gid, source in answer_sources(release).items()}
    out = {}
    for gid, source in answer_sources(nb).items():
        prints = fingerprints(source) - stubs.get(gid, set())
        if len(prints) >= min_prints:
            out[gid] = sorted(prints)
    return out


def similarity(a, b) -> float:
    """Share of the smaller fingerprint found in the other (1.0: one answer is contained in the other)."""
    a, b = set(a), set(b)
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def containment(a, b) -> float:
    """Share of fingerprint ``a`` found in ``b`` (how much of a learner's answer the reference already has)."""
    a = set(a)
    return len(a & set(b)) / len(a) if a else 0.0
