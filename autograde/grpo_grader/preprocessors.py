"""nbgrader preprocessors of the course, configured in ``autograde/nbgrader_config.py``.

Autograde (sanitise step, after nbgrader's own ``OverwriteCells``):
- ``RestoreBootstrap``: the locked bootstrap cell (it imports ``tools.grading`` and so captures the trusted
  comparison helpers) must run before any learner code. A submission that deleted it, moved it down or put
  a cell above it gets the source version back as its first code cell.

- ``RestoreTrusted``: a first cell that imports ``tools.grading`` before anything else (the capture then
  happens even if the bootstrap cell fails), and before every test cell a small unlocked cell (tagged ``grader-restore``, not graded)
  puts back any of the helpers ``tools.grading`` captured at bootstrap (``torch.allclose``,
  ``torch.testing.assert_close``, ``builtins.abs``, ...) that learner code rebound, so a test - visible or
  hidden - never runs with a replaced comparison function left behind by an earlier cell.

- ``StripHiddenTests``: in a test cell that the lesson's oracle grades (``oracles/<assignment>.py`` ``TESTS``), the
  hidden-test region (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``, restored by ``OverwriteCells``) is
  replaced by a one-line comment before the kernel runs: its points come from the oracle, outside this kernel,
  so the hidden tests' reference helpers and expected values never enter the learner's kernel (nor the
  executed notebook). Test cells of a lesson without an oracle keep their hidden tests (nbgrader's scores).
  On only in the pipeline's slots: the slot names the oracle's test cells (``tests``, ``Slot.nbgrader_options``), so
  no nbgrader process loads an oracle; a plain ``nbgrader autograde`` (formgrader's button) names none and keeps
  the hidden tests.

Autograde (execute step, replaces nbgrader's ``Execute``):
- ``SafeExecute``: caps the output a cell may send while it runs (a cell printing millions of lines cannot
  exhaust the grader's memory) without changing what nbgrader grades from the outputs, and turns a dead
  kernel (``os._exit``, a segfault, the memory limit) into error outputs: the cell that killed the kernel
  and every later code cell get an error, so they earn nothing, while the tests that passed before keep
  their points and the rest of the batch goes on. Demonstration cells listed in ``SafeExecute.demo_cells``
  (a lesson's slow demos that nothing later uses and no point depends on) are not run in the grading
  kernel; their output says so in the feedback.

Autograde (both steps, last; replaces nbgrader's ``CheckCellMetadata``):
- ``CheckCellMetadataOnce``: nbgrader's check of every cell's nbgrader metadata, with the same errors, against
  nbgrader's schema compiled once per process (nbgrader's ``jsonschema.validate`` checks the schema itself against
  its metaschema for every cell: about nine tenths of the step's time, twice per graded notebook).

Feedback:
- ``HideHiddenTests``: drops the ``grader-restore`` cells, removes the hidden-test region from test cells
  and shortens the tracebacks of those cells to their last line (a traceback quotes the failing source line), so feedback sent to learners shows the
  messages of failed tests but not the hidden tests themselves.
"""

from __future__ import annotations

import copy
import json
import re
import traceback

from jinja2 import pass_context
from nbclient.exceptions import DeadKernelError
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbformat.notebooknode import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import CheckCellMetadata, Execute, NbGraderPreprocessor
from traitlets import Dict, Integer, List, Unicode

BOOTSTRAP_ID = "bootstrap"
RESTORE_TAG = "grader-restore"
CAPTURE_SOURCE = """# [评分器] 在任何其他代码之前导入 tools.grading（grader: capture the trusted helpers first)
import tools.grading"""
RESTORE_SOURCE = """# [评分器] 运行测试前恢复被改写的可信函数（grader: restore helpers captured by tools.grading）
import tools.grading as _grader_trust
_grader_trust.restore()
del _grader_trust"""


