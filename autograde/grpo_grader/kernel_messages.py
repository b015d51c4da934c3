"""What a grading kernel sends is the learner's to shape: a malformed message fails the cell it arrives in, with a
reason, and never the notebook (``preprocessors.SafeExecute``).

The learner's code runs in the kernel and can publish any message on its channels (the session key is in the
kernel): an output whose fields nbformat's output schema rejects (``data`` that is not a dict, a number as
``text/plain``, a string ``execution_count``, an integer ``ename``, a missing field...), content that is not a dict,
a header or parent header of the wrong kind, an ``execute_reply`` without a status. nbclient turns the first ones into
``NotebookValidationError`` or ``KeyError`` in the middle of the notebook, and nbgrader then drops the notebook: the
learner would choose the status ``error``. Here each message is put in a shape nbclient can read (``normalise``),
its problems are named (``message_problem``, ``reply_problem``, ``output_problem``: the schema is nbformat's own) and
the cell gets an error output saying what was dropped (``malformed_output``). The reasons name fields of the
protocol, never a value the learner sent.
"""

from __future__ import annotations

from queue import Empty

from nbformat.notebooknode import NotebookNode

OUTPUT_TYPES = ("execute_result", "display_data", "stream", "error")
# the fields of each output type as nbformat's v4 schema declares them (``output_from_msg`` reads them from content)
OUTPUT_FIELDS = {
    "execute_result": ("data", "metadata", "execution_count"),
    "display_data": ("data", "metadata"),
    "stream": ("name", "text"),
    "error": ("ename", "evalue", "traceback"),
}
KNOWN_TYPES = (*OUTPUT_TYPES, "status", "execute_input", "clear_output", "update_display_data", "execute_reply")
REPLY_STATUSES = ("ok", "error", "aborted")
MALFORMED = "MalformedKernelMessage"  # the ename of the error output a malformed message leaves in its cell


def _kind(msg_type) -> str:
    """A message type as a reason names it: one of the protocol's, never the learner's own text."""
    return msg_type if msg_type in KNOWN_TYPES else "未知类型的消息（unknown message type）"


def execution_count_ok(value) -> bool:
    """nbformat's ``execution_count``: an integer >= 0, or null."""
    return value is None or (type(value) is int and value >= 0)


def normalise(msg) -> dict:
    """The envelope nbclient reads, whatever arrived: ``header``, ``parent_header``, ``metadata`` and ``content``
    dicts, ``msg_type`` a string. What had to be replaced is recorded under ``"malformed"`` (a reason)."""
    if not isinstance(msg, dict):
        return {"header": {}, "parent_header": {}, "metadata": {}, "content": {}, "msg_type": "", "malformed": "消息"}
    broken = [key for key in ("header", "parent_header", "metadata", "content") if not isinstance(msg.get(key), dict)]
    for key in broken:
        msg[key] = {}
    if not isinstance(msg.get("msg_type"), str):
        msg["msg_type"] = ""
        broken.append("msg_type")
    if broken:
        msg["malformed"] = "、".join(broken)
    return msg


def normalising(get_msg, log=None):
    """``get_msg`` of a kernel client's channel, returning ``normalise``d messages; a message the client could not
    even deserialise (a broken header, a bad signature) is skipped. ``queue.Empty`` (a timeout) passes through."""

    async def get(*args, **kwargs):
        while True:
            try:
                msg = get_msg(*args, **kwargs)
                if hasattr(msg, "__await__"):
                    msg = await msg
            except Empty:
                raise
            except Exception as error:  # noqa: BLE001 - whatever the kernel sent, the notebook goes on
                if log is not None:
                    log.warning("dropped an unreadable kernel message: %s", type(error).__name__)
                continue
            return normalise(msg)

    return get


def message_problem(msg: dict) -> str | None:
    """Why nbclient must not process ``msg`` (a ``normalise``d iopub message), checked before it touches the cell:
    a replaced envelope, an ``execution_count`` nbformat rejects, a ``transient`` that is not a dict."""
    kind = _kind(msg.get("msg_type"))
    if msg.get("malformed"):
        return f"{kind}：{msg['malformed']} 不是 nbformat 要求的类型"
    content = msg["content"]
    if "execution_count" in content and not execution_count_ok(content["execution_count"]):
        return f"{kind}：execution_count 应为非负整数或 null"
    if content.get("transient") is not None and not isinstance(content["transient"], dict):
        return f"{kind}：transient 应为 dict"
    return None


