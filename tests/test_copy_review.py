"""The copy review's fingerprints and units (``grpo_grader/code_prints.py``, ``learner_code.py``, ``copy_review.py``):
equivalent code gets one fingerprint and each listed change of behaviour another (a list of mutations the check
catches), dead statements do not count, a graded function's unit follows the learner's code into the cells they
added and into strings that decode to code, ``exec`` of a decoded string is flagged, the bounds hold, and the
thresholds and flags follow the calibration rule. The calibration's freshness and the figures of the README are
checked in tests/test_similarity_report.py.
"""

from __future__ import annotations

import base64
import bz2
import codecs
import copy
import zlib

import nbformat
import pytest

from autograde.grpo_grader import canonical_code, code_prints, learner_code
from autograde.grpo_grader.code_prints import similarity, source_tokens
from autograde.grpo_grader.copy_review import (
    CAP,
    MARGIN,
    MIN_PRINTS,
    REFERENCE,
    Match,
    calibrate,
    copy_flags,
    report_units,
    threshold_from,
)
from autograde.grpo_grader.learner_code import ENCODED_EXEC, Unit, encoded_exec, notebook_units
from autograde.sample_class.build import SUBMITTED, _released

NB01 = "nb01_group_advantages"
GID = "group_relative_advantages"


def _words(source: str) -> list[str]:
    return [t for t, _ in source_tokens(source)]


BODY = """
def f(x, m, eps):
    y = x - x.mean(dim=1, keepdim=True)
    z = y.masked_fill(~m, 0)
    if x.ndim < 2:
        raise ValueError("bad")
    w = z / (y.std(1) + eps)
    return w.sum(1) * x.shape[0]
"""
EQUIVALENT = {  # spelling -> another spelling of the same code
    "operator as torch function": (
        "y = x - x.mean(dim=1, keepdim=True)",
        "y = torch.sub(x, x.mean(dim=1, keepdim=True))",
    ),
    "operator as method": ("y = x - x.mean(dim=1, keepdim=True)", "y = x.sub(x.mean(dim=1, keepdim=True))"),
    "torch function as method": ("x.mean(dim=1, keepdim=True)", "torch.mean(x, 1, keepdim=True)"),
    "keyword as positional": ("y.std(1)", "y.std(dim=1)"),
    "where as masked_fill": ("z = y.masked_fill(~m, 0)", "z = torch.where(m, y, torch.zeros_like(y))"),
    "size() as shape": ("x.shape[0]", "x.size(0)"),
    "dim() as ndim": ("if x.ndim < 2:", "if x.dim() < 2:"),
    "negated condition": ("if x.ndim < 2:", "if not x.ndim >= 2:"),
    "swapped comparison": ("if x.ndim < 2:", "if 2 > x.ndim:"),
    "renamed locals": (
        "w = z / (y.std(1) + eps)\n    return w.sum(1)",
        "out = z / (y.std(1) + eps)\n    return out.sum(1)",
    ),
    "comments and layout": ("w = z / (y.std(1) + eps)", "w = (z /  # scale\n         (y.std(1) + eps))"),
    "independent statements reordered": (
        '    z = y.masked_fill(~m, 0)\n    if x.ndim < 2:\n        raise ValueError("bad")\n',
        '    if x.ndim < 2:\n        raise ValueError("wrong")\n    z = y.masked_fill(~m, 0)\n',
    ),
}
SNIPPETS = {  # two spellings of a whole function
    "augmented assignment": ("def f(a, b):\n    a += b\n    return a", "def f(a, b):\n    a = a + b\n    return a"),
    "elif after return": (
        "def f(a):\n    if a:\n        return 1\n    elif a is None:\n        return 2\n    return 3",
        "def f(a):\n    if a:\n        return 1\n    if a is None:\n        return 2\n    return 3",
    ),
    "isinstance(x, torch.Tensor)": (
        "def f(x):\n    if not isinstance(x, torch.Tensor):\n        raise ValueError('x')\n    return x",
        "def f(x):\n    if not torch.is_tensor(x):\n        raise ValueError('y')\n    return x",
    ),
    "De Morgan": (
        "def f(x):\n    if not (torch.is_tensor(x) and x.ndim == 2):\n        raise ValueError\n    return x",
        "def f(x):\n    if not torch.is_tensor(x) or x.ndim != 2:\n        raise ValueError\n    return x",
    ),
    "[:, None] as unsqueeze(1)": (
        "def f(a, b):\n    return a[:, None] * b",
        "def f(a, b):\n    return a.unsqueeze(1) * b",
    ),
    ".float() as .to(torch.float32)": (
        "def f(x):\n    return x.float() ** 0.5",
        "def f(x):\n    return x.to(torch.float).sqrt()",
    ),
}
MUTATIONS = {  # a change of behaviour the fingerprint must see
    "another operator": ("y = x - x.mean(dim=1, keepdim=True)", "y = x + x.mean(dim=1, keepdim=True)"),
    "operands swapped": ("y = x - x.mean(dim=1, keepdim=True)", "y = x.mean(dim=1, keepdim=True) - x"),
    "another reduction": ("w.sum(1)", "w.mean(1)"),
    "mask inverted": ("z = y.masked_fill(~m, 0)", "z = y.masked_fill(m, 0)"),
    "another comparison": ("if x.ndim < 2:", "if x.ndim <= 2:"),
    "guard removed": ('    if x.ndim < 2:\n        raise ValueError("bad")\n', ""),
    "dependent statements reordered": (
        "    y = x - x.mean(dim=1, keepdim=True)\n    z = y.masked_fill(~m, 0)\n",
        "    z = y.masked_fill(~m, 0)\n    y = x - x.mean(dim=1, keepdim=True)\n",
    ),
    "another value returned": ("return w.sum(1)", "return z.sum(1)"),
}
DEAD = [  # a statement that does nothing, inserted after every statement of BODY
    "_unused = 0",
    "pass",
    "None",
    "'a string'",
    "x",
    "len(x)",
    "print(x.shape)",
    "if False:\n        x = x + 1",
    "while 0:\n        x = x + 1",
    "x = x",
]
LIVE = [  # a statement that does something: the fingerprint changes
    "xs.append(1)",
    "x = x + 1",
    "if x.any():\n        return x",
]