def is_demo_cell(cell, markers) -> bool:
    """Whether ``cell`` is one of a lesson's demonstration cells (``SafeExecute.demo_cells[assignment]``): a setup
    code cell (never an answer or test cell) whose release grade_id is listed. Only the release's locked cells
    carry a grade_id (``rebuild_metadata``), so a cell the learner added is never a demonstration. Neither the
    grading kernel nor the oracle's driver runs it."""
    if cell.get("cell_type") != "code":
        return False
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution") or meta.get("grade"):
        return False
    gid = meta.get("grade_id")
    return gid is not None and gid in markers


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class RestoreBootstrap(NbGraderPreprocessor):
    """Put the locked bootstrap cell (from the gradebook) first among the code cells."""

    grade_id = Unicode(BOOTSTRAP_ID, help="grade_id of the locked first code cell").tag(config=True)

    def preprocess(self, nb, resources):
        notebook_id = resources["nbgrader"]["notebook"]
        assignment_id = resources["nbgrader"]["assignment"]
        with Gradebook(resources["nbgrader"]["db_url"]) as gb:
            try:
                source = gb.find_source_cell(self.grade_id, notebook_id, assignment_id)
            except MissingEntry:
                return nb, resources  # this notebook has no bootstrap cell
            found = [
                i
                for i, c in enumerate(nb.cells)
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == self.grade_id
            ]
            first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
            if found and found[0] == first_code and len(found) == 1:
                return nb, resources
            self.log.warning("bootstrap cell missing or moved in %s: restoring it as the first code cell", notebook_id)
            cell = NotebookNode(
                id="bootstrap-restored",
                cell_type="code",
                execution_count=None,
                outputs=[],
                source=source.source,
                metadata=NotebookNode(
                    nbgrader=NotebookNode(
                        grade=False,
                        grade_id=self.grade_id,
                        locked=True,
                        schema_version=3,
                        solution=False,
                        checksum=source.checksum,
                    ),
                    editable=False,
                    deletable=False,
                ),
            )
            cells = [c for i, c in enumerate(nb.cells) if i not in found]
            first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
            cells.insert(first_code, cell)
            nb.cells = cells
            resources.setdefault("grading", {})["bootstrap_restored"] = True
        return nb, resources


class RestoreTrusted(NbGraderPreprocessor):
    """A capture cell first (``import tools.grading`` before anything else runs, even when the bootstrap
    cell fails, e.g. cannot install a package offline), and a restore cell before every test cell."""

    def preprocess(self, nb, resources):
        cells = [c for c in nb.cells if RESTORE_TAG not in c.get("metadata", {}).get("tags", [])]
        out = [
            NotebookNode(
                cell_type="code",
                execution_count=None,
                outputs=[],
                source=CAPTURE_SOURCE,
                metadata=NotebookNode(tags=[RESTORE_TAG]),
                id="grader-capture",
            )
        ]
        for cell in cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
                restore = NotebookNode(
                    cell_type="code",
                    execution_count=None,
                    outputs=[],
                    source=RESTORE_SOURCE,
                    metadata=NotebookNode(tags=[RESTORE_TAG]),
                    id=f"grader-restore-{len(out)}",
                )
                out.append(restore)
            out.append(cell)
        nb.cells = out
        return nb, resources


HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STRIPPED_NOTE = (
    "# [评分器] 隐藏测试由评分器在学员内核之外、用评分时抽取的输入判定（hidden tests run outside this kernel）"
)


def strip_hidden(
    source: str, note: str | None = STRIPPED_NOTE, begin: str = HIDDEN_BEGIN, end: str = HIDDEN_END
) -> tuple[str, bool]:
    """``source`` without its hidden-test regions, and whether there was one. Each region becomes ``note``, indented
    like its ``begin`` line (``note=None``: nothing); marker lines never stay; an unclosed region runs to the end."""
    lines, hiding, found = [], False, False
    for line in source.splitlines(keepends=True):
        if begin in line:
            if note is not None and not hiding:
                lines.append(line[: len(line) - len(line.lstrip())] + note + "\n")
            hiding = found = True
            continue
        if end in line:
            hiding = False
            continue
        if not hiding:
            lines.append(line)
    return "".join(lines), found


class StripHiddenTests(NbGraderPreprocessor):
    """Drop the hidden-test regions of the test cells the assignment's oracle grades, before execution."""

    tests = List(
        Unicode(),
        help="grade_ids of the test cells that the lesson's oracle grades outside the kernel (its TESTS): their "
        "hidden-test regions are dropped before the kernel runs. The grading pipeline's slots set it for the "
        "notebook they grade (so no nbgrader process imports the oracles, nor torch with them); empty, as in a "
        "plain `nbgrader autograde`, keeps the hidden tests and nbgrader's scores",
    ).tag(config=True)

    def preprocess(self, nb, resources):
        graded = set(self.tests)
        if not graded:  # a plain `nbgrader autograde`: every hidden test runs in the kernel
            return nb, resources
        stripped = []
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if (
                cell.cell_type == "code"
                and meta.get("grade")
                and not meta.get("solution")
                and meta.get("grade_id") in graded
            ):
                cell.source, found = strip_hidden(cell.source)
                if found:
                    stripped.append(meta["grade_id"])
        resources.setdefault("grading", {})["hidden_stripped"] = stripped
        return nb, resources


