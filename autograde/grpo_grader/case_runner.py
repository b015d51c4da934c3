"""The learner side of oracle grading: the oracle's cases called in the process that runs the learner's notebook.

In a pipeline grading this file's text goes, with the job (the cases' inputs: never an expectation), into the
sandboxed kernel that nbgrader drives, where ``install`` runs before any learner cell (``sandbox.py``); each test
cell the oracle grades then calls ``<ENTRY>("<test grade_id>", globals())`` where its hidden tests were
(``preprocessors.StripHiddenTests``): the learner's functions are called on the inputs in the notebook's own namespace,
and one JSON line per case goes to the results pipe that the grader reads with a size limit and a deadline. Outside
the pipeline ``oracles.run_in_kernel`` runs the same cases through ``make_runner`` in the kernel's own process.

Nothing here is trusted: the learner's code shares the process. What the grader reads is data (``wire.py``): the
value a call returned, what it left in its tensor inputs, the gradients it produced, the classes of what it raised;
the grader judges each of them on its side (``judging.py``), against its own copy of the inputs. So that no rebinding
of a learner's changes what is sent, ``make_runner`` captures everything it uses before the learner's code runs (in a
pipeline kernel: before the first cell): builtins (``type``, ``isinstance``, ``len``...), the unbound methods and getset
descriptors of ``torch._C.TensorBase`` (``tolist``, ``dtype``, ``shape``, ``grad``...), torch's functions, the C JSON
encoder, the descriptors of ``type`` (``__mro__``, ``__module__``, ``__qualname__``), ``os.write`` and the signal
functions; its own work runs with torch-function and dispatch modes off. No function defined here looks a name up in
its globals or in ``builtins`` at call time (``tests/test_case_runner.py`` checks it with ``symtable``). Only the
standard library and torch are used, and nothing is imported at the top: the text runs in the sandbox.
"""

ENTRY = "_grpo_grader_cases"  # the builtins name of a pipeline kernel's ``run_test``
MAX_DEPTH = 32  # nesting deeper than this in a returned value is sent as an object
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
CASE_SECONDS = 15  # the default limit of one call (a job's "case_timeout")


def dtype_table(torch) -> dict:
    """{name: torch dtype} of the dtypes a value may travel as (the grader's ``wire.DTYPES`` too)."""
    return {name: getattr(torch, name) for name in DTYPE_NAMES}


