"""Winnowed k-gram fingerprints of Python code (Schleimer, Wilkerson and Aiken's winnowing, as in MOSS), taken from
the code's canonical form (``canonical_code``: dead statements out, one spelling per operation, independent
statements in one order) with local names, comments, layout, string and number contents ignored: local names
become ``N`` (attribute names, keywords, builtins and well-known modules are kept), strings ``S``, numbers ``0``.

``fingerprint(source)`` gives ``{hash: lines}``: every selected k-gram with the source lines its tokens came from
(for the side-by-side report). Code that does not parse is fingerprinted from its raw tokens. Only the standard
library: the grader runs this on untrusted text, and the text is parsed, never run.
"""

from __future__ import annotations

import ast
import builtins
import copy
import io
import keyword
import tokenize
import zlib

from .canonical_code import BLOCKS, canonical

K_GRAM = 5  # tokens per k-gram
WINDOW = 4  # winnowing window: every run of WINDOW + K_GRAM - 1 shared tokens shares a fingerprint
KNOWN = {"torch", "math", "numbers", "np", "numpy", "F", "nn", "re", "self", "True", "False", "None"}
BUILTIN_NAMES = frozenset(dir(builtins))


# ------------------------------------------------------------------------------------------------------ tokens
def _normal(text: str, kind: int, previous: str) -> str:
    if kind == tokenize.STRING:
        return "S"
    if kind == tokenize.NUMBER:
        return "0"
    if (
        kind == tokenize.NAME
        and not keyword.iskeyword(text)
        and previous != "."
        and text not in KNOWN
        and text not in BUILTIN_NAMES
    ):
        return "N"
    return text


SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def raw_tokens(source: str, first_line: int = 1) -> list[tuple[str, int]]:
    """Normalised tokens of ``source`` with their lines (``first_line`` is the line of its first line)."""
    out: list[tuple[str, int]] = []
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in SKIPPED:
                continue
            out.append((_normal(token.string, token.type, previous), token.start[0] + first_line - 1))
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        if not out:  # nothing tokenized: the words
            out = [(word, first_line) for word in source.split()]
    return out


def _text_tokens(text: str, line: int) -> list[tuple[str, int]]:
    return [(t, line) for t, _ in raw_tokens(text)]


def _header(statement: ast.stmt) -> str:
    """The first line of a compound statement (``def f(a, b):``, ``for x in y:``) as code."""
    bare = copy.copy(statement)
    for field in (*BLOCKS, "handlers"):
        if hasattr(bare, field):
            setattr(bare, field, [] if field != "body" else [ast.Pass()])
    text = ast.unparse(bare)
    return text.rsplit("pass", 1)[0] if text.rstrip().endswith("pass") else text


def _statement_tokens(statement: ast.stmt, memo: dict[int, list] | None = None) -> list[tuple[str, int]]:
    """The tokens of a canonical statement, each with a source line of the statement it came from (``memo``: the
    tokens already computed in this tree, by node id)."""
    memo = {} if memo is None else memo
    if id(statement) in memo:
        return memo[id(statement)]
    if isinstance(statement, ast.Pass):
        return []
    line = getattr(statement, "lineno", 0)
    blocks = [f for f in BLOCKS if isinstance(getattr(statement, f, None), list)]
    if not blocks or isinstance(statement, ast.Match):
        out = _text_tokens(ast.unparse(statement), line)
    else:
        out = _text_tokens(_header(statement), line)
        for field in blocks:
            block = getattr(statement, field)
            if field != "body" and block:
                out.append(("else" if field == "orelse" else "finally", line))
            for inner in block:
                out += _statement_tokens(inner, memo)
        for handler in getattr(statement, "handlers", []) or []:
            head = "except" + (f" {ast.unparse(handler.type)}" if handler.type else "")
            out += _text_tokens(head + (" as N" if handler.name else "") + ":", getattr(handler, "lineno", line))
            for inner in handler.body:
                out += _statement_tokens(inner, memo)
    memo[id(statement)] = out
    return out


def canonical_tokens(tree: ast.Module) -> list[tuple[str, int]]:
    """(token, source line) of a parsed module in its canonical form (the tree is modified). A statement's tokens
    are computed once: the order of a block is settled before the tokens of the statement holding it are read."""
    memo: dict[int, list] = {}
    out: list[tuple[str, int]] = []
    for statement in canonical(tree, lambda s: " ".join(t for t, _ in _statement_tokens(s, memo))).body:
        out += _statement_tokens(statement, memo)
    return out


def source_tokens(source: str) -> list[tuple[str, int]]:
    """(token, line) of ``source`` in its canonical form; the raw tokens where it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return raw_tokens(source)
    try:
        return canonical_tokens(tree)
    except RecursionError:
        return raw_tokens(source)


# -------------------------------------------------------------------------------------------------- winnowing
def winnow(tokens: list[tuple[str, int]], k: int = K_GRAM, window: int = WINDOW) -> dict[int, set[int]]:
    """{fingerprint: source lines of its tokens}: the minimum k-gram hash of every window (robust winnowing)."""
    if len(tokens) < k:
        return {}
    words = [t for t, _ in tokens]
    hashes = [zlib.crc32(" ".join(words[i : i + k]).encode()) for i in range(len(words) - k + 1)]
    chosen: set[int] = set()
    if len(hashes) <= window:
        chosen.add(min(range(len(hashes)), key=lambda i: (hashes[i], -i)))
    else:
        for start in range(len(hashes) - window + 1):
            chosen.add(min(range(start, start + window), key=lambda i: (hashes[i], -i)))
    out: dict[int, set[int]] = {}
    for i in chosen:
        out.setdefault(hashes[i], set()).update(line for _, line in tokens[i : i + k])
    return out


def fingerprint(source: str) -> dict[int, set[int]]:
    """{fingerprint: lines} of ``source`` (canonical form, winnowed)."""
    return winnow(source_tokens(source))


def similarity(a, b) -> float:
    """Share of the smaller fingerprint found in the other (1.0: one is contained in the other)."""
    a, b = set(a), set(b)
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