_COMPILED_SCHEMAS: dict[int, object] = {}  # nbgrader's schema version -> its jsonschema validator (one per process)


class _SchemaCompiledOnce(BaseMetadataValidator):
    """``validate_cell`` as nbgrader's ``BaseMetadataValidator`` (``jsonschema.validate``: the best-matching error
    raised), without checking the constant schema itself again for every cell. A cell of another schema version
    goes to nbgrader's own code (its SchemaTooOld / SchemaTooNew errors)."""

    def validate_cell(self, cell: NotebookNode) -> None:
        meta = cell.metadata.get("nbgrader")
        if meta is None or meta.get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)
        import jsonschema

        validator = _COMPILED_SCHEMAS.get(self.schema_version)
        if validator is None:  # the schema is nbgrader's file of this version: the same for the whole process
            validator = jsonschema.validators.validator_for(self.schema)(self.schema)
            _COMPILED_SCHEMAS[self.schema_version] = validator
        error = jsonschema.exceptions.best_match(validator.iter_errors(meta))
        if error is not None:
            raise error


class _MetadataValidatorOnce(MetadataValidator, _SchemaCompiledOnce):
    """nbgrader's current ``MetadataValidator`` (its semantic checks after the schema's), over ``_SchemaCompiledOnce``
    (``MetadataValidator``'s call of its base's ``validate_cell`` lands there: method resolution order)."""


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's ``CheckCellMetadata`` - the same checks, log lines and error - with the schema compiled once."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        try:
            _MetadataValidatorOnce().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg) from None
        return nb, resources


class SafeExecute(Execute):
    """nbgrader's Execute with an output cap while running and survival of a dead kernel."""

    max_output_bytes = Integer(
        2_000_000, help="bytes of output a cell may keep while it runs; the rest is dropped (errors are kept)"
    ).tag(config=True, zh="一个单元运行时最多保留的输出字节数，其余丢弃（错误信息保留）")

    demo_cells = Dict(
        {},
        help="{assignment: [grade_id, ...]}: locked setup/demo code cells (never answer or test cells) that "
        "the grading kernel and the oracle's driver do not run: slow demonstrations that no later cell and "
        "no point depends on (tests/test_autograde.py checks that no later cell reads a name they define); "
        "matched by the release's grade_id only, so a cell the learner added always runs",
    ).tag(
        config=True,
        zh="{作业: [grade_id, ...]}：评分内核和 oracle 的驱动进程都不运行的锁定设置/演示单元（从不是答案或测试单元）："
        "不计分，之后的单元也不读取它们定义的名字（`tests/test_autograde.py` 逐课检查）；只按发布版本的 grade_id "
        "匹配，学员自己加的单元永远运行；反馈里这些单元的输出写明“评分时没有运行”",
    )

    def _is_demo(self, cell, resources) -> bool:
        return is_demo_cell(cell, self.demo_cells.get(resources.get("nbgrader", {}).get("assignment", ""), ()))

    def reset_execution_trackers(self):
        super().reset_execution_trackers()
        self._kernel_dead = False
        self._output_bytes: dict[int, int] = {}
        self._output_kinds: dict[int, set] = {}
        self._truncated: set[int] = set()

    def preprocess_cell(self, cell, resources, index):
        if getattr(self, "_kernel_dead", False):
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [
                    _error_output(
                        "KernelDied", "内核已在前面的单元中退出，此单元未执行（kernel died earlier; not run）"
                    )
                ]
                cell.execution_count = None
            return cell, resources
        if self._is_demo(cell, resources):
            cell.outputs = [
                NotebookNode(
                    output_type="stream",
                    name="stdout",
                    text=(
                        "[评分器] 这是演示单元，评分时没有运行（不计分；自己运行笔记时可以看到它的输出）"
                        "(demo cell, not run when grading)\n"
                    ),
                )
            ]
            cell.execution_count = None
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._kernel_dead = True
            self.log.error("kernel died while running cell %s", index)
            cell.setdefault("outputs", []).append(
                _error_output(
                    "KernelDied",
                    "内核在执行此单元时退出（例如 os._exit、段错误或超出内存限制）；之后的单元都不会执行"
                    " (the kernel died while running this cell)",
                )
            )
            return cell, resources

    @staticmethod
    def _size(out: NotebookNode) -> int:
        if out.get("output_type") == "stream":
            return len(out.get("text", ""))
        return len(json.dumps(out.get("data", {}), default=str))

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is None or out.get("output_type") == "error":
            return out  # errors decide the grade: never dropped
        used = self._output_bytes.get(cell_index, 0)
        size = self._size(out)
        kinds = self._output_kinds.setdefault(cell_index, set())
        kind = (out.get("output_type"), out.get("name"))
        if used + size <= self.max_output_bytes:
            self._output_bytes[cell_index] = used + size
            kinds.add(kind)
            return out
        # Over the cap. Keep the first output of each kind, shortened, so that what nbgrader grades from
        # the outputs (an error, any stderr, the first execute_result) is exactly as without the cap.
        if outs and outs[-1] is out:
            outs.pop()
        if kind not in kinds:
            kinds.add(kind)
            if out.get("output_type") == "stream":
                out["text"] = out["text"][:1000]
            outs.append(out)
        if cell_index not in self._truncated:
            self._truncated.add(cell_index)
            outs.append(
                NotebookNode(
                    output_type="stream",
                    name="stdout",
                    text=(
                        f"\n[评分器] 此单元的输出超过 {self.max_output_bytes} 字节，其余输出已丢弃"
                        f"（output over {self.max_output_bytes} bytes dropped by the grader）\n"
                    ),
                )
            )
        return None


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback: drop hidden-test regions and shorten those cells' tracebacks to their last line."""

    begin = Unicode(HIDDEN_BEGIN).tag(config=True)
    end = Unicode(HIDDEN_END).tag(config=True)

    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if RESTORE_TAG not in c.get("metadata", {}).get("tags", [])]
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or meta.get("solution"):
            return cell, resources
        text, hid = strip_hidden(cell.source, note=None, begin=self.begin, end=self.end)
        if not hid:
            return cell, resources
        cell.source = text.rstrip() + "\n# （隐藏测试不在反馈中显示 / hidden tests are not shown）"
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', '')}: {out.get('evalue', '')}"]
        return cell, resources


