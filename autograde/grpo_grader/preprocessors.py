"""nbgrader preprocessors of the course, configured in ``autograde/nbgrader_config.py``.

Autograde (sanitise step, after nbgrader's own ``OverwriteCells``):
- ``RestoreBootstrap``: the locked bootstrap cell (it imports ``tools.grading`` and so captures the trusted
  comparison helpers) must run before any learner code. A submission that deleted it, moved it down or put
  a cell above it gets the source version back as its first code cell.

- ``RestoreTrusted``: a first cell that imports ``tools.grading`` before anything else (the capture then
  happens even if the bootstrap cell fails), and before every test cell a small unlocked cell (tagged ``grader-restore``, not graded)
  puts back any of the helpers ``tools.grading`` captured at bootstrap (``torch.allclose``,
  ``torch.testing.assert_close``, ``builtins.abs``, ...) that learner code rebound, so a test - visible or
  hidden - never runs with a replaced comparison function left behind by an earlier cell.

- ``StripHiddenTests``: in a test cell that the lesson's oracle grades (``oracles/<assignment>.py`` ``TESTS``), the
  hidden-test region (``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS``, restored by ``OverwriteCells``) is
  replaced by a one-line comment before the kernel runs, and the cell starts with the call of the case runner
  (``case_runner.ENTRY``, installed in the kernel before any learner cell): the oracle's cases of this test run
  there, in the notebook's one execution, on inputs the grader drew; their points come from the grader's verdicts,
  made outside this kernel, so the hidden tests' reference helpers and expected values never enter the learner's
  kernel (nor the executed notebook). Test cells of a lesson without an oracle keep their hidden tests (nbgrader's
  scores). On only in the pipeline's slots: the slot names the oracle's test cells (``tests``,
  ``Slot.nbgrader_options``), so no nbgrader process loads an oracle; a plain ``nbgrader autograde`` (formgrader's
  button) names none and keeps the hidden tests.

Autograde (execute step, replaces nbgrader's ``Execute``):
- ``SafeExecute``: caps the output a cell may send while it runs (a cell printing millions of lines cannot
  exhaust the grader's memory) without changing what nbgrader grades from the outputs, and turns a dead
  kernel (``os._exit``, a segfault, the memory limit) into error outputs: the cell that killed the kernel
  and every later code cell get an error, so they earn nothing, while the tests that passed before keep
  their points and the rest of the batch goes on. Demonstration cells listed in ``SafeExecute.demo_cells``
  (a lesson's slow demos that nothing later uses and no point depends on) are not run in the grading
  kernel; their output says so in the feedback. A malformed kernel message (``kernel_messages.py``: an output
  nbformat's schema rejects, a string ``execution_count``, an integer ``ename``, a reply without a status...) fails
  the cell it arrives in with a reason, never the notebook; a value a test cell shows is kept as a display, never
  read as partial credit (this course gives none: a learner's code could publish one above the cell's points, and
  nbgrader would fail the notebook).

Autograde (both steps, last; replaces nbgrader's ``CheckCellMetadata``):
- ``CheckCellMetadataOnce``: nbgrader's check of every cell's nbgrader metadata, with the same errors, against
  nbgrader's schema compiled once per process (nbgrader's ``jsonschema.validate`` checks the schema itself against
  its metaschema for every cell: about nine tenths of the step's time, twice per graded notebook).

Feedback: ``feedback_pages.py`` (``HideHiddenTests`` and the pages' exporter).
"""

from __future__ import annotations

import json
import time
import traceback
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async
from nbclient.exceptions import CellControlSignal, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import CheckCellMetadata, Execute, NbGraderPreprocessor
from traitlets import Dict, Integer, List, Type, Unicode

from . import kernel_messages
from .case_runner import ENTRY

BOOTSTRAP_ID = "bootstrap"
RESTORE_TAG = "grader-restore"
CAPTURE_SOURCE = """# [评分器] 在任何其他代码之前导入 tools.grading（grader: capture the trusted helpers first)
import tools.grading"""
RESTORE_SOURCE = """# [评分器] 运行测试前恢复被改写的可信函数（grader: restore helpers captured by tools.grading）
import tools.grading as _grader_trust
_grader_trust.restore()
del _grader_trust"""