def _edit(old: str, new: str) -> str:
    assert old in BODY, old
    return BODY.replace(old, new, 1)


def test_equivalent_spellings_have_one_fingerprint():
    for name, (old, new) in EQUIVALENT.items():
        assert _words(_edit(old, new)) == _words(BODY), name
    for name, (one, other) in SNIPPETS.items():
        assert _words(one) == _words(other), name


def test_each_change_of_behaviour_changes_the_fingerprint():
    """The mutation list of the check above: each changes the canonical tokens."""
    for name, (old, new) in MUTATIONS.items():
        assert _words(_edit(old, new)) != _words(BODY), name


def _after_every_statement(extra: str) -> str:
    lines = BODY.strip("\n").splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        out.append(line)
        if not line.lstrip().startswith(("if ", "raise", "return")) and not line.endswith(":"):
            out.append("    " + extra)
    out.append("    " + extra)  # after the return: unreachable
    return "\n".join(out) + "\n"


def test_dead_statements_are_not_fingerprinted_and_live_ones_are():
    for dead in DEAD:
        assert _words(_after_every_statement(dead)) == _words(BODY), dead
    for live in LIVE:
        assert _words(_after_every_statement(live)) != _words(BODY), live


def test_unparsable_code_falls_back_to_its_raw_tokens():
    assert _words("def f(:\n  return x") == ["def", "N", "(", ":", "return", "N"]
    assert code_prints.fingerprint("x = 1") == {}  # shorter than one k-gram


# ------------------------------------------------------------------------------------------------- units
def _release() -> nbformat.NotebookNode:
    return _released(NB01)


