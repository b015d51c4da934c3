"""What a page the course writes may carry of a learner's notebook: nothing that runs.

A learner controls every byte of their notebook: Markdown cells (raw HTML passes through Markdown), raw cells, every
output (``text/html``, ``application/javascript``, widgets, SVG, image metadata) and cell metadata. The pages made
from it - the feedback pages (:mod:`.feedback_pages`), the formgrader's view of a submission
(:mod:`.formgrader_guard`) - keep text, tables, formulas (MathML) and raster images, and drop the rest:

- :func:`clean_html`: an allow-list HTML sanitiser (nh3, the Rust ``ammonia`` crate): HTML and MathML elements
  that display something and attributes that cannot run or load anything; ``script``/``style`` removed with their
  content; links only to ``http(s)``, ``mailto`` or a place in the page; an image only from a ``data:`` URI of a
  raster type (anything else - a remote badge, a tracking pixel, an SVG - becomes its alternative text);
  classes only those of nbconvert's and pygments' markup (no page layout classes), inline style only for
  alignment and colour; every ``id`` (and every link to one) prefixed, so that no element of the learner's takes the
  place of one the page's own markup or scripts look up (the formgrader finds a grade cell by its id).
- :func:`sanitise_notebook`: the outputs a page may show (text, HTML, Markdown, LaTeX, PNG/JPEG); JavaScript,
  widgets, SVG and every other type are dropped (an output left with nothing says so); image metadata reduced to
  numeric size; the metadata nbconvert would turn into an ``<iframe>`` or a file link removed.
- :data:`CONTENT_SECURITY_POLICY`: pages that need no script of their own (feedback, the class report) carry it in
  a ``<meta>`` tag: the browser runs no script even if something got through, and loads nothing from anywhere.
"""

from __future__ import annotations

import html
import re

# default-src 'none': nothing is fetched (no script, frame, font, connection, form target) except what is listed
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'none'; object-src 'none'; frame-src 'none'; base-uri 'none'; "
    "form-action 'none'; style-src 'unsafe-inline'; img-src data:"
)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">'

# MathML elements that draw (MathML Core and what latex2mathml writes); not annotation-xml (it may hold HTML)
# nor maction (interactive)
MATHML_TAGS = frozenset(
    "math mrow mi mn mo ms mtext mspace msup msub msubsup mfrac msqrt mroot mstyle merror mpadded mphantom "
    "mfenced menclose munder mover munderover mtable mtr mtd mlabeledtr mmultiscripts mprescripts none "
    "semantics annotation".split()
)
MATHML_ATTRIBUTES = frozenset(
    "display xmlns mathvariant stretchy fence separator separators accent accentunder lspace rspace minsize "
    "maxsize movablelimits symmetric largeop form columnalign columnspacing columnlines rowalign rowspacing "
    "rowlines frame framespacing displaystyle scriptlevel linethickness width height depth voffset notation "
    "align open close encoding mathsize mathcolor mathbackground".split()
)
HTML_TAGS = frozenset(
    "a abbr b bdi bdo blockquote br caption cite code col colgroup dd del details dfn div dl dt em figcaption "
    "figure h1 h2 h3 h4 h5 h6 hr i img ins kbd li mark ol p pre q rp rt ruby s samp small span strike strong "
    "sub summary sup table tbody td tfoot th thead time tr tt u ul var wbr".split()
)
_ATTRIBUTES = {
    "*": {"class", "id", "title", "lang", "dir", "style"},
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align"},
    "th": {"colspan", "rowspan", "align", "scope"},
    "col": {"span"},
    "colgroup": {"span"},
    "ol": {"start"},
    "table": {"border"},
    **{tag: set(MATHML_ATTRIBUTES) for tag in MATHML_TAGS},
}
STYLE_PROPERTIES = frozenset({"text-align", "vertical-align", "color", "background-color", "font-weight", "font-style"})
RASTER_DATA_URI = re.compile(r"data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z", re.I)
_LINK = re.compile(r"(?:https?:|mailto:)", re.I)
OFFLINE_IMAGE_CLASS = "offline-image"  # an image the page does not load, shown as its alternative text
TEX_FALLBACK_CLASS = "tex-source"  # a formula latex2mathml could not convert: shown as its TeX source
# nbconvert's and pygments' classes (short token names: k, nf, s1, mi, hll, ...); no layout class of the page's CSS
_CLASS = re.compile(
    r"[a-z]{1,3}[0-9]?|highlight|hl-[\w-]+|anchor-link|dataframe|"
    + "|".join(re.escape(name) for name in (OFFLINE_IMAGE_CLASS, TEX_FALLBACK_CLASS))
)
_IMG_WITHOUT_SRC = re.compile(r"<img\b(?![^>]*\ssrc=)([^>]*)>")
_ALT = re.compile(r'\salt="([^"]*)"')


