"""What a human may want to look at in a submission; never a score change: the lines the learner wrote (compared
with the release), patterns worth a look in them (``FLAG_PATTERNS``), attributes of imported modules and classes the
learner assigns by any spelling (``module_patches``: the syntax tree, not a pattern), ``exec`` of a decoded string,
and the fingerprint of each graded function as the learner wrote it (``learner_code``), which ``copy_review``
compares with the reference and the rest of the class when the grades are exported."""

from __future__ import annotations

import ast
import re

import nbformat

from .learner_code import notebook_units

# Patterns worth a human look in answer cells; they never change a score.
FLAG_PATTERNS = [
    (
        "ipython-hooks",
        r"input_transformers|ast_transformers|events\.register|set_custom_exc|register_magic"
        r"|\.run_cell\b|showtraceback",
    ),
    ("grader-internals", r"tools\.grading|_ORIGINALS|\btampered\b|sys\.modules|_grpo_grader|/proc/self/fd"),
    (
        "monkeypatch",
        r"\b(?:torch|torch\.testing|torch\.Tensor|builtins|math|numpy|np)\.[A-Za-z_]+\s*=(?!=)"
        r"|__builtins__|setattr\(\s*(?:torch|builtins|math)",
    ),
    ("exit", r"os\._exit|sys\.exit|\bquit\(|\bexit\(|SystemExit|os\.kill\b"),
    ("file-access", r"\bopen\(|os\.walk|\bglob\b|listdir|scandir|read_text|read_bytes|gradebook|solutions/"),
    ("processes", r"subprocess|os\.system|os\.popen|os\.fork|ctypes|multiprocessing|\bsocket\b"),
]


def compare_with_release(
    submitted: nbformat.NotebookNode, release: nbformat.NotebookNode
) -> tuple[list[str], list[str], str]:
    """(locked cells the learner edited, locked cells the learner deleted, the code the learner wrote).

    nbgrader restores both kinds of locked cells from the gradebook; the learner's own code is every line of a
    code cell that no code cell of the released notebook has (answers, added cells, lines added to a setup
    cell): ``import numpy as np`` added to the imports cell is the learner's, the cell's released lines are not.
    """

    def locked(cell):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        return meta.get("grade_id") and meta.get("locked") and not meta.get("solution")

    released = {c.metadata["nbgrader"]["grade_id"]: c for c in release.cells if locked(c)}
    mine = {}
    for cell in submitted.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            mine.setdefault(gid, cell)
    edited = [gid for gid, cell in released.items() if gid in mine and mine[gid].source != cell.source]
    deleted = [gid for gid in released if gid not in mine]
    release_lines = {line.strip() for c in release.cells if c.cell_type == "code" for line in c.source.splitlines()}
    written = "\n".join(
        line
        for c in submitted.cells
        if c.cell_type == "code"
        for line in c.source.splitlines()
        if line.strip() not in release_lines
    )
    return edited, deleted, written


