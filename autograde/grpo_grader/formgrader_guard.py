"""A Jupyter server extension for the instructor's server: the formgrader never grades without the course's grader.

nbgrader's formgrader has an "Autograde" button per submission and "Generate Feedback" buttons per assignment and
per submission. Both run nbgrader in the server process with whatever configuration it could load: when the
course's ``nbgrader_config.py`` did not load, that was nbgrader's defaults (plain ``Execute``, no oracle, no
sandbox, hidden-test source in the feedback), and even with it the button grades in the learner's own kernel
(README trust item 6). This extension takes over their routes:

- **Autograde** refuses, with a message that points to ``make autograde ARGS="--learner <id>"`` (grading a
  class is a batch job: oracle, sandbox, hard time limits; it needs root or user namespaces, not a web request);
- **Generate Feedback** runs the course's own ``python -m autograde.pipeline feedback`` (the course's
  ``GenerateFeedback`` preprocessors, which drop hidden tests; it fails when the course config does not load);
- **Collect** is nbgrader's, followed by naming the collected learners (:mod:`autograde.grpo_grader.roster`);
- a **submission's page** is rendered by :class:`.feedback_pages.SafeHTMLExporter` (nbgrader's ``formgrade``
  template; the learner's outputs and Markdown sanitised, formulas as MathML): no learner script runs in the
  instructor's server's origin;
- the **lists of learners** (Manage Submissions, Manage Students, a notebook's submissions) show a learner as
  :func:`.roster.display_name` does - "last, first", the one name given, or the learner id - instead of nbgrader's
  "None, None" and "name, " (nbgrader's scripts, served with their name line replaced: :data:`NAME_DISPLAY_JS`).

Enabled by ``tools.cli.lab`` for the instructor role (``--ServerApp.jpserver_extensions``). Its routes are put
in front of every other rule of the server, so they win whatever order the extensions load in.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

from jupyter_server.utils import url_path_join
from nbgrader.server_extensions.formgrader import handlers as nbgrader_handlers
from nbgrader.server_extensions.formgrader.apihandlers import BaseApiHandler
from nbgrader.server_extensions.formgrader.base import check_notebook_dir, check_xsrf
from tornado import web
from tornado.routing import HostMatches, Rule
from tornado.web import _ApplicationRouter

CHECKOUT = Path(__file__).resolve().parents[2]
FEEDBACK_TIMEOUT_S = 600

AUTOGRADE_REFUSED = (
    "本课程不在 formgrader 里自动评分：\n"
    "这个按钮只会在学员自己的内核里运行 nbgrader，\n"
    "没有 oracle、沙箱和硬时限，分数可以被提交骗过。\n"
    "请在终端（课程目录）运行：\n"
    '    make autograde ARGS="--learner {learner}"\n'
    "结果写进同一个 gradebook，刷新本页即可看到；\n"
    "之后运行 make feedback 生成反馈。\n"
    "\n"
    "Autograde is disabled in the formgrader for this course:\n"
    "it would grade in the learner's own kernel, without the\n"
    "oracle and the sandbox. In the course folder run\n"
    '    make autograde ARGS="--learner {learner}"\n'
    "then reload this page."
)


def autograde_refusal(learner: str) -> dict:
    """The JSON answer of the formgrader's Autograde route (nbgrader's shape: success, error, log)."""
    message = AUTOGRADE_REFUSED.format(learner=learner)
    return {"success": False, "log": message}


class AutogradeRefused(BaseApiHandler):
    @web.authenticated
    @check_xsrf
    def post(self, assignment_id, student_id):
        self.log.warning("formgrader Autograde of %s/%s refused: use `make autograde`", assignment_id, student_id)
        self.write(json.dumps(autograde_refusal(student_id)))


async def run_pipeline_feedback(course: Path, timeout: float = FEEDBACK_TIMEOUT_S) -> dict:
    """``python -m autograde.pipeline feedback --course <course>`` in the checkout; nbgrader's answer shape."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH")) if p)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "autograde.pipeline",
        "feedback",
        "--course",
        str(course),
        cwd=CHECKOUT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return {"success": False, "error": f"`make feedback` ran past {timeout:.0f} s", "log": ""}
    log = (
        "（formgrader 的 Generate Feedback 运行的是本课程的 `make feedback`，对所有作业生成反馈）\n"
        + output.decode(errors="replace")[-20000:]
    )
    if process.returncode:
        return {"success": False, "error": f"`make feedback` failed (exit {process.returncode})", "log": log}
    return {"success": True, "log": log}


class FeedbackThroughPipeline(BaseApiHandler):
    @web.authenticated
    @check_xsrf
    @check_notebook_dir
    async def post(self, assignment_id, student_id=None):
        self.write(json.dumps(await run_pipeline_feedback(Path(self.coursedir.root))))