def is_demo_cell(cell, markers) -> bool:
    """Whether ``cell`` is one of a lesson's demonstration cells (``SafeExecute.demo_cells[assignment]``): a setup
    code cell (never an answer or test cell) whose release grade_id is listed. Only the release's locked cells
    carry a grade_id (``rebuild_metadata``), so a cell the learner added is never a demonstration. The grading kernel
    does not run it."""
    if cell.get("cell_type") != "code":
        return False
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("solution") or meta.get("grade"):
        return False
    gid = meta.get("grade_id")
    return gid is not None and gid in markers


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class RestoreBootstrap(NbGraderPreprocessor):
    """Put the locked bootstrap cell (from the gradebook) first among the code cells."""

    grade_id = Unicode(BOOTSTRAP_ID, help="grade_id of the locked first code cell").tag(config=True)

    def preprocess(self, nb, resources):
        notebook_id = resources["nbgrader"]["notebook"]
        assignment_id = resources["nbgrader"]["assignment"]
        with Gradebook(resources["nbgrader"]["db_url"]) as gb:
            try:
                source = gb.find_source_cell(self.grade_id, notebook_id, assignment_id)
            except MissingEntry:
                return nb, resources  # this notebook has no bootstrap cell
            found = [
                i
                for i, c in enumerate(nb.cells)
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == self.grade_id
            ]
            first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
            if found and found[0] == first_code and len(found) == 1:
                return nb, resources
            self.log.warning("bootstrap cell missing or moved in %s: restoring it as the first code cell", notebook_id)
            cell = NotebookNode(
                id="bootstrap-restored",
                cell_type="code",
                execution_count=None,
                outputs=[],
                source=source.source,
                metadata=NotebookNode(
                    nbgrader=NotebookNode(
                        grade=False,
                        grade_id=self.grade_id,
                        locked=True,
                        schema_version=3,
                        solution=False,
                        checksum=source.checksum,
                    ),
                    editable=False,
                    deletable=False,
                ),
            )
            cells = [c for i, c in enumerate(nb.cells) if i not in found]
            first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
            cells.insert(first_code, cell)
            nb.cells = cells
            resources.setdefault("grading", {})["bootstrap_restored"] = True
        return nb, resources


class RestoreTrusted(NbGraderPreprocessor):
    """A capture cell first (``import tools.grading`` before anything else runs, even when the bootstrap
    cell fails, e.g. cannot install a package offline), and a restore cell before every test cell."""

    def preprocess(self, nb, resources):
        cells = [c for c in nb.cells if RESTORE_TAG not in c.get("metadata", {}).get("tags", [])]
        out = [
            NotebookNode(
                cell_type="code",
                execution_count=None,
                outputs=[],
                source=CAPTURE_SOURCE,
                metadata=NotebookNode(tags=[RESTORE_TAG]),
                id="grader-capture",
            )
        ]
        for cell in cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
                restore = NotebookNode(
                    cell_type="code",
                    execution_count=None,
                    outputs=[],
                    source=RESTORE_SOURCE,
                    metadata=NotebookNode(tags=[RESTORE_TAG]),
                    id=f"grader-restore-{len(out)}",
                )
                out.append(restore)
            out.append(cell)
        nb.cells = out
        return nb, resources


HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STRIPPED_NOTE = (
    "# [评分器] 隐藏测试由评分器在学员内核之外、用评分时抽取的输入判定（hidden tests run outside this kernel）"
)
CASES_NOTE = (
    "# [评分器] 这个测试的评分用例在这里运行，输入由评分时的秘密种子抽取，判定在学员内核之外"
    "（grader: this test's cases run here, judged outside this kernel）"
)


def cases_call(grade_id: str) -> str:
    """The first lines of a test cell whose cases the kernel runs for the oracle (``StripHiddenTests``)."""
    return f"{CASES_NOTE}\n{ENTRY}({grade_id!r}, globals())\n"


