"""The canonical form of Python code for the copy review's fingerprints (``code_prints``): the code with what does
not change its behaviour taken out or spelled one way.

- dead statements: unreachable code after ``return``/``raise``/``continue``/``break``, statements with no effect
  (bare expressions without a call that could matter, ``pass``, docstrings, ``print``), assignments to names the
  function never reads, ``if False:`` / ``while 0:`` blocks (a constant test keeps only the branch taken), imports;
- equivalent spellings of one operation: ``torch.sub(a, b)`` / ``a.sub(b)`` / ``a - b``, ``torch.mean(x, 1)`` /
  ``x.mean(dim=1)``, ``a += b`` / ``a = a + b``, ``x[:, None]`` / ``x.unsqueeze(1)``, ``a > b`` / ``b < a``,
  ``not a == b`` / ``a != b`` (and De Morgan), ``torch.where(m, x, 0)`` / ``x.masked_fill(~m, 0)``,
  ``x.size(0)`` / ``x.shape[0]``, ``x ** 0.5`` / ``x.sqrt()``, ``.float()`` / ``.to(torch.float32)``,
  ``isinstance(x, torch.Tensor)`` / ``torch.is_tensor(x)``, ``elif`` after a ``return`` / ``if``, keyword arguments /
  positional ones;
- the order of independent statements: each block is put in one canonical topological order of its statements'
  data dependencies (ties broken by the statements' canonical text), so reordering statements that do not depend on
  each other changes nothing.

Only the standard library: the grader runs this on untrusted text, which is parsed, never run. Long blocks and
deep code are bounded (``MAX_REORDER``, ``MAX_PASSES``; ``RecursionError`` is the caller's to catch).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable

BLOCKS = ("body", "orelse", "finalbody")  # the fields of a compound statement that hold statements


def blocks(node: ast.AST):
    """(field, statements) of each non-empty block of a compound statement."""
    for name in BLOCKS:
        block = getattr(node, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield name, block


# calls that do not change state: a bare expression statement made only of these has no effect
PURE_CALLS = frozenset(
    "len isinstance issubclass type int float str bool abs min max sum repr tuple list dict set frozenset sorted"
    " range id hash print round divmod any all zip enumerate reversed iter callable getattr hasattr format".split()
)
PURE_METHODS = frozenset(
    "sum mean std var max min amax amin abs exp log sqrt clone detach item tolist numel dim size float double long"
    " int bool to view reshape unsqueeze squeeze flatten cpu contiguous isfinite isnan all any eq ne lt gt le ge"
    " shape ndim nansum cumsum logsumexp argmax argmin t transpose expand square keys values items get".split()
)
# binary operations written as a function of torch or a method of a tensor
BINARY = {
    "add": ast.Add,
    "sub": ast.Sub,
    "mul": ast.Mult,
    "div": ast.Div,
    "true_divide": ast.Div,
    "multiply": ast.Mult,
    "subtract": ast.Sub,
    "divide": ast.Div,
    "pow": ast.Pow,
    "matmul": ast.MatMult,
}
# torch.<f>(x, ...) that is also x.<f>(...)
TENSOR_FUNCTIONS = frozenset(
    "sum mean std var amax amin max min exp log log1p sqrt abs clamp clamp_min clamp_max clip gather reshape"
    " flatten unsqueeze squeeze cumsum logsumexp log_softmax softmax isfinite isnan isinf all any argmax argmin"
    " sort argsort unique masked_fill nansum maximum minimum square detach t transpose index_select topk where"
    " repeat_interleave eq ne lt le gt ge logical_and logical_or logical_not neg exp2 sign".split()
) - {"where"}
ALIASES = {
    "clip": "clamp",
    "clamp_min": "clamp",
    "multiply": "mul",
    "subtract": "sub",
    "divide": "div",
    "true_divide": "div",
    "negative": "neg",
    "greater": "gt",
    "less": "lt",
    "absolute": "abs",
    "as_tensor": "tensor",
    "concat": "cat",
    "concatenate": "cat",
}
DTYPE_METHODS = {
    "float": "float32",
    "double": "float64",
    "long": "int64",
    "int": "int32",
    "bool": "bool",
    "half": "float16",
}
DTYPE_ALIASES = {"float": "float32", "double": "float64", "long": "int64", "int": "int32", "half": "float16"}
SWAPPED = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}
NEGATED = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
}
MAX_REORDER = 200  # a longer block keeps its order (the dependency sort is quadratic)
MAX_PASSES = 10  # rounds of dropping unread assignments
MUTATING = frozenset("append extend insert pop remove clear update add discard setdefault sort reverse".split())


# ----------------------------------------------------------------------------------------------- dead statements
def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _no_effect(statement: ast.stmt) -> bool:
    """A statement that changes nothing: ``pass``, a bare expression whose calls are all pure (or ``print``)."""
    if isinstance(statement, ast.Pass):
        return True
    if not isinstance(statement, ast.Expr):
        return False
    if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)) for n in ast.walk(statement)):
        return False
    for call in _calls(statement):
        func = call.func
        if isinstance(func, ast.Name) and func.id in PURE_CALLS:
            continue
        if isinstance(func, ast.Attribute) and func.attr in PURE_METHODS:
            continue
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("math",):
            continue
        return False
    return True


def _constant_test(test: ast.expr):
    """The truth value of a constant test (``False``, ``0``, ``not True``, ``""``), else None."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _constant_test(test.operand)
        return None if inner is None else not inner
    return None