# ----------------------------------------------------------------------------- feedback pages
NO_ALT = "No description has been provided for this image"  # nbconvert's text, word for word
_VERBATIM = re.compile(r"<!--.*?-->|<(script|style|textarea)\b.*?</\1\s*>", re.S | re.I)
_IMG_WITHOUT_ALT = re.compile(r"<img\b(?![^>]*\salt\s*=)", re.I)


_CHARREF = re.compile(r"&#(?:(\d+)|[xX]([0-9a-fA-F]+));")


def _outside_verbatim(html: str, change) -> str:
    """``change`` applied to the page outside comments, scripts, styles and text areas (where markup is text)."""
    out, last = [], 0
    for match in _VERBATIM.finditer(html):
        out += [change(html[last : match.start()]), match.group(0)]
        last = match.end()
    return "".join(out + [change(html[last:])])


def _literal(match: re.Match) -> str:
    code = int(match.group(1)) if match.group(1) else int(match.group(2), 16)
    if code < 128 or 0xD800 <= code < 0xE000 or code > 0x10FFFF:  # ASCII may be markup: keep the reference
        return match.group(0)
    return chr(code)


def add_missing_alt(html: str) -> tuple[str, int]:
    """Give every ``<img>`` without an ``alt`` attribute nbconvert's alternative text, and write numeric character
    references of non-ASCII characters as the characters (nbconvert's heading anchors escape them; its
    BeautifulSoup pass wrote them back), both outside comments, scripts, styles and text areas. Returns the page
    and how many images had no alternative text."""
    count = 0

    def change(text: str) -> str:
        nonlocal count
        text, n = _IMG_WITHOUT_ALT.subn(f'<img alt="{NO_ALT}"', text)
        count += n
        return _CHARREF.sub(_literal, text)

    return _outside_verbatim(html, change), count


# ----------------------------------------------------------------------------- formulas without the network
# nbgrader's feedback template loads MathJax 2.7.7 from a CDN (its `mathjax()` macro ignores mathjax_url): offline,
# formulas showed as raw LaTeX. The feedback pages instead carry the formulas as MathML, converted here by
# latex2mathml (pure Python) when the page is written; browsers draw MathML themselves (Chromium >= 109, Firefox,
# Safari), so a page needs neither the network nor a script. The CDN script block is left out of the page.
_MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
TEX_FALLBACK_CLASS = "tex-source"  # a formula latex2mathml could not convert: shown as its TeX source


def tex_to_mathml(tex: str, display: bool) -> str:
    """``tex`` as a MathML element (``display="block"`` for display maths); TeX latex2mathml cannot convert is
    shown as its escaped source in ``<code class="tex-source">``."""
    import html

    from latex2mathml.converter import convert

    try:
        return convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # latex2mathml raises its own exceptions (and IndexError, KeyError) for what it lacks
        return f'<code class="{TEX_FALLBACK_CLASS}">{html.escape(tex)}</code>'