def strip_hidden(
    source: str, note: str | None = STRIPPED_NOTE, begin: str = HIDDEN_BEGIN, end: str = HIDDEN_END
) -> tuple[str, bool]:
    """``source`` without its hidden-test regions, and whether there was one. Each region becomes ``note``, indented
    like its ``begin`` line (``note=None``: nothing); marker lines never stay; an unclosed region runs to the end."""
    lines, hiding, found = [], False, False
    for line in source.splitlines(keepends=True):
        if begin in line:
            if note is not None and not hiding:
                lines.append(line[: len(line) - len(line.lstrip())] + note + "\n")
            hiding = found = True
            continue
        if end in line:
            hiding = False
            continue
        if not hiding:
            lines.append(line)
    return "".join(lines), found


class StripHiddenTests(NbGraderPreprocessor):
    """The test cells the assignment's oracle grades, before execution: their hidden-test regions dropped, the case
    runner's call first (``cases_call``)."""

    tests = List(
        Unicode(),
        help="grade_ids of the test cells that the lesson's oracle grades (its TESTS): their hidden-test regions are "
        "dropped before the kernel runs, and each starts with the call of the case runner the pipeline installed in "
        "the kernel (the oracle's cases of that test run there; the grader judges them outside the kernel). The "
        "grading pipeline's slots set it for the notebook they grade (so no nbgrader process imports the oracles, "
        "nor torch with them); empty, as in a plain `nbgrader autograde`, keeps the hidden tests and nbgrader's "
        "scores",
    ).tag(config=True)
    case_seconds = Integer(
        0,
        help="seconds added to the time limit of each of those test cells, for the cases that run in it (each case "
        "has a limit of its own in the kernel)",
    ).tag(config=True)

    def preprocess(self, nb, resources):
        graded = set(self.tests)
        if not graded:  # a plain `nbgrader autograde`: every hidden test runs in the kernel
            return nb, resources
        stripped, cells = [], []
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if (
                cell.cell_type == "code"
                and meta.get("grade")
                and not meta.get("solution")
                and meta.get("grade_id") in graded
            ):
                source, found = strip_hidden(cell.source)
                cell.source = cases_call(meta["grade_id"]) + source
                cells.append(meta["grade_id"])
                if found:
                    stripped.append(meta["grade_id"])
        resources.setdefault("grading", {}).update(
            hidden_stripped=stripped, case_cells=cells, case_seconds=int(self.case_seconds)
        )
        return nb, resources


_COMPILED_SCHEMAS: dict[int, object] = {}  # nbgrader's schema version -> its jsonschema validator (one per process)


class _SchemaCompiledOnce(BaseMetadataValidator):
    """``validate_cell`` as nbgrader's ``BaseMetadataValidator`` (``jsonschema.validate``: the best-matching error
    raised), without checking the constant schema itself again for every cell. A cell of another schema version
    goes to nbgrader's own code (its SchemaTooOld / SchemaTooNew errors)."""

    def validate_cell(self, cell: NotebookNode) -> None:
        meta = cell.metadata.get("nbgrader")
        if meta is None or meta.get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)
        import jsonschema

        validator = _COMPILED_SCHEMAS.get(self.schema_version)
        if validator is None:  # the schema is nbgrader's file of this version: the same for the whole process
            validator = jsonschema.validators.validator_for(self.schema)(self.schema)
            _COMPILED_SCHEMAS[self.schema_version] = validator
        error = jsonschema.exceptions.best_match(validator.iter_errors(meta))
        if error is not None:
            raise error


class _MetadataValidatorOnce(MetadataValidator, _SchemaCompiledOnce):
    """nbgrader's current ``MetadataValidator`` (its semantic checks after the schema's), over ``_SchemaCompiledOnce``
    (``MetadataValidator``'s call of its base's ``validate_cell`` lands there: method resolution order)."""


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's ``CheckCellMetadata`` - the same checks, log lines and error - with the schema compiled once."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        try:
            _MetadataValidatorOnce().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg) from None
        return nb, resources


