"""The conventions card (docs/CONVENTIONS.md) enforced over the prose of every lesson source.

Scanned: the Markdown cells of ``solutions/*.py`` (jupytext percent format), the 解析 included; not code cells (and
so not hidden tests), and in Markdown not code spans, math, fenced code, link targets or italic English titles.
Rules (each failure names ``file:line`` and the rule):

- glossary (card §2): the Chinese term, not the words the card rules out (比率 and 重要性比 -> 概率比,
  提示词 -> 提示) or the English words it translates (token, prompt, completion, mask, ratio, advantage, reward,
  verifier); the English may stand in parentheses that hold no Chinese, as at a first mention: 词元（token）;
- headings (card §3): one lesson title ``# 第 N 课　标题``; second-level headings only 导读, 运行环境, 前置阅读,
  ``第 N 步　标题`` numbered 1, 2, ..., ``准备　标题`` and 解析, in that order; ``### N.M　标题`` with N the step it
  sits in; ``### TODO N　标题`` numbered 1, 2, ... before STOP HERE;
- STOP HERE (card §3): ``# 🛑 STOP HERE 🛑`` once in a lesson with graded cells; every cell after it is left out of the
  learner version (``solution-only``), so nothing it says may announce something that follows; no graded cell after it;
- run time (card §3): no duration (a number of seconds, minutes or hours) promised in prose; the lesson's last cell
  measures and prints it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "solutions").glob("nb*.py"))
FW = "\u3000"  # the full-width space of the card's heading formats

# ----------------------------------------------------------------------------- parsing


@dataclass
class Cell:
    kind: str  # "markdown" | "code"
    header: str  # the "# %% ..." line
    start: int  # 1-based line number of the header
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text without the "# " prefix)

    @property
    def graded(self) -> bool:
        return '"grade": true' in self.header

    @property
    def solution_only(self) -> bool:
        return "solution-only" in self.header


def parse_cells(text: str) -> list[Cell]:
    """The cells of a jupytext percent source, Markdown lines with their comment prefix removed."""
    cells: list[Cell] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("# %%"):
            cells.append(Cell("markdown" if "[markdown]" in line else "code", line, number))
            continue
        if not cells:
            continue
        cell = cells[-1]
        if cell.kind == "markdown":
            cell.lines.append(
                (number, line[2:] if line.startswith("# ") else line[1:] if line.startswith("#") else line)
            )
        else:
            cell.lines.append((number, line))
    return cells


def prose_lines(cell: Cell) -> list[tuple[int, str]]:
    """(line number, prose) of a Markdown cell: fenced code, display math and solution markers dropped; code spans,
    inline math, link targets and italic titles without Chinese blanked out."""
    out, fenced, display_math = [], False, False
    for number, line in cell.lines:
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if fenced or stripped in ("### BEGIN SOLUTION", "### END SOLUTION"):
            continue
        if stripped.startswith("$$") and (stripped == "$$" or not stripped.endswith("$$") or len(stripped) == 2):
            display_math = not display_math
            if stripped != "$$" and stripped.endswith("$$") and len(stripped) > 2:
                display_math = not display_math
            continue
        if display_math:
            continue
        out.append((number, blank_code(line)))
    return out


_CODE = re.compile(r"`[^`]*`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_ITALIC = re.compile(r"(?<![*\w])\*(?!\*)([^*]+)\*(?!\*)")
_CJK = re.compile(r"[\u3400-\u9fff]")


def blank_code(line: str) -> str:
    line = _CODE.sub(" ", line)
    line = _MATH.sub(" ", line)
    line = _LINK_TARGET.sub("]", line)
    return _ITALIC.sub(lambda m: m.group(0) if _CJK.search(m.group(1)) else " ", line)


# ----------------------------------------------------------------------------- the rules


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.text.strip()[:120]}"


# card §2: words the glossary rules out, and the term to write instead
FORBIDDEN_CHINESE = {"比率": "概率比", "重要性比": "概率比", "提示词": "提示"}
# card §2: English words the glossary translates (a first mention may add them in parentheses)
GLOSSARY_ENGLISH = {
    "token": "词元",
    "prompt": "提示",
    "completion": "回答",
    "mask": "掩码",
    "ratio": "概率比",
    "advantage": "优势",
    "reward": "奖励",
    "verifier": "验证器",
}
_ENGLISH = re.compile(r"(?<![A-Za-z_./-])(" + "|".join(GLOSSARY_ENGLISH) + r")(s|es)?(?![A-Za-z_-])", re.IGNORECASE)
_PAREN = re.compile(r"（[^（）]*）|\([^()]*\)")
_DURATION = re.compile(
    r"(?:\d+(?:\.\d+)?|[一二两三四五六七八九十几半])\s*(?:秒钟?|分钟|小时|毫秒)"
    r"|\d+(?:\.\d+)?\s*(?:s|ms|min|sec|seconds|minutes)\b"
)


def glossary_violations(path: str, number: int, line: str) -> list[Violation]:
    found = []
    for word, instead in FORBIDDEN_CHINESE.items():
        if word in line:
            found.append(Violation(path, number, f"术语表：写“{instead}”，不写“{word}”", line))
    # English in parentheses holding no Chinese is a first-mention gloss: allowed
    outside = _PAREN.sub(lambda m: m.group(0) if _CJK.search(m.group(0)) else " ", line)
    for match in _ENGLISH.finditer(outside):
        word = match.group(1).lower()
        found.append(
            Violation(path, number, f"术语表：写“{GLOSSARY_ENGLISH[word]}”，不写英文 “{match.group(0)}”", line)
        )
    return found


def duration_violations(path: str, number: int, line: str) -> list[Violation]:
    return [
        Violation(path, number, f"运行时间：正文不承诺具体时长（“{m.group(0)}”）；由最后一个单元当场测量并打印", line)
        for m in _DURATION.finditer(line)
    ]


H1_TITLE = re.compile(r"^# 第 (\d+|3a|3b) 课" + FW + r"\S")
STOP_HEADING = "# 🛑 STOP HERE 🛑"
H2_FIXED = ("导读", "运行环境", "前置阅读")
H2_STEP = re.compile(r"^## 第 (\d+) 步" + FW + r"\S")
H2_PREP = re.compile(r"^## 准备" + FW + r"\S")
H3_NUMBERED = re.compile(r"^### (\d+)\.(\d+)" + FW + r"\S")
H3_TODO = re.compile(r"^### TODO (\d+)" + FW + r"\S")
CARD_LINK = "[约定卡](../../docs/CONVENTIONS.md)"
_ANNOUNCES = re.compile(r"下面|以下|下方|向下|接下来|后面|见下|如下")


def lesson_violations(path: Path, text: str | None = None) -> list[Violation]:
    """Every rule over one lesson source."""
    rel = path.relative_to(ROOT).as_posix() if path.is_absolute() and ROOT in path.parents else str(path)
    text = path.read_text(encoding="utf-8") if text is None else text
    cells = parse_cells(text)
    found: list[Violation] = []
    titles, stop_at, step, todo, phase = 0, None, 0, 0, 0  # phase: order of the second-level headings
    seen: dict[str, int] = {}  # fixed second-level headings -> count
    section = ""  # the second-level heading the current line sits under
    card_linked = False
    order = {"导读": 1, "运行环境": 2, "前置阅读": 3, "step": 4, "解析": 6}
    for index, cell in enumerate(cells):
        if cell.kind != "markdown":
            continue
        for number, line in prose_lines(cell):
            found += glossary_violations(rel, number, line)
            found += duration_violations(rel, number, line)
        for number, line in cell.lines:
            if section == "运行环境" and CARD_LINK in line:
                card_linked = True
            if not line.startswith("#"):
                continue
            heading = line.rstrip()
            if heading.startswith("# ") or heading == "#":
                if heading == STOP_HEADING:
                    if stop_at is not None:
                        found.append(Violation(rel, number, "STOP HERE：一课只有一个", heading))
                    stop_at = index
                    phase = 5
                elif H1_TITLE.match(heading):
                    titles += 1
                else:
                    found.append(
                        Violation(
                            rel, number, f"标题格式：一级标题只有 `# 第 N 课{FW}标题` 与 `{STOP_HEADING}`", heading
                        )
                    )
            elif heading.startswith("## "):
                name = heading[3:].strip()
                section = name
                seen[name] = seen.get(name, 0) + 1
                if name in H2_FIXED or name == "解析":
                    rank = order[name]
                elif H2_STEP.match(heading):
                    rank = order["step"]
                    if int(H2_STEP.match(heading).group(1)) != step + 1:
                        found.append(
                            Violation(
                                rel, number, f"标题格式：步骤从第 1 步起连续编号（应为第 {step + 1} 步）", heading
                            )
                        )
                    step = int(H2_STEP.match(heading).group(1))
                elif H2_PREP.match(heading):
                    rank = max(phase, order["前置阅读"])
                else:
                    found.append(
                        Violation(
                            rel,
                            number,
                            f"标题格式：二级标题只用 导读、运行环境、前置阅读、`## 第 N 步{FW}标题`、"
                            f"`## 准备{FW}标题`、解析",
                            heading,
                        )
                    )
                    continue
                if rank < phase:
                    found.append(
                        Violation(
                            rel, number, "标题格式：顺序为 导读、运行环境、前置阅读、各步、STOP HERE、解析", heading
                        )
                    )
                phase = max(phase, rank)
            elif heading.startswith("### "):
                numbered, todo_match = H3_NUMBERED.match(heading), H3_TODO.match(heading)
                if todo_match:
                    if stop_at is None:
                        if int(todo_match.group(1)) != todo + 1:
                            found.append(
                                Violation(
                                    rel, number, f"标题格式：TODO 在一课之内连续编号（应为 TODO {todo + 1}）", heading
                                )
                            )
                        todo = int(todo_match.group(1))
                elif numbered:
                    if int(numbered.group(1)) != step:
                        found.append(
                            Violation(
                                rel, number, f"标题格式：`### N.M{FW}标题` 的 N 是所在的步（第 {step} 步）", heading
                            )
                        )
                elif re.match(r"^### (TODO|\d|Step|第)", heading):
                    found.append(
                        Violation(
                            rel,
                            number,
                            f"标题格式：三级标题写成 `### N.M{FW}标题`、`### TODO N{FW}标题` 或不编号的 `### 标题`",
                            heading,
                        )
                    )
    for name in H2_FIXED:
        if seen.get(name, 0) != 1:
            found.append(Violation(rel, 1, f"标题格式：`## {name}` 恰好一个（找到 {seen.get(name, 0)} 个）", ""))
    if not card_linked:
        found.append(Violation(rel, 1, f"运行环境：这一节链接约定卡 `{CARD_LINK}`", ""))
    if titles != 1:
        found.append(Violation(rel, 1, f"标题格式：每课恰好一个课程标题 `# 第 N 课{FW}标题`（找到 {titles} 个）", ""))
    graded = [c for c in cells if c.graded]
    if graded and stop_at is None:
        found.append(Violation(rel, 1, f"STOP HERE：有计分单元的课以 `{STOP_HEADING}` 结束练习", ""))
    if stop_at is not None:
        stop_cell = cells[stop_at]
        for number, line in stop_cell.lines:
            if _ANNOUNCES.search(line) and not line.startswith("#"):
                found.append(
                    Violation(rel, number, "STOP HERE：学员版在它之后没有内容，不能预告“下面/以下”的内容", line)
                )
        for cell in cells[stop_at + 1 :]:
            if cell.graded:
                found.append(Violation(rel, cell.start, "STOP HERE：需要评分的问答放在 STOP HERE 之前", cell.header))
            elif not cell.solution_only and not ('"solution": true' in cell.header and cell.kind == "markdown"):
                found.append(
                    Violation(
                        rel, cell.start, 'STOP HERE：之后的单元只在源文件里（tags=["solution-only"]）', cell.header
                    )
                )
    return found


# ----------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_prose_follows_the_card(path):
    found = lesson_violations(path)
    assert not found, f"{len(found)} 处违反约定卡（docs/CONVENTIONS.md）：\n" + "\n".join(map(str, found))


RELEASED = sorted((ROOT / "notebooks").glob("nb*/nb*.ipynb"))


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_learner_version_ends_at_stop_here(path):
    """The released notebook (`make release`): nothing after the STOP HERE cell (card §3)."""
    import json

    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    stops = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and STOP_HEADING in "".join(c["source"])]
    if stops:
        after = len(cells) - 1 - stops[-1]
        assert after == 0, f"{path.relative_to(ROOT)}: STOP HERE：学员版在它之后还有 {after} 个单元"


# the checker can fail: one bad line per rule

LESSON = """# %% [markdown]
# # 第 9 课{fw}示例
#
# ## 导读
#
# 正文。
#
# ## 运行环境
#
# 约定见[约定卡](../../docs/CONVENTIONS.md)。
#
# ## 前置阅读
#
# ## 第 1 步{fw}开始
#
# ### 1.1{fw}小节
#
# ### TODO 1{fw}练习