def _mathml_renderer_class():
    from nbconvert.filters.markdown_mistune import IPythonRenderer

    class MathMLRenderer(IPythonRenderer):
        """nbconvert's Markdown renderer with the formulas as MathML instead of TeX left for MathJax."""

        def block_math(self, body: str) -> str:
            return tex_to_mathml(body, display=True)

        def inline_math(self, body: str) -> str:
            return tex_to_mathml(body, display=False)

        def latex_environment(self, name: str, body: str) -> str:
            return tex_to_mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

    return MathMLRenderer


# Rendered cell sources, shared by every page this process writes: the learners of a class share most cells (the
# released text and code), so each is highlighted (pygments: most of a page's time) or rendered from Markdown once.
_RENDERED: dict[tuple, str] = {}
_RENDERED_MAX = 32 * 2**20  # characters of source and output kept (about 64-128 MiB); beyond it, rendered afresh
_rendered_size = 0


def _memo(key: tuple, render) -> str:
    global _rendered_size
    text = _RENDERED.get(key)
    if text is None:
        text = render()
        size = len(text) + sum(len(part) for part in key if isinstance(part, str))
        if _rendered_size + size <= _RENDERED_MAX:
            _RENDERED[key] = text
            _rendered_size += size
    return text


def clear_rendered() -> None:
    """Forget every memoised cell (tests; a long-lived process that wants its memory back)."""
    global _rendered_size
    _RENDERED.clear()
    _rendered_size = 0


class _CachedHighlight:
    """nbconvert's ``highlight_code`` filter (Highlight2HTML) with its output memoised: the output depends only
    on the source, the language, the lexer and formatter options and the cell's ``magics_language``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.options = (  # what the output depends on besides the cell: fixed for this filter
            getattr(inner, "pygments_lexer", None),
            repr(sorted(getattr(inner, "extra_formatter_options", {}).items())),
        )

    def __call__(self, source, language=None, metadata=None):
        magics = (metadata or {}).get("magics_language")
        return _memo(("code", *self.options, source, language, magics), lambda: self.inner(source, language, metadata))


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter for the feedback pages, without its BeautifulSoup pass.

    ``HTMLExporter.from_notebook_node`` renders the template, then parses and re-serialises the whole page with
    BeautifulSoup to give images without ``alt`` a text and to make the lab template's cells focusable: on the
    course's feedback pages (nbgrader's ``feedback`` template, no lab cells) that pass was 57 % of
    `make feedback`'s time. Here the same alternative text is added with :func:`add_missing_alt`; the page is the
    template's output otherwise. ``tests/test_autograde_feedback.py`` compares both exporters on a graded notebook.

    Two more differences: Markdown formulas are written as MathML (:func:`tex_to_mathml`) and the MathJax script
    from a CDN is left out, so a page shows its formulas offline; and hidden-test regions still in a test cell
    (a notebook autograded outside the pipeline, a configuration without :class:`HideHiddenTests`) are dropped
    here too, so no way of writing feedback shows hidden-test source."""

    @pass_context
    def markdown2html(self, context, source):
        cell = context.get("cell", {})
        attachments = cell.get("attachments", {})
        path = context.get("resources", {}).get("metadata", {}).get("path", "")
        if attachments:  # (rare) rendered afresh: the key would have to hold the attachments
            return self._render_markdown(source, attachments, path)
        key = (  # the folder matters only where images are embedded from it
            "markdown",
            source,
            path if self.embed_images else None,
            self.embed_images,
            self.anchor_link_text,
            self.exclude_anchor_links,
            repr(sorted(self.lexer_options.items())),
        )
        return _memo(key, lambda: self._render_markdown(source, attachments, path))

    def _render_markdown(self, source, attachments, path):
        from nbconvert.filters.markdown_mistune import MarkdownWithMath

        renderer = _mathml_renderer_class()(
            escape=False,
            attachments=attachments,
            embed_images=self.embed_images,
            path=path,
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options,
        )
        return MarkdownWithMath(renderer=renderer).render(source)

    def from_notebook_node(self, nb, resources=None, **kw):
        from nbconvert.filters.highlight import Highlight2HTML
        from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

        # the filters HTMLExporter.from_notebook_node registers before it renders (nbconvert 7)
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        if not isinstance(highlight_code, _CachedHighlight):
            highlight_code = _CachedHighlight(highlight_code)
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        nb = copy.deepcopy(nb)
        HideHiddenTests().preprocess(nb, resources)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        html = _MATHJAX_BLOCK.sub("", html, count=1)
        html, missing = add_missing_alt(html)
        if missing:
            self.log.warning("Alternative text is missing on %s image(s).", missing)
        return html, resources