class ReadyKernelClient(AsyncKernelClient):
    """jupyter_client's async client whose ``wait_for_ready`` ends as soon as the kernel has answered kernel_info and
    IOPub carries a message (polled every 10 ms), where jupyter_client waits up to 0.2 s on IOPub in one piece: a
    zygote's kernel is ready sooner, and that wait was a large part of each graded notebook (benchmarks/CHANGELOG.md)."""

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while time.monotonic() < deadline:
            self.kernel_info()
            try:
                reply = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                reply = None
            if reply is not None and reply.get("msg_type") == "kernel_info_reply":
                for _ in range(20):  # IOPub connected: the reply's status message arrives there
                    try:
                        await ensure_async(self.iopub_channel.get_msg(timeout=0.01))
                    except Empty:
                        continue
                    self._handle_kernel_info_reply(reply)
                    return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
        raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")

    wait_for_ready = _async_wait_for_ready


class ReadyKernelManager(AsyncKernelManager):
    """nbgrader's async kernel manager, handing out ``ReadyKernelClient``s."""

    client_factory = Type(ReadyKernelClient, klass=AsyncKernelClient, config=True)


class SafeExecute(Execute):
    """nbgrader's Execute with an output cap while running and survival of a dead kernel."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", ReadyKernelManager)
        super().__init__(*args, **kwargs)

    max_output_bytes = Integer(
        2_000_000, help="bytes of output a cell may keep while it runs; the rest is dropped (errors are kept)"
    ).tag(config=True, zh="一个单元运行时最多保留的输出字节数，其余丢弃（错误信息保留）")

    demo_cells = Dict(
        {},
        help="{assignment: [grade_id, ...]}: locked setup/demo code cells (never answer or test cells) that "
        "the grading kernel does not run: slow demonstrations that no later cell and "
        "no point depends on (tests/test_autograde.py checks that no later cell reads a name they define); "
        "matched by the release's grade_id only, so a cell the learner added always runs",
    ).tag(
        config=True,
        zh="{作业: [grade_id, ...]}：评分内核不运行的锁定设置/演示单元（从不是答案或测试单元）："
        "不计分，之后的单元也不读取它们定义的名字（`tests/test_autograde.py` 逐课检查）；只按发布版本的 grade_id "
        "匹配，学员自己加的单元永远运行；反馈里这些单元的输出写明“评分时没有运行”",
    )

    def _is_demo(self, cell, resources) -> bool:
        return is_demo_cell(cell, self.demo_cells.get(resources.get("nbgrader", {}).get("assignment", ""), ()))

    def reset_execution_trackers(self):
        super().reset_execution_trackers()
        self._kernel_dead = False
        self._output_bytes: dict[int, int] = {}
        self._output_kinds: dict[int, set] = {}
        self._truncated: set[int] = set()
        self._malformed_count: dict[int, int] = {}
        self._cell_index = -1

    async def async_start_new_kernel_client(self):
        """nbclient's client, whose shell and iopub channels hand on only messages in a shape nbclient can read
        (``kernel_messages.normalise``): whatever the kernel publishes, reading it cannot fail the notebook."""
        client = await super().async_start_new_kernel_client()
        for channel in (client.shell_channel, client.iopub_channel):
            channel.get_msg = kernel_messages.normalising(channel.get_msg, self.log)
        return client

    start_new_kernel_client = run_sync(async_start_new_kernel_client)  # what nbconvert's preprocess() calls

    def _malformed(self, cell, cell_index: int, problem: str) -> None:
        """A message that was dropped: its cell fails with the reason (three reasons at most per cell)."""
        self.log.warning("cell %s: malformed kernel message dropped: %s", cell_index, problem)
        count = self._malformed_count[cell_index] = self._malformed_count.get(cell_index, 0) + 1
        if count <= 3:
            cell.setdefault("outputs", []).append(kernel_messages.malformed_output(problem))

    def process_message(self, msg, cell, cell_index):
        problem = kernel_messages.message_problem(msg)
        if problem is None:
            try:
                return super().process_message(msg, cell, cell_index)
            except CellControlSignal:  # the cell is complete: nbclient's own control flow
                raise
            except Exception as error:  # noqa: BLE001 - a message nbclient cannot turn into an output
                problem = kernel_messages.failure(msg, error)
        self._malformed(cell, cell_index, problem)
        return None

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
        reply = await super()._async_poll_for_reply(msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive)
        if reply is not None and "header" in reply:  # the kernel's reply (nbclient's own timeout reply is sound)
            problem = kernel_messages.reply_problem(reply)
            if problem is not None:
                self._malformed(cell, self._cell_index, problem)
        return reply

    def _settle(self, cell) -> None:
        """After a cell ran: every output and its execution_count as nbformat accepts them
        (``kernel_messages.repair_cell``), and a test cell's values kept as displays, never partial credit."""
        for problem in kernel_messages.repair_cell(cell):
            self.log.warning("malformed output replaced: %s", problem)
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "execute_result":
                    out["output_type"] = "display_data"
                    out.pop("execution_count", None)

    def _get_timeout(self, cell):
        """nbclient's limit for ``cell``; a test cell whose oracle cases run in it gets ``case_seconds`` more."""
        timeout = super()._get_timeout(cell)
        grading = getattr(self, "_grading", {})
        grade_id = (cell or {}).get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if timeout is not None and grade_id in grading.get("case_cells", ()):
            timeout += grading.get("case_seconds", 0)
        return timeout

    def preprocess_cell(self, cell, resources, index):
        self._cell_index = index
        self._grading = resources.get("grading", {})
        if getattr(self, "_kernel_dead", False):
            if cell.cell_type == "code" and cell.source.strip():
                cell.outputs = [
                    _error_output(
                        "KernelDied", "内核已在前面的单元中退出，此单元未执行（kernel died earlier; not run）"
                    )
                ]
                cell.execution_count = None
            return cell, resources
        if self._is_demo(cell, resources):
            cell.outputs = [
                NotebookNode(
                    output_type="stream",
                    name="stdout",
                    text=(
                        "[评分器] 这是演示单元，评分时没有运行（不计分；自己运行笔记时可以看到它的输出）"
                        "(demo cell, not run when grading)\n"
                    ),
                )
            ]
            cell.execution_count = None
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            self._settle(cell)
            return cell, resources
        except DeadKernelError:
            self._kernel_dead = True
            self.log.error("kernel died while running cell %s", index)
            cell.setdefault("outputs", []).append(
                _error_output(
                    "KernelDied",
                    "内核在执行此单元时退出（例如 os._exit、段错误或超出内存限制）；之后的单元都不会执行"
                    " (the kernel died while running this cell)",
                )
            )
            self._settle(cell)
            return cell, resources

    @staticmethod
    def _size(out: NotebookNode) -> int:
        if out.get("output_type") == "stream":
            return len(out.get("text", ""))
        return len(json.dumps(out.get("data", {}), default=str))

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is None or out.get("output_type") == "error":
            return out  # errors decide the grade: never dropped
        used = self._output_bytes.get(cell_index, 0)
        size = self._size(out)
        kinds = self._output_kinds.setdefault(cell_index, set())
        kind = (out.get("output_type"), out.get("name"))
        if used + size <= self.max_output_bytes:
            self._output_bytes[cell_index] = used + size
            kinds.add(kind)
            return out
        # Over the cap. Keep the first output of each kind, shortened, so that what nbgrader grades from
        # the outputs (an error, any stderr, the first execute_result) is exactly as without the cap.
        if outs and outs[-1] is out:
            outs.pop()
        if kind not in kinds:
            kinds.add(kind)
            if out.get("output_type") == "stream":
                out["text"] = out["text"][:1000]
            outs.append(out)
        if cell_index not in self._truncated:
            self._truncated.add(cell_index)
            outs.append(
                NotebookNode(
                    output_type="stream",
                    name="stdout",
                    text=(
                        f"\n[评分器] 此单元的输出超过 {self.max_output_bytes} 字节，其余输出已丢弃"
                        f"（output over {self.max_output_bytes} bytes dropped by the grader）\n"
                    ),
                )
            )
        return None