# %% nbgrader={{"grade": true, "grade_id": "t", "points": 1}}
x = 1

# %% [markdown]
# # 🛑 STOP HERE 🛑
#
# 本课到此结束。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# 答案。
"""


def _violations(text: str) -> list[Violation]:
    return lesson_violations(Path("solutions/nb99_example.py"), text)


def test_checker_accepts_a_lesson_that_follows_the_card():
    assert _violations(LESSON.format(fw=FW)) == []


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("# 正文。", "# 先算比率，再裁剪。", "术语表：写“概率比”，不写“比率”"),
        ("# 正文。", "# 每个 token 的损失。", "术语表：写“词元”"),
        ("# 正文。", "# 逐 token 求和，再除以提示词长度。", "术语表：写“提示”，不写“提示词”"),
        ("# 正文。", "# 用 prompt 与 mask。", "术语表：写“提示”"),
        ("# 正文。", "# 在空闲的 2 核 CPU 上约 10 秒。", "运行时间"),
        ("# 正文。", "# 不超过 180 秒量级。", "运行时间"),
        ("# ## 第 1 步{fw}开始", "# ## 第 2 步{fw}开始", "步骤从第 1 步起连续编号"),
        ("# ## 第 1 步{fw}开始", "# ## 第 1 步：开始", "二级标题只用"),
        ("# ## 第 1 步{fw}开始", "# ## Step 1 · 开始", "二级标题只用"),
        ("# # 第 9 课{fw}示例", "# # 第 9 课：示例", "一级标题只有"),
        ("# ### 1.1{fw}小节", "# ### 2.1{fw}小节", "的 N 是所在的步"),
        ("# ### TODO 1{fw}练习", "# ### TODO 2{fw}练习", "TODO 在一课之内连续编号"),
        ("# ### TODO 1{fw}练习", "# ### TODO 1：练习", "三级标题写成"),
        ("# # 🛑 STOP HERE 🛑", "# ## STOP HERE", "二级标题只用"),
        ("# 本课到此结束。", "# 下面是解析。", "不能预告"),
        ('# %% [markdown] tags=["solution-only"]', "# %% [markdown]", "之后的单元只在源文件里"),
        ("# ## 导读", "# ## 小结", "二级标题只用"),
        ("# ## 导读", "# 导读", "`## 导读` 恰好一个"),
        ("[约定卡](../../docs/CONVENTIONS.md)", "约定卡", "这一节链接约定卡"),
    ],
)
def test_checker_names_the_broken_rule(old, new, rule):
    base = LESSON.format(fw=FW)
    bad = base.replace(old.format(fw=FW), new.format(fw=FW))
    assert bad != base, (old, new)
    found = _violations(bad)
    assert any(rule in v.rule for v in found), [str(v) for v in found]
    assert all(str(v).startswith("solutions/nb99_example.py:") for v in found)


def test_allowed_forms_pass():
    """A first-mention gloss in parentheses, code spans, math and italic English titles are not prose."""
    for line in (
        "词元（token）是分词器切出的单位。",
        "提示（prompt）。",
        "`completion_mask` 与 `ratio` 是代码。",
        "$\\text{ratio}$ 是数学。",
        "*Proximal Policy Optimization Algorithms*",
        "裁剪比例 0.2。",
    ):
        assert glossary_violations("x", 1, blank_code(line)) == [], line
