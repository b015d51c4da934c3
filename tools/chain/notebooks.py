"""The single-source chain: ``solutions/<a>.py`` -> nbgrader source -> learner release.

Commands (``python -m tools.chain.notebooks <command>``):

- ``build``   : jupytext percent sources -> ``autograde/source/<a>/<a>.ipynb`` (nbgrader metadata completed,
                badge and bootstrap cells inserted, deterministic cell ids).
- ``release`` : ``build`` + ``nbgrader generate_assignment`` (nbgrader's API, in process) ->
                ``notebooks/<a>/<a>.ipynb`` (cells tagged ``solution-only`` dropped, outputs cleared), and the
                ``#@save`` modules ``tools/lessons/<a>.py``
                (see ``tools.chain.saved``).
- ``check``   : rebuild the release in a temporary course and fail when ``notebooks/`` or ``tools/lessons/``
                differs (stale) or when a learner version contains a solution marker, an answer line or a hidden test line.
- ``execute`` : run notebooks top to bottom with nbclient: ``--which solution`` must run green, ``--which
                learner`` must fail only with ``NotImplementedError``.

The module also holds the small harness the tests use to grade alternative answers without nbgrader:
``substitute_answers``, ``execute``, ``cell_results``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from tools import env_vars
from tools.project_runtime import course_settings as _course_settings
from tools.project_runtime import (
    resolve_project_root,
    venv_env,  # noqa: F401  (re-exported: the chain's callers use chain.venv_env)
)

ROOT = resolve_project_root(Path(__file__))  # the checkout this chain belongs to (build-time root)
SOLUTIONS = ROOT / "solutions"
COURSE = ROOT / "autograde"
NOTEBOOKS = ROOT / "notebooks"
SOLUTION_ONLY_TAG = "solution-only"
MARKERS = (
    "BEGIN SOLUTION",
    "END SOLUTION",
    "BEGIN HIDDEN TESTS",
    "END HIDDEN TESTS",
    "BEGIN MARK SCHEME",
    "END MARK SCHEME",
)
_REGION = re.compile(
    r"^[ \t]*### BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*\n(.*?)^[ \t]*### END \1[ \t]*$", re.MULTILINE | re.DOTALL
)


# ----------------------------------------------------------------------------- discovery & settings
def course_settings() -> dict:
    """The ``[course]`` table of this course's ``course.toml`` (see ``tools.project_runtime.course_settings``)."""
    return _course_settings(ROOT)


def assignments(names: list[str] | None = None) -> list[str]:
    available = sorted(path.stem for path in SOLUTIONS.glob("*.py") if not path.name.startswith("_"))
    if not names:
        return available
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise SystemExit(f"unknown assignment(s) {unknown}; available: {available}")
    return list(names)


# ----------------------------------------------------------------------------- build
def _complete_nbgrader(meta: dict, cell_type: str, where: str) -> dict:
    """Fill nbgrader schema-v3 defaults so that a source header only states what matters."""
    meta = dict(meta)
    if "grade_id" not in meta:
        raise ValueError(f"{where}: nbgrader cell without grade_id")
    solution = bool(meta.get("solution", False))
    grade = bool(meta.get("grade", False))
    if grade and "points" not in meta:
        raise ValueError(f"{where}: graded cell {meta['grade_id']!r} without points")
    if cell_type == "markdown" and solution and not grade:
        raise ValueError(f"{where}: a markdown answer cell must be graded (manual grading)")
    meta.setdefault("locked", not solution)
    full = {
        "grade": grade,
        "grade_id": meta["grade_id"],
        "locked": bool(meta["locked"]),
        "schema_version": 3,
        "solution": solution,
    }
    if grade:
        full["points"] = meta["points"]
    return full