def _worked() -> nbformat.NotebookNode:
    return nbformat.read(SUBMITTED / "s01_worked_answers" / NB01 / f"{NB01}.ipynb", as_version=4)


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _with(answer: str, added: list[tuple[int, str]] = ()) -> nbformat.NotebookNode:
    """The release with ``GID``'s answer cell set to ``answer`` and code cells added at offsets from it."""
    nb = copy.deepcopy(_release())
    position = next(i for i, c in enumerate(nb.cells) if _gid(c) == GID)
    nb.cells[position].source = answer
    for offset, source in sorted(added, reverse=True):
        nb.cells.insert(position + offset, nbformat.v4.new_code_cell(source))
    return nb


def _reference_source() -> str:
    return next(c.source for c in _worked().cells if _gid(c) == GID)


def _stub() -> str:
    return next(c.source for c in _release().cells if _gid(c) == GID)


@pytest.fixture(scope="module")
def reference_unit() -> Unit:
    units, flags = notebook_units(_worked(), _release())
    assert not flags and len(units[GID].prints) >= MIN_PRINTS
    return units[GID]


def _encodings(source: str) -> dict[str, str]:
    raw = source.encode()
    return {
        "base64+zlib": f"import base64, zlib\nexec(zlib.decompress(base64.b64decode('{base64.b64encode(zlib.compress(raw)).decode()}')))",
        "hex": f"exec(bytes.fromhex('{raw.hex()}').decode())",
        "rot13": f"import codecs\nexec(codecs.decode({codecs.encode(source, 'rot13')!r}, 'rot13'))",
        "reversed": f"exec({source[::-1]!r}[::-1])",
        "base85+bz2": f"import base64, bz2\n_p = base64.b85decode('{base64.b85encode(bz2.compress(raw)).decode()}')\n"
        "run = exec\nrun(bz2.decompress(_p))",
    }


def test_a_unit_follows_the_learner_into_added_cells_and_decoded_strings(reference_unit):
    """The reference pasted into a cell above the answer under another name (the answer calls it), pasted below the
    untouched stub, or hidden in a string that an ``exec`` decodes: the unit is the reference's (similarity 1)."""
    reference = _reference_source()
    renamed = reference.replace("def group_relative_advantages(", "def _mine(")
    wrapper = "def group_relative_advantages(rewards, num_generations, eps=1e-4):\n    return _mine(rewards, num_generations, eps)\n"
    cases = {
        "pasted above, called": _with(wrapper, [(0, renamed)]),
        "pasted below the stub": _with(_stub(), [(1, reference)]),
        **{f"exec of {name}": _with(code) for name, code in _encodings(reference).items()},
    }
    for name, nb in cases.items():
        units, flags = notebook_units(nb, _release())
        assert similarity(units[GID].prints, reference_unit.prints) == 1.0, name
        assert (ENCODED_EXEC in flags) == name.startswith("exec"), (name, flags)
    # the stub alone, a stub redefined above it (then replaced by the stub), a released cell pasted: nothing
    demo = next(c.source for c in _release().cells if c.cell_type == "code" and not _gid(c) and "def " in c.source)
    for nb in (_with(_stub()), _with(_stub(), [(0, reference)]), _with(_stub(), [(1, demo)])):
        units, _ = notebook_units(nb, _release())
        assert len(units.get(GID, Unit()).prints) < MIN_PRINTS


ENCODED_EXEC_CASES = {  # learner code -> flagged?
    "exec(base64.b64decode(s))": True,
    "exec(zlib.decompress(b).decode())": True,
    "eval(codecs.decode(s, 'rot13'))": True,
    "exec(bytes.fromhex(s))": True,
    "exec(''.join(map(chr, codes)))": True,
    "exec(s[::-1])": True,
    "p = binascii.unhexlify(s)\nexec(p)": True,
    "q = base64.b64decode(s)\nr = q.decode()\ncompile(r, 'x', 'exec')": True,
    "run = exec\nrun(base64.b64decode(s))": True,
    "exec(__import__('base64').b64decode(s))": True,
    "exec(base64.b64decode(s)": True,  # does not parse: both names in the cell
    "exec('x = 1')": False,
    "eval('1 + 1')": False,
    "data = base64.b64decode(s)\nprint(data)": False,
    "text = s.decode('utf-8')\nexec(text)": False,
    "compile_regex = re.compile(r'-?\\d+')": False,
}


