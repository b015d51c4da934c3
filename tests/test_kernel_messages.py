"""A grading kernel that sends malformed messages fails the cells they arrive in, never the notebook.

The kinds: every way nbformat's output schema rejects an output (each field of each output type missing, each field
of a wrong type: ``data`` that is not a dict, a number as ``text/plain``, a string or negative ``execution_count``,
an integer ``ename``...), content that is not a dict, a ``transient`` that is not a dict, an ``execute_input`` with a
string count, a ``status`` without its state, a malformed ``update_display_data``, and ``execute_reply`` contents
whose error fields nbgrader copies into the notebook. Each kind is a real failure of plain nbclient/nbgrader (checked
on the messages themselves, no kernel). One real ipykernel then sends every kind, one cell each, through
``SafeExecute``: each of those cells gets an error output naming what was dropped, the notebook validates, every later
cell runs, and messages no cell can be told of (no readable header, no parent) are skipped. A test cell whose code
publishes a value far above its points keeps it as a display, and nbgrader's grade of the cell does not fail on it."""

from __future__ import annotations

import copy
import json

import nbformat
import pytest

from autograde.grpo_grader.kernel_messages import MALFORMED, OUTPUT_FIELDS
from autograde.grpo_grader.preprocessors import SafeExecute

HELPERS = """
from IPython import get_ipython
from jupyter_client.session import DELIM
_kernel = get_ipython().kernel

def _send(msg_type, content):
    _kernel.session.send(_kernel.iopub_socket, msg_type, content, parent=_kernel.get_parent("shell"))

def _send_raw(header, parent, content):
    session = _kernel.session
    parts = [session.pack(header), session.pack(parent), session.pack({}), session.pack(content)]
    _kernel.iopub_socket.send_multipart([b"raw", DELIM, session.sign(parts), *parts])

def _arm_reply(changes):
    original = _kernel.do_execute

    async def once(*args, **kwargs):
        _kernel.do_execute = original
        reply = original(*args, **kwargs)
        if hasattr(reply, "__await__"):
            reply = await reply
        return {**reply, **changes}

    _kernel.do_execute = once
"""

VALID = {
    "execute_result": {"data": {"text/plain": "1"}, "metadata": {}, "execution_count": 1},
    "display_data": {"data": {"text/plain": "1"}, "metadata": {}},
    "stream": {"name": "stdout", "text": "x\n"},
    "error": {"ename": "E", "evalue": "v", "traceback": ["t"]},
}
# values of the wrong kind for each field of nbformat's output schema
WRONG = {
    "data": [[1], {"text/plain": 5}, {"text/plain": ["a", 1]}, {"image/png": {"x": 1}}],
    "metadata": [3],
    "execution_count": ["7", -1, 1.5],
    "name": [1],
    "text": [5, ["a", 2]],
    "ename": [5],
    "evalue": [None],
    "traceback": ["t", [1]],
}


def _iopub_kinds() -> dict[str, list[tuple[str, object]]]:
    """{kind: the iopub messages (type, content) of one cell}."""
    kinds = {}
    for msg_type, valid in VALID.items():
        for field in OUTPUT_FIELDS[msg_type]:
            kinds[f"{msg_type} without {field}"] = [(msg_type, {k: v for k, v in valid.items() if k != field})]
            for index, value in enumerate(WRONG[field]):
                kinds[f"{msg_type} {field} wrong {index}"] = [(msg_type, {**valid, field: value})]
    kinds["content not a dict"] = [("display_data", [1, 2])]
    kinds["transient not a dict"] = [("display_data", {**VALID["display_data"], "transient": [1]})]
    kinds["execute_input count a string"] = [("execute_input", {"code": "x", "execution_count": "x"})]
    kinds["status without a state"] = [("status", {})]
    shown = {**VALID["display_data"], "transient": {"display_id": "d"}}
    kinds["update_display_data data a number"] = [
        ("display_data", shown),
        ("update_display_data", {**shown, "data": 5}),
    ]
    return kinds


IOPUB = _iopub_kinds()
REPLY = {  # execute_reply content changes (nbgrader copies an error reply's fields into the cell)
    "reply ename an integer": {"status": "error", "ename": 5, "evalue": "v", "traceback": []},
    "reply traceback a string": {"status": "error", "ename": "E", "evalue": "v", "traceback": "t"},
}
# messages no cell can be told of (no readable header, or no parent to attribute them to): skipped, the cell goes on
UNATTRIBUTABLE = {
    "header without msg_type": "_send_raw({'msg_id': 'r1'}, {}, {})",
    "parent header a list": "_send_raw({'msg_id': 'r2', 'msg_type': 'stream'}, [1], {'name': 'stdout', 'text': 'x'})",
}


