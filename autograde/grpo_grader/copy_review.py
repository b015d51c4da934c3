"""Copy review of a class: every learner's unit of each graded function (``learner_code``) compared with the course's
reference and with every other learner's, each comparison against a threshold calibrated for that function.

The thresholds come from independent honest implementations of each function (``copy_calibration.json``, made by
``python -m autograde.pipeline review --calibrate`` from the sample class and its calibration learners): a flag is
raised only above ``max(similarity the independent versions reach) + MARGIN``; where that is more than ``CAP`` the
lesson's contract leaves about one natural way to write the function and it is not flagged at all. The flags
(``copies-reference:<share>%``, ``similar:<learner>:<share>%``) are for a human and never change a score.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .code_prints import similarity
from .learner_code import Unit, notebook_units, released_prints
from .submission import read_notebook

CALIBRATION = Path(__file__).with_name("copy_calibration.json")
MARGIN = 0.25  # above the most similar independent version (chosen by the sweep in autograde/README.md)
COMMON = 3  # a fingerprint found in this many independent versions is the contract's idiom, not evidence
CAP = 0.95  # a threshold above this: the function is not flagged (its spec leaves about one way to write it)
MIN_PRINTS = 5  # a unit with fewer fingerprints (after the released stub's) is too short to say anything
REFERENCE = "参考答案"  # the other side of a learner-vs-reference comparison
MAX_READ = 8 << 20  # bytes read of a course notebook


def threshold_from(values: list[float], margin: float = MARGIN) -> float | None:
    """The calibration rule: above every independent version's similarity by ``margin``; None (never flagged)
    where that passes ``CAP`` or nothing was measured."""
    if not values:
        return None
    value = round(max(values) + margin, 4)
    return None if value > CAP else value


def calibrate(versions: dict[str, set[int]], reference: set[int] | None, margin: float = MARGIN) -> dict:
    """The calibration of one graded function from its independent versions' fingerprints: the prints ``COMMON`` of
    them share (left out of every comparison of this function), the highest similarity of a version to the
    reference and of any two of them (the reference included), and the thresholds ``threshold_from`` makes."""
    counts = collections.Counter(h for prints in versions.values() for h in set(prints))
    common = {h for h, n in counts.items() if n >= COMMON}
    kept = [set(p) - common for p in versions.values()]
    kept = [p for p in kept if len(p) >= MIN_PRINTS]
    ref = set(reference or ()) - common
    to_reference = [similarity(p, ref) for p in kept] if len(ref) >= MIN_PRINTS else []
    pairs = [similarity(a, b) for a, b in itertools.combinations(kept + ([ref] if len(ref) >= MIN_PRINTS else []), 2)]
    return {
        "versions": len(kept),
        "reference_max": round(max(to_reference), 4) if to_reference else None,
        "reference_threshold": threshold_from(to_reference, margin),
        "pair_max": round(max(pairs), 4) if pairs else None,
        "pair_threshold": threshold_from(pairs, margin),
        "common": sorted(common),
    }


@functools.cache
def calibration(path: Path = CALIBRATION) -> dict:
    """{assignment: {grade_id: ``calibrate``'s result}} (empty when the file is missing or unreadable: nothing is
    flagged then)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("functions", {}) if isinstance(data, dict) else {}


@dataclass
class Match:
    """One comparison of a graded function: learner ``a`` against ``b`` (another learner or ``REFERENCE``)."""

    assignment: str
    gid: str
    a: str
    b: str
    share: float
    threshold: float | None
    shared: set[int] = field(default_factory=set)

    @property
    def flagged(self) -> bool:
        return self.threshold is not None and self.share >= self.threshold

    @property
    def excess(self) -> float:
        """How far above (or below) its threshold; functions that are never flagged rank by share below all."""
        return self.share - (self.threshold if self.threshold is not None else 2.0)


def _comparable(unit: Unit | None) -> bool:
    return unit is not None and len(unit.prints) >= MIN_PRINTS


def compare(
    assignment: str, units: dict[str, dict[str, Unit]], reference: dict[str, Unit], thresholds: dict | None = None
) -> list[Match]:
    """Every learner against the reference and every pair of learners, per graded function (comparable units only,
    share > 0); ``thresholds`` is the assignment's calibration (default: the stored one)."""
    thresholds = calibration().get(assignment, {}) if thresholds is None else thresholds
    out = []
    gids = sorted({gid for by_gid in units.values() for gid in by_gid} | set(reference))
    for gid in gids:
        limits = thresholds.get(gid, {})
        common = set(limits.get("common", []))
        mine = {learner: set(u[gid].prints) - common for learner, u in units.items() if gid in u}
        mine = {learner: prints for learner, prints in mine.items() if len(prints) >= MIN_PRINTS}
        ref = reference.get(gid)
        ref_prints = set(ref.prints) - common if ref is not None else set()
        if len(ref_prints) >= MIN_PRINTS:
            for learner, prints in mine.items():
                shared = prints & ref_prints
                if shared:
                    share = similarity(prints, ref_prints)
                    out.append(
                        Match(assignment, gid, learner, REFERENCE, share, limits.get("reference_threshold"), shared)
                    )
        for a, b in itertools.combinations(sorted(mine), 2):
            shared = mine[a] & mine[b]
            if shared:
                out.append(
                    Match(assignment, gid, a, b, similarity(mine[a], mine[b]), limits.get("pair_threshold"), shared)
                )
    return out


def copy_flags(matches: list[Match], limit: int = 5) -> dict[tuple[str, str], list[str]]:
    """{(learner, assignment): flags}: ``copies-reference:<share>%`` (the highest flagged share) and
    ``similar:<learner>:<share>%`` for the most similar flagged learners (then ``similar:+<more>``)."""
    reference: dict[tuple[str, str], float] = {}
    pairs: dict[tuple[str, str], dict[str, float]] = {}
    for m in matches:
        if not m.flagged:
            continue
        if m.b == REFERENCE:
            key = (m.a, m.assignment)
            reference[key] = max(reference.get(key, 0.0), m.share)
            continue
        for one, other in ((m.a, m.b), (m.b, m.a)):
            seen = pairs.setdefault((one, m.assignment), {})
            seen[other] = max(seen.get(other, 0.0), m.share)
    out: dict[tuple[str, str], list[str]] = {}
    for key, share in reference.items():
        out.setdefault(key, []).append(f"copies-reference:{round(100 * share)}%")
    for key, others in pairs.items():
        ranked = sorted(others.items(), key=lambda item: (-item[1], item[0]))
        flags = [f"similar:{other}:{round(100 * share)}%" for other, share in ranked[:limit]]
        if len(ranked) > limit:
            flags.append(f"similar:+{len(ranked) - limit}")
        out.setdefault(key, []).extend(flags)
    return out


# ------------------------------------------------------------------------------------------------ class inputs
def report_units(report: dict) -> dict[str, Unit]:
    """{grade_id: unit} stored in one learner's grading report for one assignment (all its notebooks)."""
    out = {}
    for nb in report.get("notebooks", []) or []:
        answers = nb.get("answers") if isinstance(nb, dict) else None
        for gid, value in (answers or {}).items() if isinstance(answers, dict) else []:
            unit = Unit.from_json(value)
            if unit is not None:
                out[gid] = unit
    return out


def _read(path: Path) -> nbformat.NotebookNode | None:
    if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_READ:
        return None
    nb, _ = read_notebook(path.read_text(encoding="utf-8"))
    return nb


def reference_units(course: Path, assignment: str, release_dirs: tuple[Path, ...] = ()) -> dict[str, Unit]:
    """{grade_id: the worked answer's unit} from nbgrader's source version of every notebook of the assignment
    (``<course>/source/<a>/*.ipynb``, built from ``solutions/``) against its released version (``<course>/release``,
    else ``release_dirs``); empty where either is missing."""
    out: dict[str, Unit] = {}
    source_dir = course / "source" / assignment
    if not source_dir.is_dir():
        return out
    for source_path in sorted(source_dir.glob("*.ipynb")):
        source = _read(source_path)
        release = None
        for folder in (course / "release" / assignment, *release_dirs):
            release = _read(folder / source_path.name)
            if release is not None:
                break
        if source is not None and release is not None:
            units, _ = notebook_units(source, release, released_prints(release))
            out.update(units)
    return out


@dataclass
class AssignmentReview:
    """The copy review of one assignment: what each learner and the reference wrote per graded function, the
    thresholds, and every comparison."""

    assignment: str
    units: dict[str, dict[str, Unit]]
    reference: dict[str, Unit]
    thresholds: dict
    matches: list[Match]


def review_class(course: Path, reports: dict[tuple[str, str], dict], release_root: Path | None = None) -> dict:
    """{assignment: AssignmentReview} from the grading reports {(learner, assignment): report} of a class, the
    course's source notebooks and the stored calibration (``release_root``: where the released notebooks are when
    ``<course>/release`` has none, e.g. the repository's ``notebooks/``)."""
    by_assignment: dict[str, dict[str, dict[str, Unit]]] = {}
    for (learner, assignment), report in sorted(reports.items()):
        units = report_units(report or {})
        if units:
            by_assignment.setdefault(assignment, {})[learner] = units
    out = {}
    for assignment, units in sorted(by_assignment.items()):
        extra = (release_root / assignment,) if release_root is not None else ()
        reference = reference_units(course, assignment, extra)
        thresholds = calibration().get(assignment, {})
        matches = compare(assignment, units, reference, thresholds)
        out[assignment] = AssignmentReview(assignment, units, reference, thresholds, matches)
    return out


def class_flags(reviews: dict[str, AssignmentReview]) -> dict[tuple[str, str], list[str]]:
    """{(learner, assignment): copy flags} of a class review."""
    out: dict[tuple[str, str], list[str]] = {}
    for review in reviews.values():
        out.update(copy_flags(review.matches))
    return out
