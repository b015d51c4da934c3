"""Feedback pages: hidden tests never shown (not even from a notebook that still holds them), formulas written as
MathML (no network), and the exporter that renders them as nbconvert does without its BeautifulSoup pass. The rest of
the pipeline: tests/test_autograde.py."""

from __future__ import annotations

import re

import nbformat
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
    """FeedbackExporter (feedback pages without nbconvert's BeautifulSoup pass) renders what HTMLExporter renders:
    the same text, the same tags, the same alternative texts; `<img` inside a script or a comment stays as it was."""
    import base64

    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from autograde.grpo_grader.feedback_pages import _MATHJAX_BLOCK, NO_ALT, FeedbackExporter, add_missing_alt

    png = base64.b64encode(bytes.fromhex("89504e470d0a1a0a")).decode()
    nb = nbformat.v4.new_notebook(metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "### 自动评分说明（note）\n\n![](data:image/png;base64,AAAA) and ![a badge](x.svg) "
            "<img src='y.png'> &#60;b&#62; &#33258;"
        ),
        nbformat.v4.new_code_cell(
            "plot()",
            outputs=[
                nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "text/html": "<div><img src='z.png' alt='kept'>"
                        "<script>var s = '<img src=q>';</script><!-- <img src=c> --></div>"
                    },
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
    assert [t.name for t in a.find_all()] == [t.name for t in b.find_all()]
    alts = [i.get("alt") for i in b.find_all("img")]
    assert alts == [i.get("alt") for i in a.find_all("img")] and NO_ALT in alts and "kept" in alts and None not in alts
    assert "var s = '<img src=q>';" in ours and "<!-- <img src=c> -->" in ours
    assert "自动评分说明（note）" in ours  # nbconvert's heading anchors write non-ASCII as references: written back
    assert add_missing_alt('<IMG src="a"><img alt="" src="b">') == (
        f'<img alt="{NO_ALT}" src="a"><img alt="" src="b">',
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
    assert preprocessors.TEX_FALLBACK_CLASS in preprocessors.tex_to_mathml(r"\frac{1}{", display=False)
