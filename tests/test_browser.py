"""The course in a real browser: JupyterLab (served here) + headless Chromium runs notebook 1; the instructor's lab
roles and the nbgrader exchange; pages the course writes to disk (a feedback page, the class report) opened from
their files run nothing of a learner's and ask the network for nothing.

Needs Debian's Chromium (`apt-get install chromium`), node, and playwright-core
(`npm ci --prefix tests/browser`; it downloads no browser). Skipped, with the reason, when one is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser_pages import browser_missing, chromium_path, open_pages  # tests/browser_pages.py

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "nb01_group_advantages"
NOTEBOOK = ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
DRIVER = ROOT / "tests" / "browser" / "run_notebook.mjs"
ARTIFACTS = ROOT / "artifacts" / "browser"


_chromium = chromium_path


def _missing() -> str | None:
    if browser_missing():
        return browser_missing()
    if not NOTEBOOK.is_file():
        return f"{NOTEBOOK.relative_to(ROOT)} does not exist yet (run `make release`)"
    return None


def _first_todo(path: Path) -> tuple[int, str]:
    """(index, name of the function it defines) of the first TODO (nbgrader answer code cell)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook["cells"]):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("solution"):
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            defined = re.search(r"^def (\w+)", source, re.MULTILINE)
            return index, defined.group(1) if defined else ""
    raise AssertionError("the learner notebook has no answer cell (nbgrader solution: true)")


