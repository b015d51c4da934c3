"""The learner-side runner gives a learner's patches nothing to work on, and every verdict is the grader's.

``case_runner.make_runner`` captures what it uses before the learner's code runs; the grader judges what it sends
(the returned value, what the call left in its tensor inputs, the gradients, the raised classes as (module, qualname)
pairs) against its own expectations and its own copy of the inputs. For each field the judge reads, a learner who
patches the function a runner would use to fill it (``torch.equal``, ``Tensor.tolist``, ``Tensor.dtype``,
``Tensor.shape``, ``builtins.type``, ``json.dumps``, ``Tensor.grad``, ``Tensor.backward``,
an exception's ``__module__``/``__qualname__``, a metaclass ``__mro__``, a torch function mode) to hide a known bug
gains nothing; the same patch does fool a runner that looks those functions up when it runs (the meta-check that each
patch is a real attack). And no function of the runner looks a name up in its globals or builtins at call time."""

from __future__ import annotations

import json
import os
import subprocess
import symtable
import sys
from pathlib import Path

import pytest
import torch

from autograde.grpo_grader import case_runner, judging
from autograde.grpo_grader.vocabulary import Case, Close, NoGrad, Raises

X = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
A, B = torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([3.0, -1.0], dtype=torch.float64)
CASES = {  # a correct function passes each; every scenario's learner function has one bug
    "value": Case("t", "f", (X,), {}, Close(X * 2)),
    "grad": Case("t", "f", (A, B), {}, Close((A * B).sum()), grads={0: Close(B), 1: NoGrad()}),
    "raises": Case("t", "f", (X,), {}, Raises("ValueError")),
}
for index, case in enumerate(CASES.values()):
    case.id, case.after = f"t#{index}", "t"

# scenario: (case, the learner's code after the runner is in place: a function f with a bug and a patch that would
# hide it from a runner that looked things up at call time)
SCENARIOS = {
    "torch.equal": (
        "value",
        "def f(x):\n    y = x * 2\n    x.mul_(0)\n    return y\ntorch.equal = lambda *a, **k: True",
    ),
    "Tensor.tolist": (
        "value",
        "SAVED = {}\n_real = torch.Tensor.tolist\n"  # (the tensor kept alive with its data: an id is never reused)
        "def f(x):\n    SAVED[id(x)] = (x, _real(x))\n    y = x * 2\n    x.mul_(0)\n    return y\n"
        "torch.Tensor.tolist = lambda self: SAVED[id(self)][1] if SAVED.get(id(self), (None,))[0] is self "
        "else _real(self)",
    ),
    "Tensor.dtype": (
        "value",
        "def f(x):\n    return (x * 2).float()\ntorch.Tensor.dtype = property(lambda self: torch.float64)",
    ),
    "Tensor.shape": (
        "value",
        "def f(x):\n    return (x * 2).reshape(-1, 1)\ntorch.Tensor.shape = property(lambda self: torch.Size([3]))",
    ),
    "builtins.type": (
        "value",
        "class Sub(torch.Tensor):\n    pass\n"
        "def f(x):\n    return (x * 2).as_subclass(Sub)\n"
        "import builtins\n_type = builtins.type\n"
        "builtins.type = lambda o, *a: torch.Tensor if not a and isinstance(o, Sub) else _type(o, *a)",
    ),
    "json.dumps": (
        "value",
        "import json\n_dumps = json.dumps\nSAVED = {}\n"
        "def f(x):\n    SAVED['x'] = x.tolist()\n    y = x * 2\n    x.mul_(0)\n    return y\n"
        "def dumps(obj, **kw):\n    if isinstance(obj, dict) and 'inputs' in obj:\n"
        "        obj['inputs']['args']['0']['data'] = SAVED['x']\n    return _dumps(obj, **kw)\n"
        "json.dumps = dumps",
    ),
    "Tensor.grad": (
        "grad",
        "LEAK = set()\n_grad = torch.Tensor.grad\n"
        "def f(a, b):\n    LEAK.add(id(b))\n    return (a * b).sum()\n"
        "torch.Tensor.grad = property(lambda self: None if id(self) in LEAK else _grad.__get__(self))",
    ),
    "Tensor.backward": (
        "grad",
        "ONLY = []\n"
        "def f(a, b):\n    ONLY.append(a)\n    return (a * b).sum()\n"
        "torch.Tensor.backward = lambda self, *x, **k: torch.autograd.backward(self, inputs=ONLY)",
    ),
    "exception __module__": (
        "raises",
        "class E(TypeError):\n    pass\nE.__module__, E.__qualname__, E.__name__ = 'builtins', 'ValueError', 'ValueError'\n"
        "def f(x):\n    raise E('not the contract')",
    ),
    "metaclass __mro__": (
        "raises",
        "class Meta(type):\n    __mro__ = property(lambda cls: (cls, ValueError, Exception, BaseException, object))\n"
        "class E(TypeError, metaclass=Meta):\n    pass\n"
        "def f(x):\n    raise E('not the contract')",
    ),
    "torch function mode": (
        "value",
        "from torch.overrides import TorchFunctionMode\nSAVED = {}\n"
        "def f(x):\n    SAVED[id(x)] = (x, x.tolist())\n    y = x * 2\n    x.mul_(0)\n    return y\n"
        "class M(TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        if getattr(func, '__name__', '') == 'tolist' and SAVED.get(id(args[0]), (None,))[0] is args[0]:\n"
        "            return SAVED[id(args[0])][1]\n"
        "        return func(*args, **(kwargs or {}))\n"
        "M().__enter__()",
    ),
}

