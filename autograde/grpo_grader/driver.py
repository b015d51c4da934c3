"""The learner side of oracle grading: run the learner's notebook, call the functions on the given inputs.

Started by the grading pipeline inside the kernel sandbox (the same one nbgrader's kernels get), as
``python driver.py <job folder> [results fd]``, with a copy of this file in the (read-only) job folder. It reads
``<job>/job.json`` = ``{"cells": [{"id", "source"} or {"id", "test": true}], "cases": [...], "cell_timeout",
"case_timeout"}``, runs the cells in order in one IPython shell (magics work; a failing cell is recorded and the
next one runs); where a test cell stood, it calls the function of each case of that test (cases whose test cell is
not there run at the end), and writes one JSON line per cell and per case to the results fd: a pipe the grader
opened and reads with a size limit and a deadline (without one, ``<job>/results.jsonl``: tests only).

Nothing here is trusted: the learner's code runs in this process and may change anything in it. The job holds
inputs only; the expected values and the comparison stay in the grader's process (``judging.py``), which
reads these lines as plain data. Only the standard library and torch (and IPython to run cells) are used.
"""

import json
import os
import signal
import sys
import time

_dumps = json.dumps
_MAX_DEPTH = 32
_MAX_LINE = 8 * 2**20


class _Sink:
    """stdout/stderr of the learner's code: kept small, never sent anywhere."""

    def __init__(self):
        self.size = 0

    def write(self, text):
        self.size += len(text)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


class CellTimeout(BaseException):
    pass


def _alarm(_signum, _frame):
    raise CellTimeout("运行超时（timeout）")


def dtype_table(torch) -> dict:
    """{name: torch dtype} of the dtypes a value may travel as (the grader's ``oracle.DTYPES`` too)."""
    return {
        name: getattr(torch, name)
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")
    }


def make_codec(torch):
    """(encode, decode) between the learner's values and the plain data format of ``wire.py``: only exact
    ``torch.Tensor``, tuple, list, dict with str keys, set, bool/int/float/str/None - and NumPy scalars or 0-d
    arrays, sent as the Python number their ``.item()`` gives - are sent as themselves; anything else becomes
    ``{"__object__": type name}``. A function of ``torch`` so that this file imports nothing heavy at the top."""
    tensor_type = torch.Tensor
    dtypes = dtype_table(torch)
    names = {v: k for k, v in dtypes.items()}

    def decode(value):
        if isinstance(value, dict):
            if "__tensor__" in value:
                dtype = dtypes[value["__tensor__"]]
                flat = torch.tensor(value["data"], dtype=torch.float64 if dtype == torch.bfloat16 else dtype)
                return flat.to(dtype).reshape(value["shape"])
            if "__dtype__" in value:
                return dtypes[value["__dtype__"]]
            if "__tuple__" in value:
                return tuple(decode(v) for v in value["__tuple__"])
            if "__dict__" in value:
                return {k: decode(v) for k, v in value["__dict__"]}
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    def encode(value, depth=0):
        if depth > _MAX_DEPTH:
            return {"__object__": "nested too deep"}
        kind = type(value)
        if kind is tensor_type:
            value = value.detach().cpu()
            if value.dtype not in names or value.dim() > 8:
                return {"__object__": f"torch.Tensor[{value.dtype}]"}
            flat = value.reshape(-1)
            if value.dtype == torch.bfloat16:
                flat = flat.float()
            return {"__tensor__": names[value.dtype], "shape": list(value.shape), "data": flat.tolist()}
        if kind is tuple:
            return {"__tuple__": [encode(v, depth + 1) for v in value]}
        if kind is list:
            return [encode(v, depth + 1) for v in value]
        if kind is dict:
            if not all(type(k) is str for k in value):
                return {"__object__": "dict with non-str keys"}
            return {"__dict__": [[k, encode(v, depth + 1)] for k, v in value.items()]}
        if kind in (bool, int, float, str) or value is None:
            return value
        if kind.__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
            item = value.item()  # a NumPy scalar or 0-d array: the plain number (the contract accepts both)
            if type(item) in (bool, int, float):
                return item
        if kind in (set, frozenset):
            items = list(value)
            if all(type(v) in (int, float, str) for v in items):
                return {"__set__": sorted(items, key=repr)}
        return {"__object__": f"{kind.__module__}.{kind.__qualname__}"[:100]}

    return encode, decode


def error_record(error):
    return {"type": type(error).__name__, "mro": [c.__name__ for c in type(error).__mro__], "message": str(error)[:300]}