def _send_line(msg_type: str, content) -> str:
    sent = repr(json.dumps(content)) if not isinstance(content, dict) else repr(content)  # a str: sent raw
    return f"_send({msg_type!r}, {sent})"


def _notebook() -> tuple[nbformat.NotebookNode, dict[str, int]]:
    cells, where = [nbformat.v4.new_code_cell(HELPERS)], {}

    def add(source: str) -> int:
        cells.append(nbformat.v4.new_code_cell(source + "\nprint('after')"))
        return len(cells) - 1

    for kind, messages in IOPUB.items():
        where[kind] = add("\n".join(_send_line(t, c) for t, c in messages))
    for kind, changes in REPLY.items():
        add(f"_arm_reply({changes!r})")
        where[kind] = add("print('the reply of this cell is malformed')")
    for kind, source in UNATTRIBUTABLE.items():
        where[kind] = add(source)
    test = nbformat.v4.new_code_cell(
        "get_ipython().displayhook(10**9)",
        metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t", "points": 2, "locked": True}},
    )
    cells += [test, nbformat.v4.new_code_cell("print('still running')")]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb, where


@pytest.fixture(scope="module")
def executed():
    nb, where = _notebook()
    executor = SafeExecute(timeout=60, iopub_timeout=5, kernel_name="python3")
    done, _ = executor.preprocess(copy.deepcopy(nb), {"nbgrader": {"assignment": "x"}, "metadata": {"path": "."}})
    return done, where


@pytest.mark.parametrize("kind", sorted([*IOPUB, *REPLY]))
def test_a_malformed_message_fails_its_cell_only(executed, kind):
    done, where = executed
    cell = done.cells[where[kind]]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert errors and errors[0].ename == MALFORMED and "已丢弃" in errors[0].evalue, cell.outputs
    assert any(o.output_type == "stream" and "after" in o.text for o in cell.outputs), "the cell ran on"


@pytest.mark.parametrize("kind", sorted(UNATTRIBUTABLE))
def test_an_unreadable_message_is_skipped(executed, kind):
    done, where = executed
    cell = done.cells[where[kind]]
    assert [o.output_type for o in cell.outputs] == ["stream"] and "after" in cell.outputs[0].text, cell.outputs


def test_the_notebook_validates_and_runs_to_the_end(executed):
    from nbgrader.utils import determine_grade

    done, _ = executed
    nbformat.validate(done)
    assert "still running" in json.dumps(done.cells[-1].outputs)
    test = done.cells[-2]
    assert [o.output_type for o in test.outputs] == ["display_data"], test.outputs
    assert determine_grade(test) == (2.0, 2.0), "a published value is no partial credit"


@pytest.mark.parametrize("kind", sorted([*IOPUB, *REPLY]))
def test_each_kind_fails_plain_nbclient(kind):
    """Without ``SafeExecute``: nbclient's processing of the kind's messages raises, or leaves a cell that nbformat
    rejects (as nbgrader's save then does); for a reply, nbgrader's own handling of it does."""
    from nbclient import NotebookClient
    from nbgrader.preprocessors import Execute

    cell = nbformat.v4.new_code_cell("x")
    client = NotebookClient(nbformat.v4.new_notebook(cells=[cell]))
    client.reset_execution_trackers()
    client.clear_before_next_output = False
    try:
        if kind in REPLY:
            reply = {"parent_header": {"msg_id": "m"}, "content": {"execution_count": 1, **REPLY[kind]}}
            Execute().on_cell_executed(cell=cell, execute_reply=reply)
        else:
            for msg_type, content in IOPUB[kind]:
                header = {"msg_type": msg_type, "msg_id": "x"}
                msg = {"header": header, "msg_type": msg_type, "parent_header": {"msg_id": "m"}, "content": content}
                client.process_message(copy.deepcopy(msg), cell, 0)
        nbformat.validate(nbformat.v4.new_notebook(cells=[cell]))
    except Exception:  # noqa: BLE001 - any failure is the point
        return
    pytest.fail(f"plain nbclient accepted {kind}: {cell}")