def _prune(body: list[ast.stmt]) -> list[ast.stmt]:
    """A block without its dead statements (recursively into compound statements)."""
    out: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, (ast.If, ast.While)):
            value = _constant_test(statement.test)
            if value is not None and isinstance(statement, ast.If):
                out.extend(_prune(statement.body if value else statement.orelse))
                if out and isinstance(out[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                    break
                continue
            if value is False:  # while False: never runs
                out.extend(_prune(statement.orelse))
                continue
        if _no_effect(statement) or isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue
        for field, block in list(blocks(statement)):
            setattr(statement, field, _prune(block))
        for handler in getattr(statement, "handlers", []) or []:
            handler.body = _prune(handler.body)
        out.append(statement)
        if isinstance(statement, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
            break  # the rest of the block never runs
        if (
            isinstance(statement, ast.If)
            and statement.orelse
            and statement.body
            and isinstance(statement.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))
        ):  # if c: return x / else: rest  is  if c: return x / rest
            rest, statement.orelse = statement.orelse, []
            out.extend(rest)
            if isinstance(out[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                break
    return out


def _stored_names(target: ast.expr) -> list[str] | None:
    """The plain names an assignment target binds, or None when it stores into anything else."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names: list[str] = []
        for element in target.elts:
            inner = _stored_names(element.value if isinstance(element, ast.Starred) else element)
            if inner is None:
                return None
            names += inner
        return names
    return None


def _dead_assignment(statement: ast.stmt, live: set[str]) -> bool:
    """An assignment whose every target is a plain name nobody reads (``live``: the names read), or ``x = x``."""
    if isinstance(statement, ast.Assign):
        targets = [_stored_names(t) for t in statement.targets]
        if all(t is not None for t in targets) and not {n for t in targets for n in t} & live:
            return True
        single = statement.targets[0] if len(statement.targets) == 1 else None
        return (
            isinstance(single, ast.Name) and isinstance(statement.value, ast.Name) and statement.value.id == single.id
        )
    if isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        names = _stored_names(statement.target)
        return names is not None and not set(names) & live
    return False


def _drop_unread(function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Assignments to local names the function never reads are dead (repeated until nothing changes)."""
    declared = {n for s in ast.walk(function) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
    changed, passes = True, 0
    while changed and passes < MAX_PASSES:
        changed, passes = False, passes + 1
        live = declared | {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for node in ast.walk(function):
            for field, block in list(blocks(node)):
                kept = [s for s in block if not _dead_assignment(s, live)]
                if len(kept) != len(block):
                    changed = True
                    setattr(node, field, kept or [ast.Pass()])


# ----------------------------------------------------------------------------------------- equivalent spellings
def _negated(expr: ast.expr) -> ast.expr:
    """``not expr`` with the ``not`` pushed inwards: ``not a == b`` is ``a != b``, ``not (a and b)`` is
    ``not a or not b``, ``not not a`` is ``a``."""
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in NEGATED:
        op = NEGATED[type(expr.ops[0])]()
        if type(op) in SWAPPED:
            return ast.Compare(expr.comparators[0], [SWAPPED[type(op)]()], [expr.left])
        return ast.Compare(expr.left, [op], expr.comparators)
    if isinstance(expr, ast.BoolOp):
        flipped = ast.Or() if isinstance(expr.op, ast.And) else ast.And()
        return ast.BoolOp(flipped, [_negated(value) for value in expr.values])
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return expr.operand
    return ast.UnaryOp(ast.Not(), expr)


def _zeros(expr: ast.expr) -> bool:
    """A constant or ``torch.zeros_like(...)``/``torch.full_like(..., c)``: a filler value of ``torch.where``."""
    if isinstance(expr, ast.Constant) or (isinstance(expr, ast.UnaryOp) and isinstance(expr.operand, ast.Constant)):
        return True
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr
        in (
            "zeros_like",
            "full_like",
            "ones_like",
        )
    )


class _Canonical(ast.NodeTransformer):
    """One spelling for operations that have several (see the module docstring)."""

    def visit_JoinedStr(self, node):  # an f-string is a string
        return ast.copy_location(ast.Constant("S"), node)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        load = copy.deepcopy(node.target)
        for n in ast.walk(load):
            if hasattr(n, "ctx"):
                n.ctx = ast.Load()
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        return ast.copy_location(ast.Assign([node.target], value), node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1 and type(node.ops[0]) in SWAPPED:
            return ast.copy_location(
                ast.Compare(node.comparators[0], [SWAPPED[type(node.ops[0])]()], [node.left]), node
            )
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_negated(node.operand), node)
        if isinstance(node.op, ast.Invert) and isinstance(node.operand, ast.UnaryOp):
            if isinstance(node.operand.op, ast.Invert):  # ~~x
                return node.operand.operand
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 0.5:
            return ast.copy_location(ast.Call(ast.Attribute(node.left, "sqrt", ast.Load()), [], []), node)
        if (
            isinstance(node.op, ast.Mult)
            and isinstance(node.left, ast.Name)
            and isinstance(node.right, ast.Name)
            and node.left.id == node.right.id
        ):
            return ast.copy_location(ast.BinOp(node.left, ast.Pow(), ast.Constant(2)), node)
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        index = node.slice
        if isinstance(index, ast.Tuple) and len(index.elts) == 2 and isinstance(node.ctx, ast.Load):
            first, second = index.elts
            none = isinstance(second, ast.Constant) and second.value is None
            if none and isinstance(first, ast.Slice) and first.lower is first.upper is first.step is None:
                return ast.copy_location(
                    ast.Call(ast.Attribute(node.value, "unsqueeze", ast.Load()), [ast.Constant(1)], []), node
                )
            if none and isinstance(first, ast.Constant) and first.value is Ellipsis:
                return ast.copy_location(
                    ast.Call(ast.Attribute(node.value, "unsqueeze", ast.Load()), [ast.Constant(-1)], []), node
                )
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in DTYPE_ALIASES:
            node.attr = DTYPE_ALIASES[node.attr]
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if node.keywords and all(k.arg is not None for k in node.keywords):  # keywords as positional values
            node.args = node.args + [k.value for k in sorted(node.keywords, key=lambda k: k.arg)]
            node.keywords = []
        func = node.func
        if isinstance(func, ast.Name) and func.id == "isinstance" and len(node.args) == 2:
            kind = node.args[1]
            if isinstance(kind, ast.Attribute) and kind.attr == "Tensor":
                return ast.copy_location(
                    ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "is_tensor", ast.Load()), node.args[:1], []),
                    node,
                )
        if not isinstance(func, ast.Attribute):
            return node
        if func.attr == "where" and len(node.args) == 3:  # torch.where(c, x, 0) is x.masked_fill(~c, 0)
            condition, then, other = node.args
            if _zeros(other) and not _zeros(then):
                filler = ast.Constant(0) if isinstance(other, ast.Call) else other
                inverted = self.visit(ast.UnaryOp(ast.Invert(), condition))
                masked = ast.Attribute(then, "masked_fill", ast.Load())
                return ast.copy_location(ast.Call(masked, [inverted, filler], []), node)
            if _zeros(then) and not _zeros(other):
                filler = ast.Constant(0) if isinstance(then, ast.Call) else then
                masked = ast.Attribute(other, "masked_fill", ast.Load())
                return ast.copy_location(ast.Call(masked, [condition, filler], []), node)
        if (
            func.attr == "logical_not"
            and not node.args
            and not (isinstance(func.value, ast.Name) and func.value.id == "torch")
        ):
            return ast.copy_location(ast.UnaryOp(ast.Invert(), func.value), node)
        if func.attr == "type" and len(node.args) == 1:
            func.attr = "to"
        name = ALIASES.get(func.attr, func.attr)
        module = isinstance(func.value, ast.Name) and func.value.id in ("torch", "F")
        if module and name in BINARY and len(node.args) == 2:
            return ast.copy_location(ast.BinOp(node.args[0], BINARY[name](), node.args[1]), node)
        if not module and name in BINARY and len(node.args) == 1:
            return ast.copy_location(ast.BinOp(func.value, BINARY[name](), node.args[0]), node)
        if module and name == "neg" and len(node.args) == 1:
            return ast.copy_location(ast.UnaryOp(ast.USub(), node.args[0]), node)
        if not module and name == "neg" and not node.args:
            return ast.copy_location(ast.UnaryOp(ast.USub(), func.value), node)
        if module and name == "square" and len(node.args) == 1:
            return ast.copy_location(ast.BinOp(node.args[0], ast.Pow(), ast.Constant(2)), node)
        if not module and name == "square" and not node.args:
            return ast.copy_location(ast.BinOp(func.value, ast.Pow(), ast.Constant(2)), node)
        if module and name in TENSOR_FUNCTIONS and node.args:
            func = ast.Attribute(node.args[0], name, ast.Load())
            node = ast.copy_location(ast.Call(func, node.args[1:], []), node)
            module = False
        if not module and name in DTYPE_METHODS and not node.args:
            dtype = ast.Attribute(ast.Name("torch", ast.Load()), DTYPE_METHODS[name], ast.Load())
            return ast.copy_location(ast.Call(ast.Attribute(func.value, "to", ast.Load()), [dtype], []), node)
        if not module and name == "size":
            shape = ast.Attribute(func.value, "shape", ast.Load())
            if not node.args:
                return ast.copy_location(shape, node)
            if len(node.args) == 1:
                return ast.copy_location(ast.Subscript(shape, node.args[0], ast.Load()), node)
        if not module and name == "dim" and not node.args:
            return ast.copy_location(ast.Attribute(func.value, "ndim", ast.Load()), node)
        if isinstance(node.func, ast.Attribute) and node.func.attr != name:
            node.func.attr = name
        return node


# ----------------------------------------------------------------------------------------------- canonical order
def _walk_outside_bodies(node: ast.AST):
    """``ast.walk`` that does not enter the bodies of function and class definitions (a definition runs none of
    its body: only its decorators and defaults)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(n.decorator_list)
            if not isinstance(n, ast.ClassDef):
                stack.extend([*n.args.defaults, *(d for d in n.args.kw_defaults if d is not None)])
            continue
        stack.extend(ast.iter_child_nodes(n))


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names read, names written) by a statement; a store into ``x[i]``/``x.a`` or a mutating method call on
    ``x`` writes ``x``; a definition writes its name and reads only its decorators and defaults."""
    read, written = set(), set()
    for n in _walk_outside_bodies(node):
        if isinstance(n, ast.Name):
            (read if isinstance(n.ctx, ast.Load) else written).add(n.id)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            base = n.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                written.add(base.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in MUTATING or n.func.attr.endswith("_"):
                base = n.func.value
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name):
                    written.add(base.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            written.add(n.name)
        elif isinstance(n, ast.alias):
            written.add((n.asname or n.name).split(".")[0])
    return read, written


def _barrier(statement: ast.stmt) -> bool:
    """A statement nothing moves across: it leaves the block (return, break, ...), yields, or is a call made for
    its effect (``loss.backward()``, ``optimizer.step()``)."""
    if isinstance(statement, ast.Expr):
        return True
    kinds = (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)
    return any(isinstance(n, kinds) for n in ast.walk(statement))


def _reorder(body: list[ast.stmt], key) -> list[ast.stmt]:
    """The block in its canonical order: among the statements whose dependencies are already placed, the one with
    the smallest canonical text goes first (a topological sort with a fixed tie-break)."""
    for statement in body:
        for field, block in list(blocks(statement)):
            setattr(statement, field, _reorder(block, key))
        for handler in getattr(statement, "handlers", []) or []:
            handler.body = _reorder(handler.body, key)
    if len(body) < 2 or len(body) > MAX_REORDER:
        return body
    info = [(*_names(s), _barrier(s)) for s in body]
    after: list[set[int]] = [set() for _ in body]  # after[j]: the statements j must follow
    for j in range(len(body)):
        read_j, write_j, barrier_j = info[j]
        for i in range(j):
            read_i, write_i, barrier_i = info[i]
            if barrier_i or barrier_j or write_i & (read_j | write_j) or read_i & write_j:
                after[j].add(i)
    keys = [key(s) for s in body]
    placed: list[int] = []
    done: set[int] = set()
    while len(placed) < len(body):
        ready = [j for j in range(len(body)) if j not in done and after[j] <= done]
        j = min(ready, key=lambda j: (keys[j], j))
        placed.append(j)
        done.add(j)
    return [body[j] for j in placed]


def canonical(tree: ast.Module, key: Callable[[ast.stmt], str]) -> ast.Module:
    """The canonical form of a parsed module (modified in place and returned); ``key``: a statement's canonical
    text, the tie-break of the order of independent statements."""
    tree.body = _prune(tree.body)
    for node in list(ast.walk(tree)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _drop_unread(node)
            node.body = _prune(node.body) or [ast.Pass()]
    tree = _Canonical().visit(tree)
    ast.fix_missing_locations(tree)
    tree.body = _reorder(tree.body, key)
    return tree
