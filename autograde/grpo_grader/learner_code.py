"""What the learner wrote for each graded function, and its fingerprint (``code_prints``).

The learner's code is every answer cell and every code cell the learner added (or changed) — never the released
locked cells. Each graded function is an answer cell's ``grade_id``; its *unit* is the last definition of the
names the released stub defines (wherever the learner put it: the answer cell, a cell added above or below), the
other statements of the answer cell that nothing later replaces, and every helper the learner defined that these
use (transitively; another graded function stays its own unit). Strings that decode to Python (base64, hex, zlib,
gzip, bz2, lzma, rot13, reversed) are decoded - never run - and their statements count where the string is, so
``exec`` of an encoded reference is fingerprinted as the reference; calling ``exec``/``eval``/``compile`` on a
decoded string is the review flag ``encoded-exec`` (a flag for a human, never a score change).
"""

from __future__ import annotations

import ast
import base64
import binascii
import bz2
import codecs
import copy
import hashlib
import lzma
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import nbformat

from .canonical_code import blocks
from .code_prints import canonical_tokens, fingerprint, raw_tokens, winnow

MAX_DECODED = 1 << 20  # bytes a decoded string may expand to
MIN_ENCODED = 16  # shorter strings are not tried as encoded code
MAX_UNIT_CHARS = 40_000  # a unit's text kept for the report
MAX_CELL_CHARS = 100_000  # of a learner cell's source (the rest is not reviewed)
MAX_LEARNER_CHARS = 200_000  # of all the learner's cells of a notebook (later cells are not reviewed)
MAX_DECODE_INPUT = 2 << 20  # characters of strings tried as encoded code, per notebook
DECODE_DEPTH = 3
EXEC_CALLS = frozenset({"exec", "eval", "compile"})
DECODERS = frozenset(
    "b64decode b32decode b16decode b85decode a85decode urlsafe_b64decode standard_b64decode decodebytes"
    " decodestring decompress fromhex unhexlify a2b_base64 a2b_hex a2b_uu loads chr".split()
)
ENCODED_EXEC = "encoded-exec"
# a cell that does not parse: both an exec-like call and a decoder named in it
_EXEC_TEXT = re.compile(r"\b(?:exec|eval|compile)\b")
_DECODER_TEXT = re.compile(r"b64decode|b32decode|b85decode|a85decode|fromhex|unhexlify|decompress|rot.?13|marshal")
DECODED_NOTE = "# ↓ 由上面的编码字符串解码而来（decoded from the encoded string above）"


@dataclass
class Unit:
    """One graded function as the learner wrote it: the text shown in the report and its fingerprint
    ``{hash: [line, ...]}`` (lines of ``text``)."""

    text: str = ""
    prints: dict[int, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"text": self.text, "prints": [[h, lines] for h, lines in sorted(self.prints.items())]}

    @classmethod
    def from_json(cls, data) -> Unit | None:
        """A unit stored in a grading report, or None for anything else (a report of an older grader)."""
        if not isinstance(data, dict) or not isinstance(data.get("prints"), list):
            return None
        prints = {}
        for item in data["prints"]:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], list):
                prints[item[0]] = [x for x in item[1] if isinstance(x, int)]
        text = data.get("text") if isinstance(data.get("text"), str) else ""
        return cls(text=text[:MAX_UNIT_CHARS], prints=prints)


@dataclass
class _Entry:
    node: ast.stmt | None  # None: a cell that does not parse (``text`` is its source)
    lines: list[str]  # the lines shown for it
    first: int  # its first line in its own text (the cell or the decoded string)
    cell: int  # index of the learner cell it came from
    gid: str | None  # the answer cell's grade_id, None for an added cell
    decoded: bool = False
    carrier: bool = False  # holds a string that decodes to code: that code is fingerprinted instead


