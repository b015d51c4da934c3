"""A learner's notebook that tries every way a page made from it could run script or fetch something, for the
tests of the pages the course writes (feedback pages, the formgrader's view of a submission, the class report).

Each payload is named: where it runs it loads ``HIT + "ran:<name>"`` (and appends `` ran:<name>`` to the title), so
a browser shows which ran (tests/test_browser.py), and the text ``ran:<name>`` standing in an active place of the
HTML (a script, an event handler, a URL, an iframe's srcdoc, ...) shows which would (:func:`active_marks`).
"""

from __future__ import annotations

import base64
import re
import struct
import zlib

MARK = "ran:"
HIT = "http://127.0.0.1:9/"  # nothing listens; the browser test records and aborts every request
ACTIVE_TAGS = ("script", "iframe", "object", "embed", "form", "link", "svg", "meta", "base", "style")


def run(name: str) -> str:
    """JavaScript that, if it runs, marks the page and asks the network for HIT + ran:<name>."""
    return f"document.title += ' {MARK}{name}'; new Image().src = '{HIT}{MARK}{name}'; void 0"


def png(width: int = 12, height: int = 8) -> str:
    """A real PNG (red), base64: an image a page must still draw."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(data).decode()


# what nbconvert's own page runs (or would) of attack_notebook: the checks can fail
RUN_BY_NBCONVERT = {"markdown-script", "onerror", "javascript-link", "javascript-output", "html-script", "srcdoc"}
RUN_BY_NBCONVERT |= {"isolated", "refresh", "beacon", "object", "embed", "stylesheet", "import", "mouseover"}
RUN_BY_NBCONVERT |= {"filename"}
ACTIVE_IN_NBCONVERT = RUN_BY_NBCONVERT | {"form", "data-link", "base", "markdown-output", "annotation"}


def attack_notebook():
    """The notebook: every payload, plus what a page must still show (formulas, a PNG, the Colab badge's text, a
    learner's ``<script>`` written as text)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_output, new_raw_cell

    html_output = (
        f"<script>{run('html-script')}</script>"
        f'<iframe srcdoc="<script>{run("srcdoc")}</script>"></iframe>'
        f'<meta http-equiv="refresh" content="1;url={HIT}{MARK}refresh">'
        f"<img src='{HIT}{MARK}beacon' alt='beacon'>"
        f'<object data="{HIT}{MARK}object"></object><embed src="{HIT}{MARK}embed">'
        f'<link rel="stylesheet" href="{HIT}{MARK}stylesheet"><style>@import url("{HIT}{MARK}import");</style>'
        f'<form action="{HIT}{MARK}form"><button>send</button></form>'
        f'<a href="data:text/html,{MARK}data-link">d</a><base href="{HIT}{MARK}base">'
        f'<div onmouseover="{run("mouseover")}" id="hover-me">hover</div>'
        f'<math><annotation-xml encoding="text/html"><img src=x onerror="{run("annotation")}"></annotation-xml></math>'
    )
    svg = f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"{run('svg-onload')}\"><script>{run('svg')}</script></svg>"
    nb = nbformat.v4.new_notebook(
        metadata={
            "language_info": {"name": "python", "pygments_lexer": "ipython3"},
            "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}},
        }
    )
    nb.cells = [
        # (defines jQuery's $ for nbconvert's own page, where display(Javascript(...)) then runs)
        new_markdown_cell("<script>window.$ = function () { return null; };</script>"),
        new_markdown_cell(
            "## 公式与图片\n\n"
            r"$\hat{A}_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r)}$ 与 "
            r"$\text{per\_token\_loss}_{i,t}$"
            "\n\n$$\\mathcal{L} = -\\frac{1}{G}\\sum_{i=1}^{G} \\min(\\rho_i \\hat{A}_i, \\text{clip})$$\n\n"
            f"<script>{run('markdown-script')}</script>\n\n"
            f'<img src="x" onerror="{run("onerror")}">\n\n'
            f'<a id="jslink" href="javascript:{run("javascript-link")}">click</a>\n\n'
            f'$\\text{{<img src=x onerror="{run("mathml-text")}">}}$\n\n'
            "[![在 Colab 中打开](https://colab.research.google.com/assets/colab-badge.svg)]"
            "(https://colab.research.google.com/x)\n\n"
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
            "学员的文字 <b>&lt;script&gt;</b> 显示为文字 [网站](https://example.org)"
        ),
        new_raw_cell(f"<script>{run('raw-cell')}</script>", metadata={"raw_mimetype": "text/html"}),
        new_code_cell(
            "show()",
            outputs=[
                new_output(
                    "display_data", data={"application/javascript": run("javascript-output"), "text/plain": "<JS>"}
                ),
                new_output("display_data", data={"text/html": html_output}),
                new_output("display_data", data={"text/markdown": f"<script>{run('markdown-output')}</script>"}),
                new_output("display_data", data={"image/svg+xml": svg}),
                new_output(
                    "display_data",
                    data={"text/html": f"<script>{run('isolated')}</script>"},
                    metadata={"text/html": {"isolated": True}},
                ),
                new_output(
                    "display_data",
                    data={"application/vnd.jupyter.widget-view+json": {"model_id": "m", "version_major": 2}},
                ),
                new_output(
                    "display_data",
                    data={"image/png": png(), "text/plain": "<Figure>"},
                    metadata={"filenames": {"image/png": f"{HIT}{MARK}filename"}},
                ),
            ],
        ),
    ]
    return nb


def active_marks(page: str) -> set[str]:
    """The payload names that stand where a browser would run or fetch them: in a script, style, iframe, object,
    embed, form, link, svg, meta or base element, or in any attribute (event handlers, URLs, srcdoc; a base64
    ``data:`` URI decoded)."""
    from bs4 import BeautifulSoup

    texts = []
    for tag in BeautifulSoup(page, "html.parser").find_all(True):
        values = [v if isinstance(v, str) else " ".join(v) for v in tag.attrs.values()]
        texts += values + [
            base64.b64decode(v.split(";base64,", 1)[1]).decode("latin-1") for v in values if ";base64," in v
        ]
        if tag.name in ACTIVE_TAGS:
            texts.append(str(tag))
    return {name for text in texts for name in re.findall(rf"{MARK}([\w.-]+)", text)}


def ran_marks(view: dict) -> set[str]:
    """The payload names a page opened in the browser ran: from its title and its requests (offline_pages.mjs)."""
    marks = set(re.findall(rf"{MARK}([\w.-]+)", view["title"]))
    return marks | {name for url in view["requests"] for name in re.findall(rf"{MARK}([\w.-]+)", url)}