@pytest.mark.slow
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_notebook1_in_chromium(tmp_path):
    from tools.cli.lab import LabServer

    before = hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # A private JupyterLab state: autosave off (the committed notebook must not be rewritten),
    # no workspace or runtime files left in the user's folders.
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "docmanager-extension"
    settings.mkdir(parents=True)
    (settings / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}), encoding="utf-8")
    news = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"  # no "Jupyter news?" toast
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}), encoding="utf-8")
    env = dict(os.environ)
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    env.pop("PYTHONPATH", None)  # the notebook's bootstrap cell finds the course by itself
    relative = NOTEBOOK.relative_to(ROOT).as_posix()
    with open(tmp_path / "jupyterlab.log", "w") as log:
        server = LabServer(ROOT, env=env, log=log)
        with server:
            options = {
                "chromium": _chromium(),
                "url": server.url(f"lab/tree/{relative}"),
                "screenshots": str(ARTIFACTS),
                "name": ASSIGNMENT,
                "timeout_s": int(os.environ.get("GRPO_BROWSER_TIMEOUT_S", "180")),
            }
            done = subprocess.run(
                ["node", str(DRIVER), json.dumps(options)],
                cwd=DRIVER.parent,
                capture_output=True,
                text=True,
                timeout=400,
            )
        assert server.process is None  # stopped
    assert done.returncode == 0, (
        f"browser driver failed:\n{done.stderr[-4000:]}\n--- server log ---\n"
        + ((tmp_path / "jupyterlab.log").read_text()[-3000:])
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    cells = report["cells"]
    source_cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    assert len(cells) == len(source_cells), (len(cells), len(source_cells))

    # The rendered 导读 heading.
    headings = [h for cell in cells for h in cell["headings"]]
    assert "导读" in headings, headings

    # The bootstrap (first code cell, its source collapsed so no input prompt is drawn) ran without an
    # error: its output, the preflight line, is on the page.
    code_cells = [cell for cell in cells if cell["kind"] == "code"]
    assert code_cells[0]["prompt"] in ("", "[1]:"), code_cells[0]
    assert not code_cells[0]["errors"], code_cells[0]["errors"]
    assert "preflight BASE-CPU: ok" in "".join(code_cells[0]["outputs"]), code_cells[0]["outputs"]

    # Run All stops at the first error: NotImplementedError, in a cell at or after the first TODO,
    # with every code cell before it executed cleanly and none after it executed.
    failing = [cell for cell in cells if cell["errors"]]
    assert failing, "no error shown: the first TODO should raise NotImplementedError"
    first = failing[0]
    shown = "\n".join(first["errors"])
    todo_index, todo_function = _first_todo(NOTEBOOK)
    assert "NotImplementedError" in shown, shown
    assert first["index"] > todo_index and f"in {todo_function}(" in shown, (first["index"], todo_index, shown)
    for cell in code_cells[1:]:
        if cell["index"] < first["index"]:
            assert re.fullmatch(r"\[\d+\]:", cell["prompt"]), (
                f"cell {cell['index']} before the error did not run: {cell}"
            )
            assert not cell["errors"], cell
        elif cell["index"] > first["index"]:
            assert cell["prompt"] in ("[ ]:", ""), f"cell {cell['index']} ran after the error: {cell['prompt']}"
    assert not report["pageErrors"], report["pageErrors"]

    for path in report["screenshots"]:
        assert Path(path).stat().st_size > 10_000, path
    # Nothing was written back into the committed notebook.
    assert hashlib.sha256(NOTEBOOK.read_bytes()).hexdigest() == before
    print(f"screenshots: {', '.join(report['screenshots'])}", file=sys.stderr)


ROLES_DRIVER = ROOT / "tests" / "browser" / "lab_roles.mjs"


def _private_lab_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env.update(
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.slow
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_lab_roles_in_chromium(tmp_path):
    """Learner (`make lab`): the work copy, no Formgrader / Create Assignment, an Assignment List without
    error. Instructor (`make lab-instructor`): both panels, and the formgrader lists every assignment
    (screenshot artifacts/browser/formgrader_assignments.png)."""
    from tools.cli import workspace
    from tools.cli.lab import LabServer, prepare_instructor

    assignments = sorted(p.stem for p in (ROOT / "solutions").glob("nb*.py"))
    prepare_instructor(ROOT)  # source, release and gradebook when missing (what make lab-instructor does)
    workspace.sync(ROOT, quiet=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = _private_lab_env(tmp_path)
    with open(tmp_path / "learner.log", "w") as learner_log, open(tmp_path / "instructor.log", "w") as instructor_log:
        learner = LabServer(ROOT, env=env, log=learner_log, role="learner", serve=ROOT / "work")
        instructor = LabServer(ROOT, env=env, log=instructor_log, role="instructor")
        with learner, instructor:
            options = {
                "chromium": _chromium(),
                "learner": learner.url("lab"),
                "instructor": instructor.url("lab"),
                "formgrader": instructor.url("formgrader"),
                "assignments": assignments,
                "screenshots": str(ARTIFACTS),
                "timeout_s": int(os.environ.get("GRPO_BROWSER_TIMEOUT_S", "180")),
            }
            done = subprocess.run(
                ["node", str(ROLES_DRIVER), json.dumps(options)],
                cwd=ROLES_DRIVER.parent,
                capture_output=True,
                text=True,
                timeout=500,
            )
    logs = "\n".join(
        f"--- {name} log ---\n" + (tmp_path / f"{name}.log").read_text()[-2000:] for name in ("learner", "instructor")
    )
    assert done.returncode == 0, f"browser driver failed:\n{done.stderr[-4000:]}\n{logs}"
    report = json.loads(done.stdout.strip().splitlines()[-1])

    learner_view, instructor_view = report["learner"], report["instructor"]
    assert set(assignments) <= set(learner_view["files"]), learner_view["files"]  # the work copy
    assert "solutions" not in learner_view["files"] and "solutions" in instructor_view["files"]
    assert "Assignment List" in learner_view["menu"] and "Formgrader" not in learner_view["menu"], learner_view["menu"]
    assert not any("Create Assignment" in tab for tab in learner_view["tabs"]), learner_view["tabs"]
    assert "Error fetching" not in learner_view["assignmentList"], learner_view["assignmentList"][-1500:]
    assert "Formgrader" in instructor_view["menu"], instructor_view["menu"]
    assert any("Create Assignment" in tab for tab in instructor_view["tabs"]), instructor_view["tabs"]
    formgrader = instructor_view["formgrader"]
    listed = " ".join(formgrader["rows"])
    assert all(name in listed for name in assignments), formgrader["rows"]
    assert "No data available" not in formgrader["body"] and "exchange directory" not in formgrader["body"], formgrader[
        "body"
    ]
    for path in report["screenshots"]:
        assert Path(path).stat().st_size > 10_000, path
    print(f"screenshots: {', '.join(report['screenshots'])}", file=sys.stderr)


EXCHANGE_DRIVER = ROOT / "tests" / "browser" / "exchange_walk.mjs"


def _course_of_its_own(root: Path, assignment: str, learner: str) -> Path:
    """A course folder for one test: this checkout's grader and tools linked in, the course config copied, a roster
    naming ``learner`` in course.toml, ``assignment`` generated (nbgrader source, release, gradebook)."""
    import tools.chain.notebooks as chain

    (root / "autograde").mkdir(parents=True)
    text = (ROOT / "course.toml").read_text(encoding="utf-8")
    (root / "course.toml").write_text(
        text + f'\n[roster]\n{learner} = {{ first_name = "小明", last_name = "王" }}\n', encoding="utf-8"
    )
    for part in ("__init__.py", "grpo_grader", "commands", "pipeline.py"):
        (root / "autograde" / part).symlink_to(ROOT / "autograde" / part)
    for part in ("tools", "solutions", "environments", "pyproject.toml"):
        (root / part).symlink_to(ROOT / part)
    shutil.copy2(ROOT / "autograde" / "nbgrader_config.py", root / "autograde" / "nbgrader_config.py")
    chain.build([assignment], course=root / "autograde")
    chain._generate_assignment(root / "autograde", assignment)
    return root


def _walk(options: dict) -> dict:
    done = subprocess.run(
        ["node", str(EXCHANGE_DRIVER), json.dumps(options)],
        cwd=EXCHANGE_DRIVER.parent,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, f"browser driver ({options['phase']}) failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_exchange_walk_and_offline_feedback_in_chromium(tmp_path):
    """release (formgrader) -> Fetch, Submit (the learner's Assignment List) -> Collect (formgrader; the learner shows
    the roster's name) -> the formgrader's Autograde refuses and points to make autograde -> `make autograde` ->
    the formgrader's Generate Feedback runs make feedback -> the feedback page, opened with the network off, draws its
    formulas (MathML) and shows no hidden-test source."""
    import getpass

    from nbgrader.api import Gradebook

    from tools.chain.cells import load_settings
    from tools.cli.lab import FETCH_DIR, LabServer

    course_id = load_settings(ROOT)["id"]

    assignment, learner_id = ASSIGNMENT, getpass.getuser()
    root = _course_of_its_own(tmp_path / "course", assignment, learner_id)
    course = root / "autograde"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    env = _private_lab_env(tmp_path)
    base = {
        "chromium": _chromium(),
        "assignment": assignment,
        "learner_id": learner_id,
        "screenshots": str(ARTIFACTS),
        "timeout_s": int(os.environ.get("GRPO_BROWSER_TIMEOUT_S", "180")),
    }
    with open(tmp_path / "learner.log", "w") as learner_log, open(tmp_path / "instructor.log", "w") as instructor_log:
        learner = LabServer(root, env=env, log=learner_log, role="learner", serve=root / "work")
        instructor = LabServer(root, env=env, log=instructor_log, role="instructor")
        with learner, instructor:
            (root / "work" / assignment).mkdir()  # the work copy `make lab` makes: Fetch must still be offered
            shutil.copy2(course / "release" / assignment / f"{assignment}.ipynb", root / "work" / assignment)
            # a learner handed in by hand (no roster entry, not collected, not graded): listed by id
            (course / "submitted" / "carol" / assignment).mkdir(parents=True)
            shutil.copy2(
                course / "release" / assignment / f"{assignment}.ipynb", course / "submitted" / "carol" / assignment
            )
            walked = _walk(
                {
                    **base,
                    "phase": "exchange",
                    "learner": learner.url("lab"),
                    "formgrader": instructor.url("formgrader"),
                    "checkpoint": f"{Path(FETCH_DIR).name}/{assignment}/{assignment}.ipynb",
                }
            )
            assert walked["fetchOffered"] >= 1 and walked["checkpoint"] == 201, walked
            fetched = root / FETCH_DIR / assignment
            assert (fetched / ".ipynb_checkpoints" / f"{assignment}-checkpoint.ipynb").is_file()
            inbound = list((course / "exchange").glob(f"*/inbound/{learner_id}+{assignment}+*"))
            assert len(inbound) == 1 and (inbound[0] / f"{assignment}.ipynb").is_file(), inbound
            assert not list(inbound[0].rglob(".ipynb_checkpoints")), "the submission carries .ipynb_checkpoints"
            submitted = course / "submitted" / learner_id / assignment
            assert (submitted / f"{assignment}.ipynb").is_file() and not (submitted / ".ipynb_checkpoints").exists()
            rows = " | ".join(walked["submissionRows"])
            assert "王, 小明" in rows and "None, None" not in rows, rows
            assert any(row.startswith("carol carol") for row in walked["submissionRows"]), rows
            assert "make autograde" in walked["autograde"] and f"--learner {learner_id}" in walked["autograde"], walked
            assert not (course / "autograded").exists(), "the formgrader's Autograde graded after all"

            graded = subprocess.run(
                [sys.executable, "-m", "autograde.pipeline", "autograde", "--course", str(course), "--workers", "1"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
            page = course / "feedback" / learner_id / assignment / f"{assignment}.html"
            with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id) as gb:
                submission = gb.find_submission_notebook(assignment, assignment, learner_id).id
            fed = _walk(
                {
                    **base,
                    "phase": "feedback",
                    "formgrader": instructor.url("formgrader"),
                    "feedback_file": str(page),
                    "submission": instructor.url(f"formgrader/submissions/{submission}/"),
                }
            )
    logs = "\n".join(
        f"--- {name} log ---\n" + (tmp_path / f"{name}.log").read_text()[-2000:] for name in ("learner", "instructor")
    )
    assert "make feedback" in fed["generateFeedback"] and "Success" in fed["generateFeedback"], (fed, logs)
    html = page.read_text(encoding="utf-8")
    source = (course / "source" / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8")
    assert "BEGIN HIDDEN TESTS" in source and "BEGIN HIDDEN TESTS" not in html
    view = fed["feedback"]
    assert view["maths"] > 10 and view["drawn"] == view["maths"], view["maths"]
    assert view["fractions"] and max(view["fractions"]) > 1.2 * view["lineHeight"], view  # a fraction is stacked
    assert view["rawTex"] == 0, view["text"][:2000]
    # the formgrader's page of the submission, rendered by the course's sanitising exporter: grading inputs, MathML
    shown = fed["submissionPage"]
    assert shown["gradeCells"] > 3 and shown["scoreInputs"] > 0 and shown["maths"] > 10, shown
    assert not walked["pageErrors"] and not fed["pageErrors"], (walked["pageErrors"], fed["pageErrors"])
    print(f"blocked requests of the offline feedback page: {fed['blockedRequests']}", file=sys.stderr)


def _feedback_exporter():
    """The exporter `make feedback` uses: nbgrader's GenerateFeedback with the course's nbgrader_config.py."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "autograde")).load_config()
    converter = GenerateFeedback(coursedir=CourseDirectory(config=config), config=config)
    return converter.exporter_class(parent=converter, config=converter.config)


def hostile_report_rows() -> tuple[list[dict], list[dict], dict]:
    """grades.csv / grades_by_test.csv rows whose learner, name, flag and message carry markup and script."""
    from page_attacks import run

    evil = f'<script>{run("report-script")}</script><img src=x onerror="{run("report-onerror")}">'
    rows = [
        {"learner": "alice", "assignment": "nb01", "score": 3.0, "max_score": 4.0, "status": "graded",
         "reason": evil, "flags": f"similar:{evil}:90%", "manual_pending": 0.0},
        {"learner": evil, "assignment": "nb01", "score": 0.0, "max_score": 4.0, "status": "invalid",
         "reason": evil, "flags": "", "manual_pending": 0.0},
    ]  # fmt: skip
    tests = [
        {"learner": "alice", "assignment": "nb01", "notebook": "nb01", "test": "t", "score": 0.0, "max_score": 4.0,
         "outcome": "failed", "message": evil},
    ]  # fmt: skip
    return rows, tests, {"alice": evil}


@pytest.fixture(scope="module")
def offline_views(tmp_path_factory):
    """One Chromium run over the pages written from disk: the feedback page of page_attacks' notebook (with its
    Content-Security-Policy and without it: the sanitiser alone), nbconvert's own page of it, and a class report
    whose learner, name, flag and failure message carry script."""
    from nbconvert.exporters import HTMLExporter
    from page_attacks import attack_notebook

    from autograde.grpo_grader.class_report import ClassData, render_report
    from autograde.grpo_grader.feedback_pages import FeedbackExporter
    from autograde.grpo_grader.sanitise import CSP_META

    folder = tmp_path_factory.mktemp("pages")
    exporter = _feedback_exporter()
    assert isinstance(exporter, FeedbackExporter)
    nb = attack_notebook()
    resources = {"nbgrader": {"notebook": "attack", "score": 1.0, "max_score": 2.0, "late_penalty": 0.0}}
    page, _ = exporter.from_notebook_node(nb, resources=resources)
    rows, tests, names = hostile_report_rows()
    report = render_report(ClassData(rows, tests, names=names, unlisted=["<b>odd</b>"], course="x"))
    files = {
        "feedback": page,
        "feedback_without_csp": page.replace(CSP_META, ""),
        "nbconvert_unsanitised": HTMLExporter(template_name="classic").from_notebook_node(nb)[0],
        "report_hostile": report,
        "report_without_csp": report.replace(CSP_META, ""),
    }
    pages = []
    for name, text in files.items():
        (folder / f"{name}.html").write_text(text, encoding="utf-8")
        report = name.startswith("report")  # (no refresh to wait for)
        pages.append(
            {
                "name": name,
                "file": str(folder / f"{name}.html"),
                "click": ["#jslink", "#hover-me"],
                "wait_ms": 300 if report else 1200,
                "screenshot": name in ("feedback", "report_hostile"),
            }
        )
    views = open_pages(pages)
    views["csp"] = {name: text.count(CSP_META) for name, text in files.items()}
    return views


@pytest.mark.slow
@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_feedback_page_runs_nothing_of_the_learner(offline_views):
    """A feedback page (nbgrader's feedback template, the course's FeedbackExporter, as `make feedback` configures
    it) of a notebook carrying a <script>, an onerror handler, display(Javascript(...)), an <iframe srcdoc>, a
    javascript: link, an SVG with script, a <meta http-equiv=refresh>, a raw HTML cell, a widget and more: none of
    them runs or asks for anything, with the page's Content-Security-Policy and without it (the sanitiser alone),
    while its formulas (MathML) and its PNG are drawn and the Colab badge reads as its text. nbconvert's own page
    of the same notebook runs them (the check can fail)."""
    from page_attacks import RUN_BY_NBCONVERT, ran_marks

    raw = ran_marks(offline_views["nbconvert_unsanitised"])
    assert RUN_BY_NBCONVERT <= raw, f"nbconvert's page did not run {sorted(RUN_BY_NBCONVERT - raw)}"
    assert offline_views["csp"]["feedback"] == 1
    for name in ("feedback", "feedback_without_csp"):
        view = offline_views[name]
        assert not ran_marks(view) and not view["requests"] and not view["dialogs"], (name, view["requests"])
        assert view["url"].endswith(f"/{name}.html"), view["url"]  # no refresh took the page elsewhere
        assert view["mathsDrawn"] == 4 and view["maths"] == 5, view  # (+ the <math> emptied of its annotation-xml)
        assert view["images"] >= 1 and view["imagesDrawn"] == view["images"], view  # the PNG, no broken image
        text = view["text"].replace("\xa0", " ")  # (MathML text writes its spaces as no-break spaces)
        assert "per_token_loss" in text and "per\\_token" not in text, text[:2000]
        assert "在 Colab 中打开" in text and "学员的文字 <script> 显示为文字" in text, text[:2000]
        assert "<img src=x onerror=" in text  # the formula's text shown as text


@pytest.mark.slow
@pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))
def test_class_report_shows_learner_text_as_text(offline_views):
    """The class report with a learner id, a roster name, a review flag and a failure message that carry
    <script> and an onerror handler: nothing runs, nothing is requested (with and without its CSP), the text shows
    as written, and the score distribution is drawn (inline SVG)."""
    from page_attacks import ran_marks

    assert offline_views["csp"]["report_hostile"] == 1
    for name in ("report_hostile", "report_without_csp"):
        view = offline_views[name]
        assert not ran_marks(view) and not view["requests"] and not view["dialogs"] and not view["pageErrors"], view
        assert view["text"].count("<script>document.title") >= 4, view["text"][:3000]
        assert "<b>odd</b>" in view["text"]
        assert view["svgs"] == 1 and view["svgsDrawn"] == 1, view  # nb01's score distribution