def make_case_runner(torch, namespace, cell_errors=None, case_timeout=None, sink=None):
    """``run_case(case) -> record``: one case of the job format called on the function ``namespace`` holds (or the
    variable it names, for a ``read`` case), its value, gradients and written-into arguments as plain data - the one
    runner of a case, used by this driver and by the in-kernel run of a test cell (``oracles.run_in_kernel``).
    ``cell_errors`` ({cell id: message}) explains a missing function; ``case_timeout`` (seconds, SIGALRM) stops a
    call that hangs, and its function's later cases are not run; ``sink`` takes stdout/stderr back after a call."""
    tensor_type = torch.Tensor
    encode, decode = make_codec(torch)
    cell_errors = {} if cell_errors is None else cell_errors
    hanging = set()  # functions that ran past the case time limit: their later cases are not run
    missing = object()

    def same(a, b):
        """Equal values (NaN where NaN), shape and dtype: the argument was not written into."""
        a = a.detach()
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            holes = torch.isnan(b)
            return torch.equal(torch.isnan(a), holes) and torch.equal(a.masked_fill(holes, 0), b.masked_fill(holes, 0))
        return torch.equal(a, b)

    def run_case(case):
        name = case["call"]
        if case.get("read"):  # a variable the answer cell sets
            value = namespace.get(name, missing)
            if value is missing:
                return {"case": case["id"], "status": "missing", "message": "; ".join(cell_errors.values())[:300]}
            return {"case": case["id"], "status": "returned", "value": encode(value)}
        function = namespace.get(name)
        if not callable(function):
            return {
                "case": case["id"],
                "status": "missing",
                "message": "; ".join(cell_errors.values())[:300] or "not defined",
            }
        if name in hanging:
            return {
                "case": case["id"],
                "status": "raised",
                "type": "CellTimeout",
                "mro": ["CellTimeout"],
                "message": "此前的用例已超时，未再运行（an earlier case timed out）",
            }
        if case_timeout:
            signal.alarm(case_timeout)
        try:
            args = [decode(a) for a in case["args"]]
            kwargs = {k: decode(v) for k, v in case["kwargs"].items()}
            for index in case.get("grad") or []:
                args[index] = args[index].detach().clone().requires_grad_(True)
            before = {i: a.detach().clone() for i, a in enumerate(args) if type(a) is tensor_type}
            try:
                value = function(*args, **kwargs)
            except CellTimeout as error:
                hanging.add(name)
                return {"case": case["id"], "status": "raised", **error_record(error)}
            except BaseException as error:
                return {"case": case["id"], "status": "raised", **error_record(error)}
            record = {"case": case["id"], "status": "returned", "value": encode(value)}
            backward = case.get("backward")
            if backward:
                try:
                    target = value if backward.get("output") is None else value[backward["output"]]
                    weights = backward.get("weights")
                    if weights is not None:
                        weights = decode(weights)
                        target = (target.to(weights.dtype) * weights).sum()
                    elif target.dim() > 0:
                        target = target.sum()
                    target.backward()
                    record["grads"] = {
                        str(i): None if args[i].grad is None else encode(args[i].grad) for i in case["grad"]
                    }
                except CellTimeout:
                    hanging.add(name)
                    record["grad_error"] = "CellTimeout: 运行超时（timeout）"
                except BaseException as error:
                    record["grad_error"] = f"{type(error).__name__}: {str(error)[:200]}"
            record["mutated"] = [i for i, b in before.items() if type(args[i]) is tensor_type and not same(args[i], b)]
            return record
        except BaseException as error:  # the function's value could not even be read
            if isinstance(error, CellTimeout):
                hanging.add(name)
            return {"case": case["id"], "status": "raised", **error_record(error)}
        finally:
            if case_timeout:
                signal.alarm(0)
            if sink is not None:
                sys.stdout = sys.stderr = sink

    return run_case


def main(job_dir, results_fd=None):
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as handle:
        job = json.load(handle)
    if results_fd is None:
        out = open(os.path.join(job_dir, "results.jsonl"), "a", encoding="utf-8")
    else:
        out = os.fdopen(int(results_fd), "w", encoding="utf-8")

    def emit(record):
        try:
            line = _dumps(record, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as error:
            line = _dumps(
                {k: record[k] for k in ("case", "cell") if k in record}
                | {"status": "raised", "type": "EncodeError", "mro": [], "message": str(error)[:200]}
            )
        if len(line) > _MAX_LINE:
            line = _dumps(
                {k: record[k] for k in ("case", "cell") if k in record}
                | {"status": "raised", "type": "OutputTooLarge", "mro": [], "message": "返回值过大"}
            )
        out.write(line + "\n")
        out.flush()

    import torch
    from IPython.core.interactiveshell import InteractiveShell

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1") or 1))
    sink = _Sink()
    real_stdout, real_stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = sink
    signal.signal(signal.SIGALRM, _alarm)

    class Shell(InteractiveShell):  # no GUI: `%matplotlib inline` and friends become no-ops
        def enable_gui(self, gui=None):
            return None

        def enable_matplotlib(self, gui=None):
            return "agg", "agg"

    shell = Shell.instance()
    namespace = shell.user_ns
    cell_errors = {}
    run_case = make_case_runner(torch, namespace, cell_errors, int(job.get("case_timeout", 15)), sink)

    cell_ids = {cell["id"] for cell in job["cells"]}
    pending = {}
    for case in job["cases"]:  # each case runs where its test cell stands, as the test cell would
        after = case.get("after") if case.get("after") in cell_ids else None
        pending.setdefault(after, []).append(case)

    def run_pending(key):
        for case in pending.pop(key, []):
            try:
                emit(run_case(case))
            except BaseException as error:  # even encoding failed
                emit({"case": case["id"], "status": "raised", **error_record(error)})

    for cell in job["cells"]:
        if cell.get("test"):  # where the learner's notebook has this test cell: its cases run now
            run_pending(cell["id"])
            continue
        started = time.monotonic()
        signal.alarm(int(job.get("cell_timeout", 60)))
        try:
            result = shell.run_cell(cell["source"], store_history=False, silent=True)
            error = result.error_before_exec or result.error_in_exec
        except BaseException as caught:  # a timeout, or what IPython lets through
            error = caught
        finally:
            signal.alarm(0)
        sys.stdout = sys.stderr = sink
        record = {"cell": cell["id"], "ok": error is None, "seconds": round(time.monotonic() - started, 3)}
        if error is not None:
            record.update(error_record(error))
            cell_errors[cell["id"]] = f"{type(error).__name__}: {str(error)[:200]}"
        emit(record)
        run_pending(cell["id"])
    run_pending(None)
    sys.stdout, sys.stderr = real_stdout, real_stderr
    emit({"cell": "__done__", "ok": True, "printed": sink.size})
    out.close()
    os._exit(0)  # no atexit hooks or finalisers of the learner's code run after the last line


if __name__ == "__main__":
    main(*sys.argv[1:3])