def scan_flags(code: str, patches: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Review flags for code the learner wrote (``patches``: what ``module_patches`` found in it, which raises
    ``monkeypatch`` whatever the spelling); they never change a score."""
    return [name for name, pattern in FLAG_PATTERNS if re.search(pattern, code) or (name == "monkeypatch" and patches)]


def review_notebook(
    nb: nbformat.NotebookNode, release: nbformat.NotebookNode, written: str | None = None
) -> tuple[dict, list[str]]:
    """({answer grade_id: the learner's unit, as stored in the grading report}, review flags) of a notebook whose
    metadata has been rebuilt against ``release``: the patterns of ``FLAG_PATTERNS`` in the lines the learner
    wrote (``written``, ``compare_with_release``'s third value, computed when not given) and in what their strings
    decode to, module patches by any spelling (``module_patches``), and ``encoded-exec``."""
    if written is None:
        _, _, written = compare_with_release(nb, release)
    units, flags = notebook_units(nb, release, scan=scan_flags)
    own = scan_flags(written, module_patches(nb, release))
    return {gid: unit.to_json() for gid, unit in units.items()}, own + [f for f in flags if f not in own]


# ----------------------------------------------------------------------------- module attributes assigned
_IMPORTERS = ("__import__", "import_module")  # __import__("torch"), importlib.import_module("torch")
_DICT_WRITES = ("update", "__setitem__", "__delitem__", "setdefault", "pop", "popitem", "clear")


def _parse(source: str) -> ast.Module | None:
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return None


class _Imported:
    """Which expressions denote an imported module, class or function (``lib``) - through attributes, ``getattr``,
    ``sys.modules[...]``, ``vars(m)[...]``/``m.__dict__[...]``, ``__import__``, aliases (``t = torch``) - and which a
    library call made (``obj``: ``type(obj)`` and ``obj.__class__`` are library classes again)."""

    def __init__(self) -> None:
        self.names = {"builtins", "__builtins__"}

    def origin(self, expr: ast.AST) -> str | None:
        if isinstance(expr, ast.Name):
            return "lib" if expr.id in self.names else None
        if isinstance(expr, ast.Attribute):
            base = self.origin(expr.value)
            return "lib" if base == "lib" or (base == "obj" and expr.attr == "__class__") else None
        if isinstance(expr, ast.Subscript):
            return "lib" if self.module_dict(expr.value) else None
        if isinstance(expr, ast.Call):
            func, args = expr.func, expr.args
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in _IMPORTERS:
                return "lib"
            if name == "getattr" and args:
                return "lib" if self.origin(args[0]) == "lib" else None
            if name == "type" and len(args) == 1:
                return "lib" if self.origin(args[0]) else None
            return "obj" if self.origin(func) == "lib" else None
        return None

    def module_dict(self, expr: ast.AST) -> bool:
        """``expr`` is the attribute dict of an imported object: ``vars(m)``, ``m.__dict__``, ``sys.modules``,
        ``__builtins__`` (a dict where it is one)."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "vars" and expr.args:
            return self.origin(expr.args[0]) == "lib"
        if isinstance(expr, ast.Attribute) and expr.attr in ("__dict__", "modules"):
            return self.origin(expr.value) == "lib"
        return isinstance(expr, ast.Name) and expr.id == "__builtins__"

    def learn(self, tree: ast.Module) -> bool:
        """Add the names ``tree`` imports or aliases; whether any was new."""
        before = len(self.names)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            elif isinstance(node, ast.Assign) and self.origin(node.value) == "lib":
                self.names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return len(self.names) > before

    def patches(self, node: ast.AST) -> list[ast.AST]:
        """The parts of statement ``node`` that write an imported object's attributes."""
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        found = []
        for target in targets:
            for part in ast.walk(target):  # tuple targets: (torch.equal, x) = ...; only what is written
                if not isinstance(getattr(part, "ctx", None), (ast.Store, ast.Del)):
                    continue
                if isinstance(part, ast.Attribute) and self.origin(part.value) == "lib":
                    found.append(part)
                elif isinstance(part, ast.Subscript) and self.module_dict(part.value):
                    found.append(part)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            func, args = call.func, call.args
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("setattr", "delattr", "__setattr__", "__delattr__") and args:
                if self.origin(args[0]) == "lib" or (isinstance(func, ast.Attribute) and self.origin(func.value)):
                    found.append(call)
            elif isinstance(func, ast.Attribute) and name in _DICT_WRITES and self.module_dict(func.value):
                found.append(call)
        return found


def module_patches(submitted: nbformat.NotebookNode, release: nbformat.NotebookNode) -> list[str]:
    """The statements the learner wrote (lines the release's code cells do not have) that assign, delete or update an
    attribute of an imported module, class or function, however spelt: ``torch.equal = ...``, ``import torch as _t;
    _t.equal = ...``, ``setattr(torch, "equal", ...)``, ``vars(torch)["equal"] = ...``, ``torch.__dict__[...]``,
    ``builtins.x = ...``, ``sys.modules["torch"].equal = ...``, ``torch.Tensor.tolist = ...``. Each as its source
    line (stripped, at most 120 characters); a cell that does not parse is left to the patterns of ``scan_flags``."""
    release_lines = {line.strip() for c in release.cells if c.cell_type == "code" for line in c.source.splitlines()}
    cells = []
    for cell in submitted.cells:
        if cell.cell_type == "code":
            tree = _parse(cell.source)
            if tree is not None:
                cells.append((cell.source.splitlines(), tree))
    imported = _Imported()
    while any([imported.learn(tree) for _lines, tree in cells]):  # aliases of aliases
        pass
    found = []
    for lines, tree in cells:
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt) or not imported.patches(node):
                continue
            own = [l.strip() for l in lines[node.lineno - 1 : node.end_lineno] if l.strip() not in release_lines]
            if any(own):
                found.append(own[0][:120])
    return found