# The child: the runner is made first (before any learner code), then each scenario in a fork of its own: the
# learner's code, then the real runner and a runner that looks everything up at call time, each on the case.
CHILD = r'''
import json, os, sys
import torch
from autograde.grpo_grader import case_runner

job, scenarios = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
_dumps, _loads = json.dumps, json.loads
NAMES = {v: k for k, v in case_runner.dtype_table(torch).items()}

def naive(case, f):
    """A runner that looks every function up when it runs (what the scenario's patch aims at)."""
    args = [torch.tensor(a["data"], dtype=getattr(torch, a["__tensor__"])).reshape(a["shape"]) for a in case["args"]]
    for i in case["grad"]:
        args[i].requires_grad_(True)
    before = [a.detach().clone() for a in args]
    def flat(data):
        return [x for part in data for x in flat(part)] if isinstance(data, list) else [data]
    def enc(v):
        if type(v) is torch.Tensor:
            return {"__tensor__": NAMES[v.dtype], "shape": list(v.shape), "data": flat(v.tolist())}
        return {"__object__": type(v).__name__}
    try:
        value = f(*args)
    except BaseException as e:
        mro = [[c.__module__, c.__qualname__] for c in type(e).__mro__]
        return json.dumps({"case": case["id"], "status": "raised", "mro": mro, "message": str(e)})
    record = {"case": case["id"], "status": "returned", "value": enc(value), "inputs": {"args": {}, "kwargs": {}}}
    for i, a in enumerate(args):  # "unchanged" decided here, with torch.equal, as a runner once did
        record["inputs"]["args"][str(i)] = enc(before[i] if torch.equal(a.detach(), before[i]) else a)
    if case["grad"]:
        value.backward()
        record["grads"] = {str(i): None if args[i].grad is None else enc(args[i].grad) for i in case["grad"]}
    return json.dumps(record)

out = {}
for name, (case_name, code) in scenarios.items():
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        lines = []
        run_test = case_runner.make_runner(job[case_name], lines.append)  # before the learner's code
        namespace = {"torch": torch}
        exec(code, namespace)
        run_test("t", namespace)
        case = job[case_name]["cases"][0]
        answer = {"real": lines[0].decode(), "naive": naive(case, namespace["f"])}
        os.write(write, _dumps(answer).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.waitpid(pid, 0)
    out[name] = _loads(data)
print(_dumps(out))
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """{scenario: {"real": record of the runner, "naive": record of a call-time runner}}, from one child process."""
    folder = tmp_path_factory.mktemp("runner")
    job = {name: {"cases": [case.wire()], "case_timeout": 30} for name, case in CASES.items()}
    (folder / "job.json").write_text(json.dumps(job))
    (folder / "scenarios.json").write_text(json.dumps(SCENARIOS))
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder / "job.json"), str(folder / "scenarios.json")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: {k: json.loads(v) for k, v in pair.items()} for name, pair in json.loads(done.stdout).items()}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_a_patch_gains_nothing(records, scenario):
    case = CASES[SCENARIOS[scenario][0]]
    real, naive = records[scenario]["real"], records[scenario]["naive"]
    assert judging.judge(case, naive, "")[0], f"the patch does not even fool a call-time runner: {naive}"
    passed, message = judging.judge(case, real, "")
    assert not passed, f"{scenario}: the learner's patch hid the bug: {real}"
    assert message


def test_honest_functions_pass_through_the_runner():
    """The same cases pass for correct functions (the scenarios' failures are the bugs, not the runner)."""
    lines = []
    job = {"cases": [c.wire() for c in CASES.values()]}
    namespace = {}
    run_test = case_runner.make_runner(job, lines.append)

    def f(*args):
        if len(args) == 2:
            return (args[0] * args[1].detach()).sum()
        if case_runner is not None and getattr(f, "raise_next", False):
            raise ValueError("contract")
        f.raise_next = True
        return args[0] * 2

    namespace["f"] = f
    run_test("t", namespace)
    records = [json.loads(line) for line in lines]
    verdicts = [judging.judge(case, record, "") for case, record in zip(CASES.values(), records)]
    assert all(ok for ok, _ in verdicts), verdicts


def _global_lookups(source: str, function: str) -> list[str]:
    """Names that a function nested in ``function`` of ``source`` looks up in its globals or builtins at call time."""
    table = symtable.symtable(source, "<runner>", "exec")
    top = next(child for child in table.get_children() if child.get_name() == function)
    found, scopes = [], list(top.get_children())
    while scopes:
        scope = scopes.pop()
        found += [f"{scope.get_name()}: {s.get_name()}" for s in scope.get_symbols() if s.is_global()]
        scopes.extend(scope.get_children())
    return found


def test_the_runner_looks_nothing_up_at_call_time():
    """Every function ``make_runner`` defines uses only what it captured (closure cells), never a global or builtin
    a learner could rebind; the check finds a builtin used in such a function (here ``len``)."""
    source = Path(case_runner.__file__).read_text(encoding="utf-8")
    assert _global_lookups(source, "make_runner") == []
    assert _global_lookups(source, "install") == []
    mutated = source.replace("flatten(_tolist(value), _len(shape))", "flatten(_tolist(value), len(shape))")
    assert mutated != source and _global_lookups(mutated, "make_runner") == ["encode_tensor: len"]


def test_a_value_too_large_to_send_is_said_so():
    """A record longer than the grader parses (``max_line``: ``transport.MAX_LINE_BYTES`` in a grading job) goes as a
    short "too large" record for that case, never as a line the grader would skip without naming the case."""
    lines = []
    job = {"cases": [CASES["value"].wire()], "max_line": 1000}
    case_runner.make_runner(job, lines.append)("t", {"f": lambda x: torch.zeros(10_000, dtype=torch.float64)})
    record = json.loads(lines[0])
    assert len(lines[0]) < 1000 and record["case"] == CASES["value"].id and record["status"] == "raised"
    passed, message = judging.judge(CASES["value"], record, "")
    assert not passed and "MemoryError" in message and "过大" in message
