"""Feedback pages: what ``make feedback`` (nbgrader's ``GenerateFeedback``, configured in
``autograde/nbgrader_config.py``) runs on a graded notebook before a learner sees it.

- ``HideHiddenTests``: drops the ``grader-restore`` cells, removes the hidden-test region from test cells and shortens
  the tracebacks of those cells to their last line (a traceback quotes the failing source line), so feedback sent to
  learners shows the messages of failed tests but not the hidden tests themselves.
- ``SafeHTMLExporter``: nbconvert's HTML exporter that carries nothing of a learner's that can run (:mod:`.sanitise`),
  without its BeautifulSoup pass over the whole page, formulas as MathML drawn offline, images given nbconvert's
  alternative text; the formgrader's view of a submission uses it (:mod:`.formgrader_guard`).
- ``FeedbackExporter``: the same, for the feedback pages: hidden tests dropped and a Content-Security-Policy that
  forbids every script and every request.
"""

from __future__ import annotations

import copy
import re

from jinja2 import pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode, default

from .preprocessors import HIDDEN_BEGIN, HIDDEN_END, RESTORE_TAG, strip_hidden
from .sanitise import CSP_META, TEX_FALLBACK_CLASS, clean_html, sanitise_notebook


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
_TEXT_COMMAND = re.compile(r"\\(?:text(?:rm|it|bf|sf|tt|normal)?|mbox)\s*\{")
_TEXT_ESCAPE = re.compile(r"\\([_%&#$])")
_ESCAPED_REFERENCE = re.compile(r"&amp;(#x?[0-9A-Fa-f]+;)")


def text_mode_escapes(tex: str) -> str:
    """``tex`` with TeX's text-mode escapes (``\\_ \\% \\& \\# \\$``) inside ``\\text{...}`` (and ``\\textrm``,
    ``\\mbox``, ...) written as the characters they stand for: latex2mathml copies a text argument verbatim, so
    ``\\text{per\\_token\\_loss}`` came out as "per\\_token\\_loss" (LaTeX and JupyterLab's MathJax print
    "per_token_loss")."""
    out, last = [], 0
    for match in _TEXT_COMMAND.finditer(tex):
        if match.start() < last:  # nested in a text argument already rewritten
            continue
        depth, end = 1, match.end()
        while end < len(tex) and depth:
            if tex[end] == "\\":
                end += 2
                continue
            depth += {"{": 1, "}": -1}.get(tex[end], 0)
            end += 1
        out += [tex[last : match.end()], _TEXT_ESCAPE.sub(r"\1", tex[match.end() : end])]
        last = end
    return "".join(out + [tex[last:]])


def tex_to_mathml(tex: str, display: bool) -> str:
    """``tex`` as a MathML element (``display="block"`` for display maths), its text escaped as HTML; TeX
    latex2mathml cannot convert is shown as its escaped source in ``<code class="tex-source">``.

    (latex2mathml's own ``convert`` unescapes its whole output, so ``\\text{a<b}`` came out as markup; here the
    element is serialised as XML, and only the numeric character references latex2mathml writes for operators are
    written back as references.)"""
    import html
    from xml.etree.ElementTree import tostring

    from latex2mathml.converter import convert_to_element

    try:
        element = convert_to_element(text_mode_escapes(tex.strip()), display="block" if display else "inline")
    except Exception:  # latex2mathml raises its own exceptions (and IndexError, KeyError) for what it lacks
        return f'<code class="{TEX_FALLBACK_CLASS}">{html.escape(tex)}</code>'
    return _ESCAPED_REFERENCE.sub(r"&\1", tostring(element, encoding="unicode"))


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


class SafeHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter that carries nothing of a learner's that can run, without its BeautifulSoup pass.

    - Learner content is sanitised (:mod:`.sanitise`): the notebook copy about to be rendered loses every output
      type but text, HTML, Markdown, LaTeX, PNG and JPEG (:func:`sanitise_notebook`); every piece of HTML the
      template writes from it - rendered Markdown (nbgrader's templates render Markdown cells without nbconvert's
      ``clean_html``, so :meth:`markdown2html` cleans what it renders), ``text/html`` outputs, raw cells - goes
      through the allow-list sanitiser :func:`clean_html` (nbconvert's ``sanitize_html`` mode, with nh3 in place
      of its bleach filter, which would drop MathML).
    - ``HTMLExporter.from_notebook_node`` renders the template, then parses and re-serialises the whole page with
      BeautifulSoup to give images without ``alt`` a text and to make the lab template's cells focusable: on the
      course's feedback pages (nbgrader's ``feedback`` template, no lab cells) that pass was 57 % of
      `make feedback`'s time. Here the same alternative text is added with :func:`add_missing_alt`; the page is
      the template's output otherwise. ``tests/test_autograde_feedback.py`` compares both exporters.
    - Markdown formulas are written as MathML (:func:`tex_to_mathml`) and the MathJax script from a CDN is left
      out, so a page shows its formulas offline."""

    mathjax_replacement = ""  # what stands where the template loads MathJax from a CDN (the formgrader's: a stub)

    @default("sanitize_html")
    def _sanitize_default(self):
        return True

    @pass_context
    def markdown2html(self, context, source):
        cell = context.get("cell", {})
        attachments = cell.get("attachments", {})
        path = context.get("resources", {}).get("metadata", {}).get("path", "")
        if attachments:  # (rare) rendered afresh: the key would have to hold the attachments
            return clean_html(self._render_markdown(source, attachments, path))
        key = (  # the folder matters only where images are embedded from it
            "markdown",
            source,
            path if self.embed_images else None,
            self.embed_images,
            self.anchor_link_text,
            self.exclude_anchor_links,
            repr(sorted(self.lexer_options.items())),
        )
        return _memo(key, lambda: clean_html(self._render_markdown(source, attachments, path)))

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

    def prepare(self, nb, resources) -> None:
        """Change the notebook copy about to be rendered (after it is sanitised); nothing here."""

    def finish(self, html: str) -> str:
        """The rendered page, last step; unchanged here."""
        return html

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
        self.register_filter("clean_html", clean_html)
        nb = copy.deepcopy(nb)
        self.prepare(nb, resources)
        sanitise_notebook(nb)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        html = _MATHJAX_BLOCK.sub(lambda _: self.mathjax_replacement, html, count=1)
        html, missing = add_missing_alt(html)
        if missing:
            self.log.warning("Alternative text is missing on %s image(s).", missing)
        return self.finish(html), resources


_HEAD = re.compile(r"<head\b[^>]*>", re.I)


def with_csp(page: str) -> str:
    """``page`` with the course's Content-Security-Policy (no script, no request: :data:`.sanitise.CSP_META`) as the
    first element of its ``<head>``, where it governs everything after it."""
    head = _HEAD.search(page)
    if head is None:
        raise ValueError("the page has no <head> to carry its Content-Security-Policy")
    return f"{page[: head.end()]}{CSP_META}{page[head.end() :]}"


class FeedbackExporter(SafeHTMLExporter):
    """:class:`SafeHTMLExporter` for the feedback pages: hidden-test regions still in a test cell (a notebook
    autograded outside the pipeline, a configuration without :class:`HideHiddenTests`) are dropped here too, so no
    way of writing feedback shows hidden-test source; and the page carries a Content-Security-Policy that forbids
    every script and every request (:func:`with_csp`)."""

    def prepare(self, nb, resources) -> None:
        HideHiddenTests().preprocess(nb, resources)

    def finish(self, html: str) -> str:
        return with_csp(html)