def test_exec_of_a_decoded_string_is_flagged_and_plain_exec_is_not():
    for source, flagged in ENCODED_EXEC_CASES.items():
        try:
            trees, unparsed = [learner_code.ast.parse(source)], []
        except SyntaxError:
            trees, unparsed = [], [source]
        assert encoded_exec(trees, unparsed) is flagged, source


def test_the_review_is_bounded_on_hostile_code():
    """A decompression bomb expands to at most MAX_DECODED characters, a giant cell is cut to MAX_CELL_CHARS, code
    nested too deep for the canonical form falls back to raw tokens, a block longer than MAX_REORDER keeps its
    order; none raises."""
    bomb = base64.b64encode(zlib.compress(b"x = 1\n" * (1 << 20))).decode()
    assert all(len(t) <= learner_code.MAX_DECODED for t in learner_code._decodings(bomb))
    assert learner_code._decodings(bomb), "the bomb is decoded (bounded), not ignored"
    nb = _with("x = 1\n" * 200_000)
    assert all(len(s) <= learner_code.MAX_CELL_CHARS for _, s in learner_code.learner_cells(nb, _release()))
    deep = "def group_relative_advantages(r, g, eps=1e-4):\n    return " + "+".join(["r"] * 5000)
    units, _ = notebook_units(_with(deep), _release())
    assert units[GID].prints
    long_block = "\n".join(f"a{i} = {i}" for i in range(canonical_code.MAX_REORDER + 1))
    assert [t for t, _ in source_tokens(long_block)] == [t for t, _ in code_prints.raw_tokens(long_block)]


# ---------------------------------------------------------------------------------------- thresholds, flags
def test_the_threshold_rule():
    assert threshold_from([0.2, 0.4]) == round(0.4 + MARGIN, 4)
    assert threshold_from([CAP - MARGIN + 0.01]) is None, "a function everybody writes alike is never flagged"
    assert threshold_from([]) is None
    shared = set(range(20))
    versions = {"a": shared | {100, 101, 102, 103, 104}, "b": shared | {200, 201, 202, 203, 204}, "c": shared | {300}}
    result = calibrate(versions, shared | set(range(400, 410)))
    assert set(result["common"]) == shared, "what three versions share is the contract's idiom"
    assert result["versions"] == 2 and result["reference_max"] == 0.0  # "c" is too short once the idiom is out


def _match(a, b, share, threshold, gid="f"):
    return Match("nb", gid, a, b, share, threshold, {1})


def test_flags_name_the_highest_flagged_share_and_the_most_similar_learners():
    matches = [
        _match("x", REFERENCE, 0.9, 0.8),
        _match("x", REFERENCE, 0.95, 0.8, gid="g"),
        _match("x", REFERENCE, 0.99, None, gid="h"),  # a function never flagged
        _match("y", REFERENCE, 0.7, 0.8),
        *[_match("x", f"p{i}", 0.9 + i / 100, 0.8) for i in range(7)],
    ]
    flags = copy_flags(matches)
    assert flags[("x", "nb")][0] == "copies-reference:95%"
    assert flags[("x", "nb")][1:] == [f"similar:p{i}:{90 + i}%" for i in (6, 5, 4, 3, 2)] + ["similar:+2"]
    assert ("y", "nb") not in flags and flags[("p0", "nb")] == ["similar:x:90%"]


def test_units_of_an_older_grader_report_are_not_compared():
    report = {"notebooks": [{"answers": {"a": [1, 2, 3], "b": {"text": "x", "prints": [[5, [1]], ["bad"]]}}}]}
    units = report_units(report)
    assert set(units) == {"b"} and units["b"].prints == {5: [1]}