def make_runner(job: dict, write, torch=None):
    """``run_test(test, namespace)``: the cases of ``job`` (the wire format of ``wire.py``: ``{"cases": [...],
    "prelude": source or "", "case_timeout": seconds}``) mapped to the test cell ``test``, called on the functions of
    ``namespace`` (the notebook's globals), each result handed to ``write(line: bytes)`` as one JSON line. A test's
    cases run once (a second call does nothing). The prelude (an oracle's ``HARNESS``) runs at the first test, in a
    namespace of its own whose ``_NOTEBOOK`` is the notebook's. Everything used at call time is captured here."""
    import _json
    import builtins
    import signal
    import sys
    import threading

    if torch is None:
        import torch
    from torch.utils._python_dispatch import _disable_current_modes

    # ---- captured before any learner code: builtins, types, descriptors, functions
    _type, _len, _callable, _id, _str, _getattr = type, len, callable, id, str, getattr
    _list, _tuple, _dict, _set, _frozenset, _bool, _int, _float = list, tuple, dict, set, frozenset, bool, int, float
    _sorted, _repr, _exec, _compile, _all, _enumerate = sorted, repr, exec, compile, all, enumerate
    _BaseException, _KeyboardInterrupt, _TypeError, _missing = BaseException, KeyboardInterrupt, TypeError, object()
    max_depth = MAX_DEPTH
    _dict_get, _dict_items, _list_append, _set_add = dict.get, dict.items, list.append, set.add
    _str_join, _str_encode, _exc_str = str.join, str.encode, BaseException.__str__
    _mro_of = type.__dict__["__mro__"].__get__
    _module_of = type.__dict__["__module__"].__get__
    _qualname_of = type.__dict__["__qualname__"].__get__
    builtin_classes = {}  # id -> (class, name): the interpreter's own classes, known by identity
    for key, value in _dict_items(vars(builtins)):
        if isinstance(value, type):
            builtin_classes[_id(value)] = (value, key)
    _sys = sys
    _signal, _setitimer, _SIGALRM, _ITIMER_REAL = signal.signal, signal.setitimer, signal.SIGALRM, signal.ITIMER_REAL
    _current_thread, _main_thread = threading.current_thread, threading.main_thread
    _Tensor = torch.Tensor
    base = torch._C.TensorBase.__dict__
    _dtype_of, _shape_of, _grad_of = base["dtype"].__get__, base["shape"].__get__, base["grad"].__get__
    _tolist, _requires_grad_, _dim = base["tolist"], base["requires_grad_"], base["dim"]
    _tensor, _reshape, _mul, _sum, _to = torch.tensor, torch.reshape, torch.mul, torch.sum, base["to"]
    _backward = torch.autograd.backward
    _no_torch_function = torch._C.DisableTorchFunction
    dtypes = dtype_table(torch)
    dtype_names = {v: k for k, v in _dict_items(dtypes)}
    _float64, _bfloat16 = dtypes["float64"], dtypes["bfloat16"]

    def _refuse(value):
        raise _TypeError("not plain data")

    _encode_json = _json.make_encoder(None, _refuse, _json.encode_basestring_ascii, None, ":", ",", False, False, True)
    cases = _list(job.get("cases") or [])
    case_seconds = _float(job.get("case_timeout") or CASE_SECONDS)
    max_line = job.get("max_line")  # the grader parses no longer line (transport.MAX_LINE_BYTES)
    prelude = job.get("prelude") or ""
    harness = {}
    done_tests, hanging = _set(), _set()

    class CaseTimeout(_BaseException):
        pass

    class Sink:  # what the learner's functions print while a case runs: counted, never shown or sent
        size = 0

        def write(self, text):
            Sink.size += _len(text) if _type(text) is _str else 0
            return 0

        def flush(self):
            return None

        def isatty(self):
            return False

    sink = Sink()

    def on_alarm(_signum, _frame):
        raise CaseTimeout("运行超时（timeout）")

    # ---- plain data out (no learner code runs: exact types only, captured methods and descriptors)
    def flatten(data, dims):
        out = []
        stack = [(data, dims)]
        while stack:
            item, depth = stack.pop()
            if depth == 0:
                _list_append(out, item)
            else:
                for part in item[::-1]:
                    _list_append(stack, (part, depth - 1))
        return out

    def encode_tensor(value):
        dtype = _dtype_of(value)
        name = _dict_get(dtype_names, dtype)
        shape = _list(_shape_of(value))
        if name is None or _len(shape) > 8:
            return {"__object__": "torch.Tensor[其他 dtype 或维数]"}
        return {"__tensor__": name, "shape": shape, "data": flatten(_tolist(value), _len(shape))}

    def class_name(kind):
        module, qualname = _module_of(kind), _qualname_of(kind)
        module = module if _type(module) is _str else "?"
        qualname = qualname if _type(qualname) is _str else "?"
        return f"{module}.{qualname}"[:100]

    def encode(value, depth=0):
        if depth > max_depth:
            return {"__object__": "nested too deep"}
        kind = _type(value)
        if kind is _Tensor:
            return encode_tensor(value)
        if kind is _tuple:
            return {"__tuple__": [encode(v, depth + 1) for v in value]}
        if kind is _list:
            return [encode(v, depth + 1) for v in value]
        if kind is _dict:
            items = _list(_dict_items(value))
            if not _all(_type(k) is _str for k, _ in items):
                return {"__object__": "dict with non-str keys"}
            return {"__dict__": [[k, encode(v, depth + 1)] for k, v in items]}
        if kind is _bool or kind is _int or kind is _float or kind is _str or value is None:
            return value
        if kind is _set or kind is _frozenset:
            items = _list(value)
            if _all(_type(v) is _int or _type(v) is _float or _type(v) is _str for v in items):
                return {"__set__": _sorted(items, key=_repr)}
        if _module_of(kind) == "numpy" and _getattr(value, "ndim", None) == 0:
            item = value.item()  # a NumPy scalar or 0-d array: the plain number (the contract accepts both)
            if _type(item) is _bool or _type(item) is _int or _type(item) is _float:
                return item
        return {"__object__": class_name(kind)}

    def mro_pairs(kind):
        """[module, qualname] per class: ``builtins`` only for the interpreter's own classes (by identity)."""
        pairs = []
        for cls in _mro_of(kind):
            known = _dict_get(builtin_classes, _id(cls))
            if known is not None and known[0] is cls:
                _list_append(pairs, ["builtins", known[1]])
            else:
                module = _module_of(cls)
                module = module if _type(module) is _str else "?"
                qualname = _qualname_of(cls)
                qualname = qualname if _type(qualname) is _str else "?"
                _list_append(pairs, ["(learner) builtins" if module == "builtins" else module[:100], qualname[:100]])
        return pairs

    def raised(case_id, error):
        try:
            message = _exc_str(error)
            message = message[:300] if _type(message) is _str else ""
        except _BaseException:
            message = ""
        return {"case": case_id, "status": "raised", "mro": mro_pairs(_type(error)), "message": message}

    # ---- plain data in
    def decode(value):
        kind = _type(value)
        if kind is _dict:
            if "__tensor__" in value:
                dtype = dtypes[value["__tensor__"]]
                flat = _tensor(value["data"], dtype=_float64 if dtype is _bfloat16 else dtype)
                return _reshape(_to(flat, dtype), value["shape"])
            if "__dtype__" in value:
                return dtypes[value["__dtype__"]]
            if "__tuple__" in value:
                return _tuple([decode(v) for v in value["__tuple__"]])
            if "__dict__" in value:
                return {k: decode(v) for k, v in value["__dict__"]}
        if kind is _list:
            return [decode(v) for v in value]
        return value

    def emit(record):
        try:
            line = _str_join("", _encode_json(record, 0))
        except _BaseException as error:
            line = _str_join("", _encode_json(raised(record.get("case"), error), 0))
        if max_line is not None and _len(line) > max_line:  # a value too large to send: said so, not cut
            too_large = {"case": record.get("case"), "status": "raised", "mro": [["builtins", "MemoryError"]]}
            line = _str_join("", _encode_json({**too_large, "message": "返回值过大，无法送回（value too large）"}, 0))
        write(_str_encode(line + "\n"))

    # ---- one case
    def tensor_inputs(args, kwargs):
        return {
            "args": {_str(i): encode_tensor(a) for i, a in _enumerate(args) if _type(a) is _Tensor},
            "kwargs": {k: encode_tensor(v) for k, v in _dict_items(kwargs) if _type(v) is _Tensor},
        }

    def backward(case, value, args):
        spec = case.get("backward") or {}
        output = spec.get("output")
        target = value
        if output is not None:
            if _type(value) is _tuple or _type(value) is _list:
                target = value[output] if 0 <= output < _len(value) else None
            elif _type(value) is _dict:
                target = _dict_get(value, output)
            else:
                target = None
        if _type(target) is not _Tensor:
            return {"grad_error": "结果不是可以反向传播的张量（not a tensor to differentiate）"}
        weights = spec.get("weights")
        with _disable_current_modes():
            if weights is not None:
                weights = decode(weights)
                target = _sum(_mul(_to(target, _dtype_of(weights)), weights))
            elif _dim(target) > 0:
                target = _sum(target)
            _backward(target)
        return {
            "grads": {
                _str(i): None if _grad_of(args[i]) is None else encode_tensor(_grad_of(args[i]))
                for i in case.get("grad") or []
            }
        }

    def call(case, function):
        with _disable_current_modes():
            args = [decode(a) for a in case.get("args") or []]
            kwargs = {k: decode(v) for k, v in _dict_items(case.get("kwargs") or {})}
            for index in case.get("grad") or []:
                _requires_grad_(args[index], True)
        try:
            value = function(*args, **kwargs)
        except CaseTimeout as error:
            _set_add(hanging, case["call"])
            return raised(case["id"], error)
        except _KeyboardInterrupt as error:  # the cell's time limit (nbclient interrupts the kernel): stop here
            emit(raised(case["id"], error))
            raise
        except _BaseException as error:
            return raised(case["id"], error)
        record = {"case": case["id"], "status": "returned"}
        with _no_torch_function():
            record["value"] = encode(value)
            record["inputs"] = tensor_inputs(args, kwargs)
        if case.get("backward"):
            try:
                record.update(backward(case, value, args))
            except CaseTimeout:
                _set_add(hanging, case["call"])
                record["grad_error"] = "运行超时（timeout）"
            except _KeyboardInterrupt:
                emit(record)
                raise
            except _BaseException as error:
                record["grad_error"] = f"{class_name(_type(error))}: {raised('', error)['message'][:200]}"
        return record

    def run_case(case, namespace):
        name = case["call"]
        if case.get("read"):  # a variable the answer cell sets
            value = _dict_get(namespace, name, _missing)
            if value is _missing:
                return {"case": case["id"], "status": "missing"}
            with _no_torch_function():
                return {"case": case["id"], "status": "returned", "value": encode(value)}
        function = _dict_get(harness, name) or _dict_get(namespace, name)
        if not _callable(function):
            return {"case": case["id"], "status": "missing"}
        if name in hanging:
            return {
                "case": case["id"],
                "status": "raised",
                "mro": [["builtins", "TimeoutError"]],
                "message": "此前的用例已超时，未再运行（an earlier case timed out）",
            }
        timed = _current_thread() is _main_thread()  # signals reach the main thread only
        if timed:
            previous = _signal(_SIGALRM, on_alarm)
            _setitimer(_ITIMER_REAL, case_seconds)
        stdout, stderr = _sys.stdout, _sys.stderr
        _sys.stdout = _sys.stderr = sink
        try:
            return call(case, function)
        finally:
            if timed:
                _setitimer(_ITIMER_REAL, 0)
                _signal(_SIGALRM, previous)
            _sys.stdout, _sys.stderr = stdout, stderr

    def run_test(test, namespace):
        """Run the cases of test cell ``test`` on ``namespace``'s functions; their records go to ``write``."""
        if test in done_tests:
            return None
        _set_add(done_tests, test)
        if prelude and not harness:
            _exec(_compile(prelude, "<oracle harness>", "exec"), harness)
            harness["_NOTEBOOK"] = namespace  # where the harness finds the learner's functions
        count = 0
        for case in cases:
            if case.get("after") != test:
                continue
            try:
                record = run_case(case, namespace)
            except _KeyboardInterrupt:
                raise
            except _BaseException as error:  # even encoding failed
                record = raised(case["id"], error)
            emit(record)
            count += 1
        return count

    return run_test