def output_problem(msg_type: str, content: dict) -> str | None:
    """Why the output that ``msg_type`` with ``content`` becomes fails nbformat's output schema (None: it passes):
    the first field missing or rejected."""
    from nbformat.v4.nbbase import validate

    if msg_type not in OUTPUT_TYPES:
        return None
    node = {"output_type": msg_type}
    for field in OUTPUT_FIELDS[msg_type]:
        if field not in content:
            return f"{msg_type}：缺少字段 {field}"
        node[field] = content[field]
    try:
        validate(node, msg_type)
    except Exception as error:  # noqa: BLE001 - nbformat's ValidationError (jsonschema's or fastjsonschema's)
        path = [p for p in getattr(error, "absolute_path", getattr(error, "path", [])) if isinstance(p, str)]
        field = next((p for p in path if p in OUTPUT_FIELDS[msg_type]), None)
        return (
            f"{msg_type}：字段 {field} 不符合 nbformat 的输出格式"
            if field
            else f"{msg_type}：不符合 nbformat 的输出格式"
        )
    return None


def failure(msg: dict, error: BaseException) -> str:
    """The reason for a message nbclient failed on: the schema's verdict where it has one, else the kind of failure."""
    kind = msg.get("msg_type")
    content = msg.get("content", {})
    if kind == "update_display_data":
        kind = "display_data"
    return output_problem(kind, content) or f"{_kind(kind)}：无法读取（{type(error).__name__}）"


def reply_problem(reply: dict) -> str | None:
    """Put an ``execute_reply`` (``normalise``d) into the shape nbclient and nbgrader read, in place: a known
    ``status``; for an error a string ``ename`` and ``evalue`` and a list of strings as ``traceback``; an
    ``execution_count`` nbformat accepts. Returns what was wrong (None: nothing)."""
    content = reply["content"]
    problems = []
    if reply.get("malformed"):
        problems.append(f"{reply['malformed']} 不是 nbformat 要求的类型")
    if content.get("status") not in REPLY_STATUSES:
        problems.append("status 缺失或未知")
        content["status"] = "error"
    if "execution_count" in content and not execution_count_ok(content["execution_count"]):
        problems.append("execution_count 应为非负整数或 null")
        del content["execution_count"]
    if content["status"] == "error":
        traceback = content.get("traceback")
        if not all(isinstance(content.get(key), str) for key in ("ename", "evalue")) or not (
            isinstance(traceback, list) and all(isinstance(line, str) for line in traceback)
        ):
            problems.append("ename、evalue 应为字符串，traceback 应为字符串列表")
            content.update(ename=MALFORMED, evalue="", traceback=[])
    return f"execute_reply：{'；'.join(problems)}" if problems else None


def malformed_output(problem: str) -> NotebookNode:
    """The error output a dropped message leaves in its cell (the cell fails; nothing the learner sent is shown)."""
    text = f"内核发来不合规的消息，已丢弃：{problem}（malformed kernel message dropped; this cell fails）"
    return NotebookNode(output_type="error", ename=MALFORMED, evalue=text, traceback=[f"{MALFORMED}: {text}"])


def repair_cell(cell: NotebookNode) -> list[str]:
    """The last check before nbgrader saves the cell: every output and the cell's ``execution_count`` as nbformat
    accepts them; an output that is not becomes ``malformed_output`` (what was wrong is returned)."""
    problems = []
    if not execution_count_ok(cell.get("execution_count")):
        cell["execution_count"] = None
        problems.append("execution_count 应为非负整数或 null")
    for index, out in enumerate(cell.get("outputs", [])):
        kind = out.get("output_type") if isinstance(out, dict) else None
        problem = (
            output_problem(kind, {k: v for k, v in out.items() if k != "output_type"})
            if kind in OUTPUT_TYPES
            else "输出：output_type 未知"
        )
        if problem is not None:
            cell["outputs"][index] = malformed_output(problem)
            problems.append(problem)
    return problems
