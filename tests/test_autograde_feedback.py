"""Feedback pages: hidden tests never shown (not even from a notebook that still holds them), formulas written as
MathML (no network), and the exporter that renders them as nbconvert does without its BeautifulSoup pass. The rest of
the pipeline: tests/test_autograde.py."""

from __future__ import annotations

import re

import nbformat
import pytest
from autograde_helpers import ROOT  # tests/autograde_helpers.py
from nbformat.notebooknode import NotebookNode

from autograde.grpo_grader.feedback_pages import HideHiddenTests


def test_feedback_hides_hidden_tests():
    cell = nbformat.v4.new_code_cell(
        '"""检查"""\nassert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(5) == 6  # secret\n### END HIDDEN TESTS\n',
        metadata={"nbgrader": {"grade": True, "grade_id": "t", "locked": True, "solution": False, "points": 1}},
    )
    cell.outputs = [
        NotebookNode(
            output_type="error",
            ename="AssertionError",
            evalue="不符",
            traceback=["---> 4 assert f(5) == 6  # secret", "AssertionError: 不符"],
        )
    ]
    restore = nbformat.v4.new_code_cell("restore", metadata={"tags": ["grader-restore"]})
    nb = nbformat.v4.new_notebook(cells=[restore, cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert len(nb.cells) == 1
    assert "secret" not in nb.cells[0].source and "assert f(1) == 2" in nb.cells[0].source
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: 不符"]


def test_feedback_exporter_matches_nbconvert_without_its_soup_pass():
    """On content with nothing to remove (no script, images from the page itself), FeedbackExporter (no
    BeautifulSoup pass, learner content sanitised) renders what nbconvert's HTMLExporter renders: the same text,
    the same tags, the same alternative texts."""
    import base64

    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from autograde.grpo_grader.feedback_pages import _MATHJAX_BLOCK, NO_ALT, FeedbackExporter, add_missing_alt

    png = base64.b64encode(bytes.fromhex("89504e470d0a1a0a")).decode()
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            f"### 自动评分说明（note）\n\n![](data:image/png;base64,{png}) and ![a badge](data:image/png;base64,{png}) "
            f"<img src='data:image/png;base64,{png}'> &#60;b&#62; &#33258; [link](https://example.org) "
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nx = 1\n```"
        ),
        nbformat.v4.new_code_cell(
            "plot()",
            outputs=[
                nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
                nbformat.v4.new_output(
                    "display_data",
                    data={"text/html": f"<div><img src='data:image/png;base64,{png}' alt='kept'><b>表</b></div>"},
                ),
                nbformat.v4.new_output("stream", name="stdout", text="<img src=not-a-tag>\n"),
            ],
        ),
    ]
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(nb)
    assert "MathJax.Hub" in theirs and "MathJax.Hub" not in ours  # feedback pages load no MathJax (MathML)
    theirs = _MATHJAX_BLOCK.sub("", theirs, count=1)
    a, b = BeautifulSoup(theirs, "html.parser"), BeautifulSoup(ours, "html.parser")
    assert a.get_text() == b.get_text()
    assert [t.name for t in a.find_all()] == [t.name for t in b.find_all() if not t.get("http-equiv")]  # (CSP)
    alts = [i.get("alt") for i in b.find_all("img")]
    assert alts == [i.get("alt") for i in a.find_all("img")] and NO_ALT in alts and "kept" in alts and None not in alts
    assert "自动评分说明（note）" in ours  # nbconvert's heading anchors write non-ASCII as references: written back
    assert add_missing_alt('<IMG src="a"><img alt="" src="b"><script>"<img src=q>"</script>') == (
        f'<img alt="{NO_ALT}" src="a"><img alt="" src="b"><script>"<img src=q>"</script>',
        1,
    )


def test_feedback_pages_reuse_rendered_cells_only_for_the_same_source():
    """The exporter memoises highlighted code and rendered Markdown across pages (a class shares most cells): a
    page renders as it does without the memo, and a changed source or language renders afresh."""
    import autograde.grpo_grader.feedback_pages as pre

    def page(code: str, text: str, lexer: str = "ipython3") -> str:
        nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": lexer}})
        nb.cells = [nbformat.v4.new_markdown_cell(text, id="m"), nbformat.v4.new_code_cell(code, id="c")]
        return pre.FeedbackExporter(template_name="classic").from_notebook_node(nb)[0]

    pre.clear_rendered()
    first = page("x = compute(1)  # 一", "**粗体** $a^2$")
    assert pre._RENDERED, "nothing was memoised"
    assert page("x = compute(1)  # 一", "**粗体** $a^2$") == first
    other = page("y = compute(2)  # 二", "*斜体* $b^2$")
    assert "二" in other and "斜体" in other and "粗体" not in other and "一" not in other
    assert page("x = compute(1)  # 一", "**粗体** $a^2$", lexer="text") != first  # another lexer: no highlight spans
    kept, pre._RENDERED_MAX = pre._RENDERED_MAX, 0
    try:
        pre.clear_rendered()
        assert page("x = compute(1)  # 一", "**粗体** $a^2$") == first  # the same page without the memo
    finally:
        pre._RENDERED_MAX = kept


def test_feedback_pages_carry_formulas_as_mathml_and_never_hidden_tests():
    """Feedback pages need no network for maths (MathML written in the page, no MathJax from a CDN) and never show
    hidden-test source, even for a notebook that still holds it (plain `nbgrader autograde`, another config);
    nbconvert's own exporter does both wrong on the same notebook (the check can fail)."""
    from nbconvert.exporters import HTMLExporter

    from autograde.grpo_grader.feedback_pages import HIDDEN_BEGIN, FeedbackExporter

    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    hidden = "assert reference_secret(3) == 42"
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            r"组内优势 $\hat{A}_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r)}$："
            "\n\n$$\\mathcal{L} = -\\frac{1}{G}\\sum_{i=1}^{G} \\min(\\rho_i \\hat{A}_i, \\text{clip})$$"
        ),
        nbformat.v4.new_code_cell(
            f"assert f(1) == 2\n{HIDDEN_BEGIN}\n{hidden}\n### END HIDDEN TESTS",
            metadata={
                "nbgrader": {
                    "grade": True,
                    "solution": False,
                    "grade_id": "t1",
                    "points": 1,
                    "locked": True,
                    "schema_version": 3,
                }
            },
        ),
    ]
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(nb)
    assert (
        "libs/mathjax" in theirs and "\\hat{A}_i" in theirs and "reference_secret" in theirs
    )  # what the check catches
    assert "MathJax.Hub" not in ours and "libs/mathjax" not in ours
    assert ours.count("<math") == 2 and 'display="block"' in ours and "<mfrac>" in ours and "\\hat" not in ours
    assert "reference_secret" not in ours and "BEGIN HIDDEN TESTS" not in ours and "hidden tests are not shown" in ours
    assert nb.cells[1].source.count("reference_secret") == 1  # the notebook handed in is left as it was


def test_every_formula_of_the_course_converts_to_mathml():
    """Every Markdown formula of the learner notebooks becomes MathML (none left as TeX source in a feedback page)."""
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograde.grpo_grader import feedback_pages as preprocessors

    renderer = preprocessors._mathml_renderer_class()
    pages = [
        MarkdownWithMath(renderer=renderer(escape=False)).render(cell.source)
        for path in sorted((ROOT / "notebooks").glob("*/*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "markdown"
    ]
    page = "".join(pages)
    assert page.count("<math") > 100, page.count("<math")
    left = re.findall(rf'<code class="{preprocessors.TEX_FALLBACK_CLASS}">(.*?)</code>', page)
    assert not left, left
    # no TeX left in the text of a formula (\text{per\_token\_loss} read "per\_token\_loss" before)
    backslashes = [text for _, text in re.findall(r"<(mtext|mi|mo|mn)\b[^>]*>([^<]*)</\1>", page) if "\\" in text]
    assert not backslashes, backslashes
    assert page.count("<mtext>per_token_loss</mtext>") == 3
    assert preprocessors.TEX_FALLBACK_CLASS in preprocessors.tex_to_mathml(r"\frac{1}{", display=False)


# ----------------------------------------------------------------------------- nothing of the learner's runs
@pytest.mark.filterwarnings("ignore:Your element with mimetype")  # (nbconvert's own page, on the widget)
def test_feedback_pages_carry_nothing_that_runs():
    """Every payload of page_attacks stands in an active place in nbconvert's own page (the check finds them) and
    in none in the feedback page; the page carries the Content-Security-Policy before any content, and what a
    learner may show (text, a table, formulas, a PNG, an https link) is still there. (tests/test_browser.py opens
    such a page in Chromium.)"""
    from nbconvert.exporters import HTMLExporter
    from page_attacks import ACTIVE_IN_NBCONVERT, active_marks, attack_notebook, png

    from autograde.grpo_grader.feedback_pages import FeedbackExporter
    from autograde.grpo_grader.sanitise import CSP_META

    nb = attack_notebook()
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    raw = active_marks(theirs)
    assert ACTIVE_IN_NBCONVERT <= raw, sorted(ACTIVE_IN_NBCONVERT - raw)
    ours, _ = FeedbackExporter(template_name="classic").from_notebook_node(nb)
    body = ours[ours.index("<body") :]
    assert not active_marks(body), sorted(active_marks(body))
    assert ours.count(CSP_META) == 1 and ours.index(CSP_META) < ours.index("<body")
    for kept in ("<table>", "<mfrac>", f'src="data:image/png;base64,{png()}"', 'href="https://example.org"'):
        assert kept in body, kept
    assert "output not shown in this page: application/javascript" not in body  # it had a text/plain too
    assert "output not shown in this page: image/svg+xml" in body


def test_sanitiser_keeps_the_courses_pages():
    """The course's own Markdown (every learner notebook) keeps its formulas, tables, code, text and links through
    the sanitiser: the same elements and text, except that the Colab badge (a remote image) becomes its alternative
    text."""
    import re

    from bs4 import BeautifulSoup
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograde.grpo_grader import feedback_pages
    from autograde.grpo_grader.sanitise import OFFLINE_IMAGE_CLASS, clean_html

    renderer = feedback_pages._mathml_renderer_class()
    changed, badges = [], 0
    for path in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            rendered = MarkdownWithMath(renderer=renderer(escape=False)).render(cell.source)
            cleaned = clean_html(rendered)
            before, after = BeautifulSoup(rendered, "html.parser"), BeautifulSoup(cleaned, "html.parser")
            for image in before.find_all("img"):
                image.replace_with(before.new_tag("span", string=image["alt"]))
                badges += 1
            if [t.name for t in before.find_all(True)] != [t.name for t in after.find_all(True)]:
                changed.append((path.name, cell.source[:60]))
            if before.get_text() != after.get_text():
                changed.append((path.name, cell.source[:60]))
            if "<img" in rendered:
                assert f'<span class="{OFFLINE_IMAGE_CLASS}">在 Colab 中打开</span>' in cleaned
            assert len(re.findall("<math", cleaned)) == len(re.findall("<math", rendered))
    assert not changed, changed[:5]
    assert badges == len(list((ROOT / "notebooks").glob("*/*.ipynb")))  # one badge per notebook


def test_formulas_keep_text_mode_escapes_and_escape_their_text():
    """``\\text{per\\_token\\_loss}`` reads per_token_loss (latex2mathml alone wrote the backslashes), and a text
    argument is text: latex2mathml's own convert() wrote ``\\text{<img ...>}`` as markup (what this catches)."""
    from latex2mathml.converter import convert

    from autograde.grpo_grader.feedback_pages import tex_to_mathml, text_mode_escapes

    assert "per\\_token\\_loss" in convert(r"\text{per\_token\_loss}")  # the bug, in latex2mathml
    assert "<mtext>per_token_loss</mtext>" in tex_to_mathml(r"\text{per\_token\_loss}_{i,t}", display=False)
    assert text_mode_escapes(r"\mathrm{a\_b} \text{x\%\_{y}\#} \mbox{\&}") == r"\mathrm{a\_b} \text{x%_{y}#} \mbox{&}"
    assert "<img" in convert(r"\text{<img src=x>}")  # the bug
    mathml = tex_to_mathml(r"\text{<img src=x> & a<b} + a < b", display=True)
    assert "<img" not in mathml and "&lt;img" in mathml and "&amp;" in mathml and "&#x0003C;" in mathml


def test_grading_note_shows_a_learners_message_as_text():
    """A test's message comes from the learner's code: the note writes it as literal Markdown text (no markup,
    link, formula or extra line of its own)."""
    from nbconvert.filters.markdown_mistune import MarkdownWithMath

    from autograde.grpo_grader import feedback_pages
    from autograde.grpo_grader.outcomes import NotebookResult, note_markdown

    message = "a_b <b>x</b> $y$ [l](javascript:z) &lt; *e*\n- 自动评分得分：99 / 99"
    tests = [{"grade_id": "t", "max_score": 4.0, "score": 0.0, "outcome": "failed", "message": message}]
    note = note_markdown(NotebookResult(notebook="nb", status="graded", max_score=4.0, score=0.0, tests=tests))
    page = MarkdownWithMath(renderer=feedback_pages._mathml_renderer_class()(escape=False)).render(note)
    shown = "a_b &lt;b&gt;x&lt;/b&gt; $y$ [l](javascript:z) &amp;lt; *e* - 自动评分得分：99 / 99"
    assert shown in page and page.count("<li>") == 4 and "<math" not in page and 'href="javascript' not in page, page