def install(job: dict, results_fd: int) -> None:
    """In a pipeline kernel, before any learner code (``sandbox.py``): the runner of ``job``, writing to
    ``results_fd`` (a pipe the grader reads), as ``builtins.<ENTRY>``; a test cell's call prints how many cases ran
    (their verdicts are the grader's, made outside the kernel)."""
    import builtins
    import os

    _write, _print, _BrokenPipe = os.write, print, BrokenPipeError

    def write(data):
        while data:
            data = data[_write(results_fd, data) :]

    run_test = make_runner(job, write)

    def cases_of(test, namespace):
        try:
            count = run_test(test, namespace)
        except _BrokenPipe:  # the grader closed its end (past its size limit): nothing more to send
            count = None
        if count:
            _print(
                f"[评分器] 运行了 {count} 个评分用例，判定在学员内核之外（grader: {count} cases run, judged outside this kernel）"
            )

    setattr(builtins, ENTRY, cases_of)


def main(argv: list[str]) -> None:
    """A graded notebook's kernel in a sandbox of its own (``sandbox._kernel_command`` runs this file's text): the
    job read from descriptor ``argv[1]``, the runner installed writing to ``argv[0]``, then ipykernel with the rest
    of ``argv`` (as ``python -m ipykernel_launcher`` would run it)."""
    import json
    import os
    import sys

    with os.fdopen(int(argv[1]), "rb") as handle:
        job = json.loads(handle.read())
    if sys.path and sys.path[0] == "":  # -c put the working folder first; ipykernel_launcher removes it too
        del sys.path[0]
    install(job, int(argv[0]))
    import ipykernel_launcher
    from ipykernel import kernelapp

    sys.argv = [ipykernel_launcher.__file__, *argv[2:]]
    kernelapp.launch_new_instance(argv=argv[2:])


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