ID_PREFIX = "user-content-"  # every id in learner content, and every link to one: none can stand for the page's own


def _attribute(tag: str, name: str, value: str) -> str | None:
    if name == "src":
        return value if RASTER_DATA_URI.match(value) else None
    if name == "href":
        value = value.strip()
        if value.startswith("#"):
            return f"#{ID_PREFIX}{value[1:]}"
        return value if _LINK.match(value) else None
    if name == "id":
        return ID_PREFIX + value
    if name == "class":
        kept = [token for token in value.split() if _CLASS.fullmatch(token)]
        return " ".join(kept) or None
    return value


def _image_as_text(match: re.Match) -> str:
    alt = _ALT.search(match.group(1))
    text = html.unescape(alt.group(1)) if alt else ""
    return f'<span class="{OFFLINE_IMAGE_CLASS}">{html.escape(text or "[image]")}</span>'


def clean_html(fragment) -> str:
    """``fragment`` (HTML, or bytes of it) with only the allow-listed elements and attributes (module docstring);
    an image it cannot show from the page itself becomes its alternative text."""
    import nh3

    text = fragment.decode("utf-8", "replace") if isinstance(fragment, bytes) else str(fragment)
    cleaned = nh3.clean(
        text,
        tags=set(HTML_TAGS | MATHML_TAGS),
        clean_content_tags={"script", "style"},
        attributes={tag: set(names) for tag, names in _ATTRIBUTES.items()},
        attribute_filter=_attribute,
        url_schemes={"http", "https", "mailto", "data"},
        filter_style_properties=set(STYLE_PROPERTIES),
        strip_comments=True,
    )
    return _IMG_WITHOUT_SRC.sub(_image_as_text, cleaned)


# ----------------------------------------------------------------------------- outputs
SHOWN_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")
_SAFE_ID = re.compile(r"[\w.-]+\Z")


def _not_shown(types) -> str:
    listed = ", ".join(sorted(types)) or "?"
    return f"（反馈页不显示这类输出：{listed}）(output not shown in this page: {listed})"


def _sanitise_output(output) -> None:
    kind = output.get("output_type")
    if kind not in ("display_data", "execute_result"):
        return
    data = output.get("data", {})
    dropped = [key for key in data if key not in SHOWN_TYPES]
    for key in dropped:
        del data[key]
    for key in ("image/png", "image/jpeg"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and _BASE64.match(value)):
            del data[key]
            dropped.append(key)
    for key, value in list(data.items()):
        if isinstance(value, list):  # nbformat allows a list of lines
            data[key] = "".join(str(v) for v in value)
    if not data:
        data["text/plain"] = _not_shown(dropped)
    size = {}
    for key in ("image/png", "image/jpeg"):
        meta = output.get("metadata", {}).get(key, {})
        size[key] = {
            k: meta[k] for k in ("width", "height") if isinstance(meta, dict) and type(meta.get(k)) in (int, float)
        }
    output["metadata"] = {key: value for key, value in size.items() if value and key in data}


def sanitise_notebook(nb) -> None:
    """Reduce ``nb`` (a copy about to become a page) in place to what a page may show: outputs of the types in
    :data:`SHOWN_TYPES` (the HTML among them still goes through :func:`clean_html` when the page is rendered),
    no widget state, no grade id that is not a plain name (nbgrader's templates write it into markup unescaped)."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        grader = cell.get("metadata", {}).get("nbgrader")
        if isinstance(grader, dict) and "grade_id" in grader and not _SAFE_ID.match(str(grader["grade_id"])):
            grader["grade_id"] = re.sub(r"[^\w.-]", "_", str(grader["grade_id"]))
        for output in cell.get("outputs", []):
            _sanitise_output(output)