def build_notebook(assignment: str, settings: dict | None = None) -> nbformat.NotebookNode:
    """Read ``solutions/<assignment>.py`` and return the nbgrader source notebook."""
    import jupytext

    from tools.chain.cells import badge_markdown, bootstrap_source, release_stamp

    settings = settings or course_settings()
    source_path = SOLUTIONS / f"{assignment}.py"
    nb = jupytext.read(source_path, fmt="py:percent")
    profile = nb.metadata.get("course", {}).get("profile")
    if profile not in {"BASE-CPU", "PT-CPU", "PT-RL-CUDA"}:
        raise ValueError(f"{source_path}: header must name `course: {{profile: BASE-CPU|PT-CPU|PT-RL-CUDA}}`")
    seen: set[str] = set()
    stamp = release_stamp(assignment, ROOT)
    cells = [
        nbformat.v4.new_markdown_cell(badge_markdown(assignment, settings)),
        nbformat.v4.new_code_cell(
            bootstrap_source(profile, settings, assignment, stamp),
            metadata={
                "nbgrader": {
                    "grade": False,
                    "grade_id": "bootstrap",
                    "locked": True,
                    "schema_version": 3,
                    "solution": False,
                }
            },
        ),
    ]
    cells[0].metadata["tags"] = ["course-badges"]
    # The bootstrap is long and the same everywhere: collapse its source (JupyterLab and Colab honour
    # this), keep its output (the preflight line) visible.
    cells[1].metadata["jupyter"] = {"source_hidden": True}
    cells[1].metadata["cellView"] = "form"
    for index, cell in enumerate(nb.cells):
        where = f"{source_path.name} cell {index}"
        meta = {k: v for k, v in cell.metadata.items() if k in {"nbgrader", "tags"}}
        if "nbgrader" in meta:
            meta["nbgrader"] = _complete_nbgrader(meta["nbgrader"], cell.cell_type, where)
            grade_id = meta["nbgrader"]["grade_id"]
            if grade_id in seen or grade_id == "bootstrap":
                raise ValueError(f"{where}: duplicate grade_id {grade_id!r}")
            seen.add(grade_id)
        text = cell.source
        has_region = "### BEGIN SOLUTION" in text or "### BEGIN HIDDEN TESTS" in text
        if has_region and "nbgrader" not in meta:
            raise ValueError(f"{where}: solution/hidden-test markers in a cell without nbgrader metadata")
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(text, metadata=meta)
        elif cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(text, metadata=meta)
        else:
            new = nbformat.v4.new_raw_cell(text, metadata=meta)
        cells.append(new)
    for index, cell in enumerate(cells):  # deterministic ids: readable and stable across builds
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell["id"] = grade_id.replace("_", "-") if grade_id else f"cell-{index:03d}"
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "course": {"assignment": assignment, "profile": profile, "stamp": stamp},
    }
    nbformat.validate(out)
    return out