# ----------------------------------------------------------------------------------------------- learner cells
def _gid(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution")) and cell.cell_type == "code"


def learner_cells(nb: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[tuple[str | None, str]]:
    """[(answer grade_id or None, source)] of the cells the learner wrote, in notebook order: the answer cells and
    every code cell without a grade_id that is not a released cell (added, or a released setup cell changed)."""
    released = {c.source.strip() for c in release.cells if c.cell_type == "code" and not _gid(c)}
    out, budget = [], MAX_LEARNER_CHARS
    for cell in nb.cells:
        if cell.cell_type != "code" or budget <= 0:
            continue
        source = cell.source[: min(MAX_CELL_CHARS, budget)]
        if _is_answer(cell):
            out.append((_gid(cell), source))
        elif not _gid(cell) and cell.source.strip() not in released:
            out.append((None, source))
        else:
            continue
        budget -= len(source)
    return out


def _without_magics(source: str) -> str:
    """IPython lines (``%time``, ``!pip``, ``x?``) as ``pass`` at their indentation: the cell still parses and keeps
    its line numbers."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")) or (stripped.endswith("?") and not stripped.startswith("#")):
            line = line[: len(line) - len(stripped)] + "pass"
        lines.append(line)
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------- encoded strings
def _bounded_decompress(data: bytes) -> list[bytes]:
    out = []
    for make in (
        lambda: zlib.decompressobj(),
        lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
        lambda: zlib.decompressobj(-zlib.MAX_WBITS),
    ):
        try:
            out.append(make().decompress(data, MAX_DECODED))
        except zlib.error:
            pass
    for make in (bz2.BZ2Decompressor, lzma.LZMADecompressor):
        try:
            out.append(make().decompress(data, max_length=MAX_DECODED))
        except (OSError, EOFError, lzma.LZMAError, ValueError):
            pass
    return out


def _decodings(value: str | bytes) -> list[str]:
    """The texts ``value`` decodes to (base64 / base32 / base85 / ascii85 / hex, each optionally compressed, rot13,
    reversed); never runs anything and never expands past ``MAX_DECODED``."""
    raw = value.encode("utf-8", "ignore") if isinstance(value, str) else value
    blobs: list[bytes] = []
    compact = re.sub(rb"\s+", b"", raw)
    for decode in (
        lambda b: base64.b64decode(b, validate=True),
        lambda b: base64.urlsafe_b64decode(b),
        base64.b32decode,
        base64.b85decode,
        base64.a85decode,
        binascii.unhexlify,
    ):
        try:
            blobs.append(decode(compact))
        except (ValueError, binascii.Error, TypeError):
            pass
    blobs += [d for blob in list(blobs) + [raw] for d in _bounded_decompress(blob)]
    texts = []
    for blob in blobs:
        try:
            texts.append(blob.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    if isinstance(value, str):
        texts += [codecs.decode(value, "rot13"), value[::-1]]
    return [t for t in texts if t and t != value]


def _as_code(text: str) -> list[ast.stmt] | None:
    """The statements of ``text`` when it is Python with something more than bare expressions."""
    if len(text) > MAX_DECODED or not any(ch in text for ch in "=(:\n"):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not any(not isinstance(s, ast.Expr) for s in tree.body):
        return None
    return tree.body


def decoded_code(node: ast.AST, budget: list[int] | None = None) -> list[tuple[str, list[ast.stmt]]]:
    """[(decoded text, its statements)] for every string in ``node`` that decodes to Python code; ``budget``: a
    one-item list of the characters still allowed to be tried (decreased)."""
    budget = [MAX_DECODE_INPUT] if budget is None else budget
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and len(n.value) >= MIN_ENCODED:
            if len(n.value) > budget[0]:
                continue
            budget[0] -= len(n.value)
            for text in _decodings(n.value):
                statements = _as_code(text)
                if statements is not None:
                    found.append((text, statements))
                    break
    return found


def _calls_named(node: ast.AST, names: frozenset[str], aliases: set[str]) -> list[ast.Call]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            func = n.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names or name in aliases:
                out.append(n)
    return out


def encoded_exec(trees: list[ast.Module], unparsed: list[str]) -> bool:
    """``exec``/``eval``/``compile`` (or a name bound to one) called on something decoded: a decoder call
    (``base64.b64decode``, ``zlib.decompress``, ``bytes.fromhex``, ``codecs.decode(.., "rot13")``, ``chr``, ...), a
    reversed string, or a name assigned from one of these anywhere in the learner's code."""
    aliases: set[str] = set()
    tainted: set[str] = set()

    def decoding(expr: ast.AST) -> bool:
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and (n.id in tainted or n.id in DECODERS):
                return True
            if isinstance(n, ast.Attribute) and n.attr in DECODERS:
                return True
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) and n.slice.step is not None:
                return True  # "..."[::-1]
            if isinstance(n, ast.Call):
                func = n.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in DECODERS or name in ("__import__", "getattr"):
                    return True
                if name == "decode" and any(
                    isinstance(a, ast.Constant)
                    and isinstance(a.value, str)
                    and a.value.lower().replace("_", "") in ("rot13", "base64", "hex", "zlib", "bz2", "uu")
                    for a in n.args
                ):
                    return True
        return False

    for _ in range(3):  # names assigned from names assigned from a decoder
        for tree in trees:
            for n in ast.walk(tree):
                if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
                    targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                    names = {t.id for t in targets if isinstance(t, ast.Name)}
                    value = n.value
                    if isinstance(value, ast.Name) and value.id in EXEC_CALLS | aliases:
                        aliases |= names
                    elif isinstance(value, ast.Attribute) and value.attr in EXEC_CALLS:
                        aliases |= names
                    elif decoding(value):
                        tainted |= names
    for tree in trees:
        for call in _calls_named(tree, EXEC_CALLS, aliases):
            if any(decoding(arg) for arg in call.args):
                return True
    return any(_EXEC_TEXT.search(text) and _DECODER_TEXT.search(text) for text in unparsed)


# ---------------------------------------------------------------------------------------------------- program
def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, node.end_lineno or node.lineno


def _entries(cells: list[tuple[str | None, str]]) -> tuple[list[_Entry], list[ast.Module], list[str]]:
    """The learner's top-level statements in notebook order, decoded strings spliced in after the statement that
    holds them; with the parsed cells and the sources of the cells that do not parse."""
    entries: list[_Entry] = []
    trees, unparsed = [], []
    budget = [MAX_DECODE_INPUT]

    def add(statements: list[ast.stmt], lines: list[str], index: int, gid: str | None, decoded: bool, depth: int):
        for statement in statements:
            first, last = _span(statement)
            entry = _Entry(statement, lines[first - 1 : last], first, index, gid, decoded)
            entries.append(entry)
            if depth < DECODE_DEPTH:
                for text, inner in decoded_code(statement, budget):
                    entry.carrier = True
                    add(inner, text.splitlines(), index, gid, True, depth + 1)

    for index, (gid, source) in enumerate(cells):
        text = _without_magics(source)
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            unparsed.append(source)
            entries.append(_Entry(None, source.splitlines(), 1, index, gid))
            continue
        trees.append(tree)
        add(tree.body, text.splitlines(), index, gid, False, 0)
    return entries, trees, unparsed


def _binds(statement: ast.stmt | None) -> set[str]:
    """Names a top-level statement defines (definitions and assignments, also inside a top-level if/try)."""
    if statement is None:
        return set()
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    if isinstance(statement, (ast.If, ast.Try, ast.With)):
        return {name for _, block in blocks(statement) for inner in block for name in _binds(inner)}
    return set()


def _reads(statement: ast.stmt | None) -> set[str]:
    if statement is None:
        return set()
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def stub_names(release: nbformat.NotebookNode) -> dict[str, set[str]]:
    """{answer grade_id: the names its released stub defines (imports aside)}."""
    out = {}
    for cell in release.cells:
        if _is_answer(cell):
            try:
                body = ast.parse(_without_magics(cell.source)).body
            except (SyntaxError, ValueError):
                body = []
            out[_gid(cell)] = {n for s in body if not isinstance(s, (ast.Import, ast.ImportFrom)) for n in _binds(s)}
    return out


def _unit(entries: list[_Entry], chosen: list[int], released: frozenset[int] | set[int]) -> Unit:
    """The unit made of ``entries[i]`` for ``i`` in ``chosen`` (notebook order): its text and fingerprint, the
    released prints (stubs, setup cells) taken out."""
    lines: list[str] = []
    parts: list[tuple[_Entry, int]] = []  # (entry, its first line in the unit's text)
    previous = None
    for i in sorted(chosen):
        entry = entries[i]
        if previous is not None and (entry.cell != previous.cell or entry.decoded != previous.decoded):
            lines.append("")
        if entry.decoded and not (previous is not None and previous.decoded and previous.cell == entry.cell):
            lines.append(DECODED_NOTE)
        parts.append((entry, len(lines) + 1))
        lines.extend(entry.lines)
        previous = entry
    try:
        nodes, opaque = [], []
        for entry, start in parts:
            if entry.carrier:
                continue
            if entry.node is None:
                opaque += raw_tokens("\n".join(entry.lines), start)
                continue
            node = copy.deepcopy(entry.node)
            ast.increment_lineno(node, start - entry.first)
            nodes.append(node)
        tokens = canonical_tokens(ast.Module(body=nodes, type_ignores=[])) + opaque
    except RecursionError:  # code nested too deep for the canonical form: its raw tokens
        tokens = raw_tokens("\n".join(lines))
    prints = {h: sorted(where) for h, where in winnow(tokens).items() if h not in released}
    return Unit(text="\n".join(lines)[:MAX_UNIT_CHARS], prints=prints)


_RELEASED: dict[str, frozenset[int]] = {}  # digest of a release's code cells -> their fingerprints


def released_prints(release: nbformat.NotebookNode) -> frozenset[int]:
    """The fingerprints of every released code cell (stubs included): shared by every learner, they say nothing.
    Computed once per release (the release is the grader's, never the learner's)."""
    sources = [_without_magics(c.source) for c in release.cells if c.cell_type == "code"]
    key = hashlib.sha256("\0".join(sources).encode("utf-8", "surrogatepass")).hexdigest()
    if key not in _RELEASED:
        _RELEASED[key] = frozenset(h for source in sources for h in fingerprint(source))
    return _RELEASED[key]


def notebook_units(
    nb: nbformat.NotebookNode,
    release: nbformat.NotebookNode,
    released: frozenset[int] | set[int] | None = None,
    scan: Callable[[str], list[str]] | None = None,
) -> tuple[dict[str, Unit], list[str]]:
    """({answer grade_id: the learner's unit}, review flags) of a notebook whose metadata has been rebuilt against
    ``release`` (``submission.rebuild_metadata``); also what gives the course's reference units (its source
    notebook, whose answer cells hold the worked answers). ``scan``: review flags of a text, also applied to what the
    learner's strings decode to."""
    released = released_prints(release) if released is None else released
    stubs = stub_names(release)
    entries, trees, unparsed = _entries(learner_cells(nb, release))
    flags = [ENCODED_EXEC] if encoded_exec(trees, unparsed) else []
    decoded = "\n".join(line for entry in entries if entry.decoded for line in entry.lines)
    if scan is not None and decoded:
        flags += [flag for flag in scan(decoded) if flag not in flags]
    last: dict[str, int] = {}
    for i, entry in enumerate(entries):
        for name in _binds(entry.node):
            last[name] = i
    graded = {name: gid for gid, names in stubs.items() for name in names}
    units = {}
    for gid, names in stubs.items():
        chosen = {last[name] for name in names if name in last}
        for i, entry in enumerate(entries):
            if entry.gid == gid and all(last.get(name) == i for name in _binds(entry.node)):
                chosen.add(i)  # the answer cell's own statements that nothing later replaces
        todo = list(chosen)
        while todo:
            i = todo.pop()
            for name in _reads(entries[i].node):
                j = last.get(name)
                if j is not None and j not in chosen and graded.get(name, gid) == gid:
                    chosen.add(j)
                    todo.append(j)
        if chosen:
            units[gid] = _unit(entries, sorted(chosen), released)
    return units, flags
