"""nbgrader configuration of the course (the course root is this folder).

`make autograde|feedback|grades` run `python -m autograde.pipeline`, which reads this file too: the
``GradingPipeline`` section below holds its settings (nbgrader itself ignores that section).
"""

import os
import sys

# This checkout's course code comes first on sys.path: nbgrader, the formgrader and the pipeline then import the
# grader below (and `tools`) from any working directory, with or without an editable install (which may be missing
# or point at another checkout). A copy of this file without the package beside it (a test's course folder) leaves
# sys.path alone.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_CHECKOUT, "autograde", "__init__.py")) and sys.path[:1] != [_CHECKOUT]:
    sys.path.insert(0, _CHECKOUT)

c = get_config()  # noqa: F821  (provided by nbgrader)

try:
    from tools.project_runtime import course_id  # this checkout's tools where the package is beside this file
except ModuleNotFoundError:  # a copy away from any checkout and no editable install: no course code at all, and
    pass  # nbgrader stops at the grader's preprocessors below, naming the package that is missing
else:
    # the id of course.toml (its one reader): of the checkout above this file, else of the checkout `tools` comes from
    c.CourseDirectory.course_id = course_id(
        _CHECKOUT
        if os.path.isfile(os.path.join(_CHECKOUT, "course.toml"))
        else None  # mirrors tools.project_runtime.MARKER
    )

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# the pipeline's per-submission report lives beside the autograded notebook; it is not copied to feedback
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "grading_report.json"]

# What a learner sees in place of an answer (nbgrader's ClearSolutions).
c.ClearSolutions.code_stub = {"python": '# 在这里写你的代码\nraise NotImplementedError("请先完成这个 TODO")'}
c.ClearSolutions.text_stub = "在这里写下你的回答。"

# ----------------------------------------------------------------------------- autograding

# The preprocessors are named by import path (nbconvert imports each one when nbgrader registers it, as it does for
# `exporter_class` below): reading this file imports nothing of nbgrader's, so a lesson's hidden-test cell, which
# reads the oracle flags at the end of this file (oracles.run_in_kernel), loads it in milliseconds, not ~1.3 s.
# (`make lab-instructor` imports each of them when it checks this file: tools/cli/lab.py.)
#
# nbgrader's own steps, plus: the hidden tests of oracle-graded cells never run in the learner's kernel, whose test
# cells run the oracle's cases instead, judged outside the kernel (StripHiddenTests), the bootstrap cell always runs
# first (RestoreBootstrap), helpers a learner rebound are put back before each test cell (RestoreTrusted), and
# execution survives floods of output, malformed kernel messages and dead kernels (SafeExecute, a subclass of
# nbgrader's Execute); nbgrader's metadata check runs with its schema compiled once (CheckCellMetadataOnce). See
# autograde/grpo_grader/preprocessors.py.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "autograde.grpo_grader.preprocessors.StripHiddenTests",
    "autograde.grpo_grader.preprocessors.RestoreBootstrap",
    "autograde.grpo_grader.preprocessors.RestoreTrusted",
    "autograde.grpo_grader.preprocessors.CheckCellMetadataOnce",
]
c.Autograde.autograde_preprocessors = [
    "autograde.grpo_grader.preprocessors.SafeExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "autograde.grpo_grader.preprocessors.CheckCellMetadataOnce",
]
# Locked cells edited by a learner are restored from the gradebook by checksum (nbgrader's default);
# deleted test cells are put back too, so that deleting a test never skips it.
c.OverwriteCells.add_missing_cells = True

# nbgrader's default of 30 s per cell is too short for torch code (the first `import torch`, a model load);
# a notebook that runs past GradingPipeline.notebook_timeout is killed as a whole.
c.Execute.timeout = 180  # seconds per cell; on timeout the kernel is interrupted, the cell fails
c.Execute.startup_timeout = 120  # seconds for the kernel to start
c.Execute.interrupt_on_timeout = True
c.Execute.iopub_timeout = 10
c.Execute.raise_on_iopub_timeout = False  # late output never fails a notebook: the execute reply decides
# Demonstrations that the grading kernel does not run (no point depends on them, and no
# later cell reads a name they define: tests/test_autograde.py checks it): figures and printed walk-throughs that
# cost every graded notebook 0.2-0.6 s each (lesson 1's timing loops, lesson 2's ratio, k1/k3 and weighting plots,
# lesson 3's gradient, length-bias and clip-higher figures), lesson 3b's TRL conformance run (imports TRL, ~7 s),
# lesson 5's memory probe (~5 s), lesson 7's experiment and what reads its records (it writes records into the
# course, which is read-only in the sandbox, and trains with TRL). The feedback shows a note in their place.
c.SafeExecute.demo_cells = {  # by grade_id (locked cells of the lesson source); a learner's own cell is never one
    "nb01_group_advantages": ["demo_pipeline_answers", "demo_timing"],
    "nb02_grpo_objective": ["demo_ratio_grid", "demo_kl_samples", "demo_score_function", "demo_length_weights"],
    "nb03a_cispo_trace_lab": ["gradient_figure"],
    "nb03b_loss_family_trl": [
        "length_bias_example",
        "accumulation_example",
        "clip_higher_example",
        "trl_conformance_code",
        "trl_conformance_run",
        "ratio_drift_example",
    ],
    "nb05_logprobs_masks": ["demo_memory_probe"],
    "nb07_online_grpo": [
        "demo_experiment",
        "demo_plot_steps",
        "demo_entropy_kinds",
        "demo_pass_maj",
        "demo_trl",
        "demo_multiprocess",
        "demo_loss_types_processes",
        "demo_accelerate",
    ],
}
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# Feedback shows the messages of failed hidden tests but not their code.
c.GenerateFeedback.preprocessors = [
    "autograde.grpo_grader.feedback_pages.HideHiddenTests",
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# nbconvert's HTML exporter without its BeautifulSoup pass over the whole page (most of the time it took)
c.GenerateFeedback.exporter_class = "autograde.grpo_grader.feedback_pages.FeedbackExporter"

# ----------------------------------------------------------------------------- the grading pipeline
# `c.GradingPipeline.<name>`: the settings of `make autograde` (nbgrader ignores this section). Each one is defined
# once, with its default and help, in autograde/grpo_grader/course.py (class GradingPipeline); the tables in
# autograde/README.md are generated from there, and `python -m autograde.pipeline settings` prints every setting
# with the value in force. Set here only what this course changes; an unknown name is an error.
# case families of the conventions card (C1-C3), drawn now that the lessons implement them (off in the oracles by default)
c.GradingPipeline.oracle_flags = {
    "nb02_grpo_objective": {"zero_one_masks": True, "beta_requires_ref": True, "masked_large_log_ratio": True},
    "nb03a_cispo_trace_lab": {"masked_large_log_ratio": True, "mask_values_checked": True},
    "nb03b_loss_family_trl": {"mask_values_checked": True},
    "nb05_logprobs_masks": {"zero_one_float_masks": True},
}