def write_notebook(nb: nbformat.NotebookNode, path: Path) -> bool:
    """Write ``nb`` to ``path`` (deterministic JSON); return True when the bytes changed."""
    text = nbformat.writes(nb) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_suffix(".ipynb.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return True


def build(names: list[str] | None = None, course: Path = COURSE) -> list[Path]:
    settings = course_settings()
    written = []
    for assignment in assignments(names):
        path = course / "source" / assignment / f"{assignment}.ipynb"
        write_notebook(build_notebook(assignment, settings), path)
        written.append(path)
    return written


# ----------------------------------------------------------------------------- release
@functools.lru_cache(maxsize=1)
def alembic_head() -> str:
    """The alembic revision nbgrader stamps into a new gradebook, read from nbgrader's migration scripts in this
    process. ``nbgrader.api.get_alembic_version`` runs ``alembic heads`` in a new interpreter for every new
    gradebook (about 1.5 s of CPU each); tests/test_build_chain.py checks that both give the same revision."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


@contextlib.contextmanager
def alembic_in_process():
    """Within it, a new nbgrader gradebook is stamped with :func:`alembic_head` (read in this process) instead of
    ``nbgrader.api.get_alembic_version`` (``alembic heads`` in a new interpreter, ~1.2-1.5 s of CPU per gradebook)."""
    import nbgrader.api

    subprocess_version = nbgrader.api.get_alembic_version
    nbgrader.api.get_alembic_version = alembic_head
    try:
        yield
    finally:
        nbgrader.api.get_alembic_version = subprocess_version


def _generate_assignment(course: Path, assignment: str) -> None:
    """``nbgrader generate_assignment <assignment> --force`` in ``course``, through nbgrader's API in this process
    (the course's ``nbgrader_config.py`` is loaded as the command would; no interpreter start per notebook, and a
    new gradebook gets its alembic revision from :func:`alembic_head`)."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.GenerateAssignment.log_level = "WARN"
    with alembic_in_process():
        result = NbGraderAPI(config=config).generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        raise RuntimeError(
            f"nbgrader generate_assignment {assignment} failed:\n{result.get('error') or ''}{result.get('log') or ''}"
        )


def learner_version(released: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Post-process nbgrader's release: drop solution-only cells, keep everything else as nbgrader wrote it."""
    nb = copy.deepcopy(released)
    nb.cells = [c for c in nb.cells if SOLUTION_ONLY_TAG not in c.metadata.get("tags", [])]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def release_into(course: Path, out_dir: Path, names: list[str] | None = None) -> list[Path]:
    build(names, course=course)
    written = []
    for assignment in assignments(names):
        _generate_assignment(course, assignment)
        released = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
        path = out_dir / assignment / f"{assignment}.ipynb"
        write_notebook(learner_version(released), path)
        written.append(path)
    return written


def release(names: list[str] | None = None) -> list[Path]:
    from tools.chain import saved

    saved.write(assignments(names), prune=not names, solutions=SOLUTIONS, lessons=ROOT / "tools" / "lessons")
    paths = release_into(COURSE, NOTEBOOKS, names)
    if not names:  # learner folders whose source is gone are stale
        keep = {p.parent.name for p in paths}
        for folder in NOTEBOOKS.iterdir() if NOTEBOOKS.exists() else []:
            if folder.is_dir() and folder.name not in keep:
                shutil.rmtree(folder)
    return paths


# ----------------------------------------------------------------------------- checks
def _regions(text: str, kind: str) -> list[str]:
    return [m.group(2) for m in _REGION.finditer(text) if m.group(1) == kind]


def hidden_tests(text: str) -> list[str]:
    """The bodies of the ``### BEGIN/END HIDDEN TESTS`` regions of a cell's source, in order."""
    return _regions(text, "HIDDEN TESTS")


def secret_lines(source_nb: nbformat.NotebookNode) -> dict[str, set[str]]:
    """Lines that must never reach a learner: answers, hidden tests, solution-only cells.

    A line counts when it has at least 8 non-space characters and does not also occur outside the
    secret parts of the source (a stub signature or a shared import is not a secret).
    """
    secret = {"answer": set(), "hidden test": set(), "solution-only cell": set()}
    public: set[str] = set()
    for cell in source_nb.cells:
        text = cell.source
        if SOLUTION_ONLY_TAG in cell.metadata.get("tags", []):
            secret["solution-only cell"].update(l.strip() for l in text.splitlines())
            continue
        for kind, label in (("SOLUTION", "answer"), ("HIDDEN TESTS", "hidden test")):
            for region in _regions(text, kind):
                secret[label].update(l.strip() for l in region.splitlines())
        public.update(l.strip() for l in _REGION.sub("", text).splitlines())
    return {k: {l for l in v if len(l.replace(" ", "")) >= 8 and l not in public} for k, v in secret.items()}


def leaks(source_nb: nbformat.NotebookNode, learner_nb: nbformat.NotebookNode) -> list[str]:
    problems = []
    learner_lines = set()
    for index, cell in enumerate(learner_nb.cells):
        for marker in MARKERS:
            if f"### {marker}" in cell.source:
                problems.append(f"cell {index}: marker '### {marker}'")
        learner_lines.update(l.strip() for l in cell.source.splitlines())
    for label, lines in secret_lines(source_nb).items():
        for line in sorted(lines & learner_lines):
            problems.append(f"{label} line: {line!r}")
    return problems


def check(names: list[str] | None = None, released: tuple[Path, Path] | None = None) -> int:
    """0 when ``notebooks/`` and ``tools/lessons/`` are up to date and nothing leaks, else 1 (FAIL lines printed).

    ``released``: (course, notebooks) of a release of this checkout made by ``release_into`` (all assignments)
    in this run, compared instead of releasing again (the tests share one).
    """
    from tools.chain import saved

    failures = list(
        saved.problems(assignments(names), complete=not names, solutions=SOLUTIONS, lessons=ROOT / "tools" / "lessons")
    )
    with tempfile.TemporaryDirectory(prefix="grpo-release-check-") as tmp:
        if released is not None:
            course, out = Path(released[0]), Path(released[1])
            expected = [out / a / f"{a}.ipynb" for a in assignments(names)]
        else:
            course = Path(tmp) / "autograde"
            course.mkdir()
            shutil.copy2(COURSE / "nbgrader_config.py", course / "nbgrader_config.py")
            out = Path(tmp) / "notebooks"
            expected = release_into(course, out, names)
        for path in expected:
            assignment = path.parent.name
            committed = NOTEBOOKS / assignment / path.name
            if not committed.exists():
                failures.append(f"{committed.relative_to(ROOT)} is missing: run `make release`")
            elif committed.read_bytes() != path.read_bytes():
                failures.append(
                    f"{committed.relative_to(ROOT)} is stale against solutions/{assignment}.py: run `make release`"
                )
            source_nb = nbformat.read(course / "source" / assignment / f"{assignment}.ipynb", as_version=4)
            if committed.exists():
                try:
                    learner_nb = nbformat.read(committed, as_version=4)
                except Exception as error:  # not valid notebook JSON: already reported as stale
                    failures.append(
                        f"{committed.relative_to(ROOT)} is not a valid notebook: {error.__class__.__name__}"
                    )
                    continue
                for problem in leaks(source_nb, learner_nb):
                    failures.append(f"{committed.relative_to(ROOT)} leaks {problem}")
        if not names and NOTEBOOKS.exists():
            known = {p.parent.name for p in expected}
            for folder in sorted(NOTEBOOKS.iterdir()):
                if folder.is_dir() and folder.name not in known:
                    failures.append(f"notebooks/{folder.name} has no source in solutions/")
    for line in failures:
        print(f"FAIL {line}")
    if not failures:
        print(f"release check ok: {len(expected)} learner notebook(s) up to date, no answer or hidden test leaked")
    return 1 if failures else 0


# ----------------------------------------------------------------------------- execution harness
def substitute_answers(nb: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """Return a copy of ``nb`` whose cells with the given ``grade_id``s have the given sources."""
    out = copy.deepcopy(nb)
    missing = set(answers)
    for cell in out.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
            missing.discard(grade_id)
    if missing:
        raise KeyError(f"no cell with grade_id {sorted(missing)}")
    return out


PARAMETERS_TAG = "parameters"  # papermill's tag for the cell whose values a headless run replaces


def parameterize(nb: nbformat.NotebookNode, parameters: dict[str, object]) -> nbformat.NotebookNode:
    """A copy of ``nb`` with papermill's ``injected-parameters`` cell (``name = value`` lines) right after the cell
    tagged ``parameters``: the one way a headless run changes a notebook's settings (``make experiment``).

    papermill's own ``parameterize_notebook`` writes the cell (and ``metadata.papermill.parameters``); a notebook
    without a ``parameters`` cell raises ``ValueError`` (papermill would put the cell first, where the notebook's
    own assignments would overwrite it).
    """
    from papermill.parameterize import parameterize_notebook

    if not any(PARAMETERS_TAG in cell.metadata.get("tags", []) for cell in nb.cells):
        raise ValueError(f"the notebook has no cell tagged {PARAMETERS_TAG!r} to inject {sorted(parameters)} after")
    out = copy.deepcopy(nb)
    untagged = [cell for cell in out.cells if "tags" not in cell.metadata]
    for cell in untagged:  # papermill reads `cell.metadata.tags` of every cell (its loader adds them)
        cell.metadata["tags"] = []
    out.metadata.setdefault("papermill", {})
    out = parameterize_notebook(out, dict(parameters), language="python")
    for cell in untagged:  # the other cells stay as they were
        del cell.metadata["tags"]
    for cell in out.cells:  # a stable id for papermill's cell instead of a random one
        if "injected-parameters" in cell.metadata.get("tags", []):
            cell["id"] = "injected-parameters"
    return out


def _progress_wanted(progress: bool | None) -> bool:
    """``progress=None``: on when stderr is a terminal or ``GRPO_PROGRESS=1`` (``make demo`` / ``experiment``)."""
    if progress is not None:
        return bool(progress)
    flag = os.environ.get(env_vars.PROGRESS, "").strip().lower()
    if flag:
        return flag not in ("0", "false", "no", "off")
    return sys.stderr.isatty()


def execute(
    nb: nbformat.NotebookNode,
    cwd: Path,
    timeout: int = 120,
    env: dict[str, str] | None = None,
    progress: bool | None = None,
    desc: str | None = None,
    kernel_name: str = "python3",
    parameters: dict[str, object] | None = None,
) -> nbformat.NotebookNode:
    """Execute a copy of ``nb`` with nbclient in ``cwd``; errors are recorded in outputs, not raised.

    ``parameters``: papermill-injected values for the notebook's ``parameters`` cell (:func:`parameterize`).

    The kernel talks to nbclient over IPC (Unix sockets in a private temporary folder), not TCP: nothing
    listens on a port and ipykernel has no reason for its "running over TCP without encryption" warning.
    ``progress`` shows a per-cell tqdm bar on stderr (default: see :func:`_progress_wanted`). ``kernel_name``: the
    kernel spec (the tests use a warm one, ``tests/kernel_forkserver.py``).
    """
    from nbclient import NotebookClient
    from traitlets.config import Config

    out = parameterize(nb, parameters) if parameters else copy.deepcopy(nb)
    old_env = dict(os.environ)
    sockets = tempfile.mkdtemp(prefix="grpo-kernel-")
    config = Config()
    config.KernelManager.transport = "ipc"
    config.KernelManager.connection_file = os.path.join(sockets, "kernel.json")
    bar = None
    if _progress_wanted(progress):
        from tqdm.auto import tqdm

        total = sum(1 for cell in out.cells if cell.cell_type == "code")
        name = desc or out.metadata.get("course", {}).get("assignment") or "notebook"
        bar = tqdm(total=total, desc=name, unit="cell", file=sys.stderr, dynamic_ncols=True)
    try:
        os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend embeds figures in the outputs
        os.environ.update(env or {})
        # "immediate": the kernel is killed once the last cell has replied (its outputs are in); a graceful
        # shutdown request costs 0.3-0.9 s per notebook for nothing
        client = NotebookClient(
            out,
            timeout=timeout,
            kernel_name=kernel_name,
            allow_errors=True,
            resources={"metadata": {"path": str(cwd)}},
            config=config,
            shutdown_kernel="immediate",
        )
        if bar is not None:

            def cell_done(cell, cell_index, execute_reply):
                if cell.cell_type == "code":
                    failed = any(o.get("output_type") == "error" for o in cell.get("outputs", []))
                    bar.set_postfix_str(f"cell {cell_index}{' error' if failed else ''}", refresh=False)
                    bar.update(1)

            client.on_cell_executed = cell_done
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old_env)
        if bar is not None:
            bar.close()
        shutil.rmtree(sockets, ignore_errors=True)
    return out


def cell_errors(nb: nbformat.NotebookNode) -> list[tuple[int, str | None, str, str]]:
    """(cell index, grade_id, ename, evalue) for every code cell that raised."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(
                    (
                        index,
                        cell.metadata.get("nbgrader", {}).get("grade_id"),
                        output.get("ename", ""),
                        output.get("evalue", ""),
                    )
                )
    return found


def cell_results(nb: nbformat.NotebookNode) -> dict[str, str | None]:
    """For each code cell with a grade_id: None when it ran clean, else ``"EName: message"``."""
    results: dict[str, str | None] = {}
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or not grade_id:
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        results[grade_id] = f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else None
    return results


def execute_solution(assignment: str, timeout: int = 300) -> tuple[nbformat.NotebookNode, float]:
    path = COURSE / "source" / assignment / f"{assignment}.ipynb"
    write_notebook(build_notebook(assignment), path)
    started = time.perf_counter()
    done = execute(nbformat.read(path, as_version=4), path.parent, timeout=timeout)
    return done, time.perf_counter() - started


def execute_learner(assignment: str, timeout: int = 300) -> tuple[nbformat.NotebookNode, float]:
    path = NOTEBOOKS / assignment / f"{assignment}.ipynb"
    started = time.perf_counter()
    done = execute(nbformat.read(path, as_version=4), path.parent, timeout=timeout)
    return done, time.perf_counter() - started


def learner_problems(nb: nbformat.NotebookNode) -> list[str]:
    """A learner version must fail only with NotImplementedError, and must fail at each graded TODO."""
    problems = [
        f"cell {i} ({gid}): {ename}: {evalue[:200]}"
        for i, gid, ename, evalue in cell_errors(nb)
        if ename != "NotImplementedError"
    ]
    has_todo = any(c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code" for c in nb.cells)
    if has_todo and not cell_errors(nb):
        problems.append("no cell raised NotImplementedError although the notebook has TODO cells")
    return problems


def _execute_command(which: str, names: list[str] | None, save: Path | None) -> int:
    status = 0
    for assignment in assignments(names):
        runner = execute_solution if which == "solution" else execute_learner
        nb, seconds = runner(assignment)
        if which == "solution":
            problems = [f"cell {i} ({gid}): {ename}: {evalue[:300]}" for i, gid, ename, evalue in cell_errors(nb)]
        else:
            problems = learner_problems(nb)
        print(f"{'FAIL' if problems else 'ok  '} {which:8s} {assignment:28s} {seconds:6.1f} s (kernel start included)")
        for problem in problems:
            print(f"     {problem}")
        status |= bool(problems)
        if save is not None:
            write_notebook(nb, save / which / f"{assignment}.ipynb")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "release", "check", "execute", "list"])
    parser.add_argument("names", nargs="*", help="assignments (default: all)")
    parser.add_argument("--which", choices=["solution", "learner"], default="solution")
    parser.add_argument("--save", type=Path, default=None, help="execute: folder for the executed copies")
    args = parser.parse_intermixed_args(argv)
    names = args.names or None
    if args.command == "list":
        print("\n".join(assignments()))
        return 0
    if args.command == "build":
        for path in build(names):
            print(f"built {path.relative_to(ROOT)}")
        return 0
    if args.command == "release":
        for path in release(names):
            print(f"released {path.relative_to(ROOT)}")
        return 0
    if args.command == "check":
        return check(names)
    return _execute_command(args.which, names, args.save)


if __name__ == "__main__":
    raise SystemExit(main())
