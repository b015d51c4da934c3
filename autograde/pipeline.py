"""The instructor pipeline around nbgrader: parallel sandboxed autograding, feedback, grade export.

    python -m autograde.pipeline autograde [--sample] [--workers N] [--force] [--learner ID ...] [--shard k/N]
    python -m autograde.pipeline merge-shards
    python -m autograde.pipeline feedback
    python -m autograde.pipeline grades [--table]
    python -m autograde.pipeline review [--calibrate]
    python -m autograde.pipeline sample --rebuild | --check
    python -m autograde.pipeline probe [--json] [--imports find] [--scan-view]
    python -m autograde.pipeline prepare
    python -m autograde.pipeline settings [--write | --check]

`make autograde|merge-shards|feedback|grades` call the first four. Every command takes ``--course DIR`` (the nbgrader
course root; default: this folder). Settings: ``GradingPipeline`` in ``nbgrader_config.py``. Details and
the walk-through for instructors: ``autograde/README.md``.

This module reads the command line and the settings and calls the subcommand, one module each under
``autograde/commands/``; the names other modules and the tests import from here are re-exported (``__all__``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograde.commands.autograde import SUBMITTED_LAYOUT, _no_submissions, autograde, grading_order, zygote_warm
from autograde.commands.feedback import feedback
from autograde.commands.grades import grades, score_text
from autograde.commands.merge_shards import merge_shards, parse_shard
from autograde.commands.prepare import prepare
from autograde.commands.probe import probe
from autograde.commands.review import review
from autograde.commands.sample import install as install_sample_class
from autograde.commands.sample import sample
from autograde.commands.settings import README, readme_with_settings_tables, readme_with_view, settings_command
from autograde.grpo_grader.course import load_settings
from autograde.grpo_grader.gradebook import damaged_gradebook
from autograde.grpo_grader.isolation import SANDBOX_MODES
from autograde.sample_class import build as sample_class

GRADEBOOK_COMMANDS = ("autograde", "merge-shards", "feedback", "grades")  # they stop at a damaged gradebook

__all__ = [  # what other modules and the tests import from here
    "README",
    "SUBMITTED_LAYOUT",
    "_no_submissions",
    "autograde",
    "feedback",
    "grades",
    "grading_order",
    "main",
    "merge_shards",
    "probe",
    "readme_with_settings_tables",
    "readme_with_view",
    "score_text",
    "zygote_warm",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "command",
        choices=["autograde", "merge-shards", "feedback", "grades", "review", "sample", "probe", "prepare", "settings"],
    )
    parser.add_argument("--shard", default=None, help="autograde: grade only shard k of N learners (k/N), into shards/")
    parser.add_argument("--course", type=Path, default=None, help="nbgrader course root (default: autograde/)")
    parser.add_argument("--sample", action="store_true", help="autograde: add the bundled sample class first")
    parser.add_argument("--force", action="store_true", help="autograde: regrade unchanged submissions too")
    parser.add_argument("--learner", action="append", default=None, help="autograde: only these learners")
    parser.add_argument("--workers", type=int, default=None, help="parallel slots (default: one per core)")
    parser.add_argument("--cell-timeout", type=int, default=None, help="seconds per cell")
    parser.add_argument("--notebook-timeout", type=int, default=None, help="hard limit per notebook (s)")
    parser.add_argument("--sandbox", default=None, choices=["auto", *SANDBOX_MODES])
    parser.add_argument("--keep", action="store_true", help="autograde: keep the temporary grading folder (logs)")
    parser.add_argument("--rebuild", action="store_true", help="sample: regenerate the sample submissions")
    parser.add_argument(
        "--check",
        action="store_true",
        help="sample, settings: fail when the sample submissions or the README's generated sections are stale",
    )
    parser.add_argument(
        "--write", action="store_true", help="settings: regenerate the README's settings tables and sandbox view"
    )
    parser.add_argument(
        "--table", action="store_true", help="grades: print one row per learner and assignment (not the summary)"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="review: recompute the copy review's calibration and its precision/recall on the sample class",
    )
    parser.add_argument("--json", action="store_true", help="probe: print the structured result (one JSON object)")
    parser.add_argument(
        "--imports",
        default="import",
        choices=["import", "find"],
        help="probe: import what grading imports inside the sandbox (default), or only find the "
        "packages on its sys.path (a second, as a grading run's own pre-flight does)",
    )
    parser.add_argument(
        "--scan-view",
        action="store_true",
        help="probe: also read every file a grading kernel can read (minutes) and list those naming the checkout, "
        "the course folder or a learner id",
    )
    args = parser.parse_args(argv)
    overrides = {
        "workers": args.workers,
        "cell_timeout": args.cell_timeout,
        "notebook_timeout": args.notebook_timeout,
        "sandbox": args.sandbox,
    }
    if args.command == "autograde" and args.sample:
        for key, value in sample_class.machine_timeouts().items():
            if overrides.get(key) is None:
                overrides[key] = value
    try:
        settings = load_settings(args.course, **overrides)
    except ValueError as error:  # a setting of nbgrader_config.py that is not one (check_pipeline_options)
        print(f"[{args.command}] {error}", file=sys.stderr)
        return 2
    if args.command in GRADEBOOK_COMMANDS:  # every command that reads the gradebook first checks it can
        damaged = damaged_gradebook(settings)
        if damaged:
            print(f"[{args.command}] {damaged}", file=sys.stderr)
            return 2
    if args.command == "autograde":
        if args.sample:
            install_sample_class(settings)
        return autograde(settings, force=args.force, only=args.learner, keep=args.keep, shard=parse_shard(args.shard))
    if args.command == "merge-shards":
        return merge_shards(settings)
    if args.command == "feedback":
        return feedback(settings)
    if args.command == "grades":
        return grades(settings, table=args.table)
    if args.command == "review":
        return review(settings, calibrate=args.calibrate)
    if args.command == "sample":
        return sample(args.rebuild)
    if args.command == "settings":
        return settings_command(settings, write=args.write, check=args.check)
    if args.command == "prepare":
        return prepare(settings)
    if args.command == "probe":
        return probe(settings, as_json=args.json, import_mode=args.imports, scan=args.scan_view)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