class CollectAndName(BaseApiHandler):
    @web.authenticated
    @check_xsrf
    @check_notebook_dir
    def post(self, assignment_id):
        from nbgrader.api import Gradebook

        from autograde.grpo_grader.roster import name_learners
        from tools.project_runtime import MARKER

        result = self.api.collect(assignment_id)
        if result.get("success"):
            course = Path(self.coursedir.root)
            learners = sorted(p.parent.name for p in course.glob(f"submitted/*/{assignment_id}") if p.is_dir())
            with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
                name_learners(gb, course.parent / MARKER, learners)
        self.write(json.dumps(result))


# The formgrader's script waits for MathJax's start-up before it selects the first score (formgrade.js); the page's
# formulas are MathML (drawn by the browser), so MathJax is not loaded from its CDN and this stands in for it: the
# page works offline too.
MATHJAX_STUB = (
    "<script>window.MathJax = {Hub: {Startup: {signal: {Interest: function (notify) { notify('End'); }}}}};</script>"
)


class SanitisedSubmission(nbgrader_handlers.SubmissionHandler):
    """nbgrader's page of one submission, rendered by the course's sanitising exporter."""

    @property
    def exporter(self):
        exporter = self.settings.get("grpo_safe_exporter")
        if exporter is None:
            from autograde.grpo_grader.feedback_pages import SafeHTMLExporter

            # the formgrader's own exporter's configuration: its `formgrade` template and template folders
            exporter = SafeHTMLExporter(config=self.settings["nbgrader_exporter"].config)
            exporter.mathjax_replacement = MATHJAX_STUB
            self.settings["grpo_safe_exporter"] = exporter
        return exporter


# How the formgrader's lists show a learner: roster.display_name, in the formgrader's JavaScript.
NAME_DISPLAY_JS = """\
function grpoDisplayName(last, first, id) {
  var parts = [last, first].map(function (p) { return p === null || p === undefined ? "" : String(p).trim(); })
    .filter(function (p) { return p !== ""; });
  return parts.length ? parts.join(", ") : id;
}
"""
# nbgrader's scripts that write `last_name + ", " + first_name`, and the learner id each one has
NAMED_SCRIPTS = {
    "manage_submissions.js": 'this.model.get("student")',
    "manage_students.js": 'this.model.get("id")',
    "gradebook_notebook_submissions.js": 'this.model.get("student")',
}
_NAME_EXPRESSION = 'last_name + ", " + first_name'


def named_script(name: str) -> str:
    """nbgrader's formgrader script ``name`` with its name expression replaced by :data:`NAME_DISPLAY_JS`'s function.
    Raises ValueError when the expression is not there exactly once (another nbgrader version)."""
    text = (Path(nbgrader_handlers.static_path) / "js" / name).read_text(encoding="utf-8")
    if text.count(_NAME_EXPRESSION) != 1:
        raise ValueError(f"nbgrader's {name} does not write {_NAME_EXPRESSION!r} once: the name display is not patched")
    call = f'grpoDisplayName(this.model.get("last_name"), this.model.get("first_name"), {NAMED_SCRIPTS[name]})'
    return NAME_DISPLAY_JS + text.replace(_NAME_EXPRESSION, call)


class NamedScript(web.RequestHandler):
    """One of NAMED_SCRIPTS, patched (served like nbgrader's static scripts: no login)."""

    def get(self, name):
        self.set_header("Content-Type", "application/javascript; charset=UTF-8")
        self.write(named_script(f"{name}.js"))


API_ROUTES = [  # nbgrader's own patterns (formgrader/apihandlers.py)
    (r"/formgrader/api/submission/([^/]+)/([^/]+)/autograde", AutogradeRefused),
    (r"/formgrader/api/assignment/([^/]+)/generate_feedback", FeedbackThroughPipeline),
    (r"/formgrader/api/assignment/([^/]+)/([^/]+)/generate_feedback", FeedbackThroughPipeline),
    (r"/formgrader/api/assignment/([^/]+)/collect", CollectAndName),
]
_SCRIPT_NAMES = "|".join(re.escape(name.removesuffix(".js")) for name in NAMED_SCRIPTS)
VIEW_ROUTES = [  # a submission's page (nbgrader's pattern, formgrader/handlers.py), the scripts that name learners
    (r"/formgrader/submissions/([^/]+)/?", SanitisedSubmission),
    (rf"/formgrader/static/js/({_SCRIPT_NAMES})\.js", NamedScript),
]
ROUTES = API_ROUTES + VIEW_ROUTES


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    webapp = serverapp.web_app
    base = webapp.settings["base_url"]
    handlers = [(url_path_join(base, pattern.lstrip("/")), handler) for pattern, handler in ROUTES]
    # first of all rules: nbgrader's formgrader registers the same routes (Tornado takes the first match)
    webapp.default_router.rules.insert(0, Rule(HostMatches(".*$"), _ApplicationRouter(webapp, handlers)))
    serverapp.log.info(
        "formgrader guard: Autograde refused (make autograde), Generate Feedback via make feedback, submissions "
        "sanitised, learners shown by name or id"
    )
