"""First-use costs that every ``nbgrader autograde`` child would pay again, paid once in nbgrader's forkserver.

Imported by the forkserver only (``nbgrader_forkserver.WARM_UP``, after every other preload): its children are forked from it and inherit what this
builds. Nothing here changes what nbgrader computes; it builds, ahead of time, objects nbgrader builds lazily and
caches for the life of a process:

- nbformat's two compiled v4 validators (fastjsonschema compiles each in ~0.06 s): every child reads
  and writes notebooks at the current minor version, strict and with ``relax_add_props``;
- SQLAlchemy's mapper configuration of nbgrader's gradebook models (~0.05 s at a child's first query);
- a warnings filter for runpy's "found in sys.modules" RuntimeWarning about the parent's main module: every child
  re-runs it (multiprocessing's spawn preparation) after the forkserver imported it (``nbgrader_forkserver``'s
  preload), which is intended, and otherwise each graded notebook printed that warning into the instructor's
  output;
- then ``gc.freeze`` (``sandbox.freeze_for_forks``): a child's garbage collections skip what was preloaded (nbgrader,
  nbconvert, SQLAlchemy), which they would otherwise walk, page by copied page.
"""

from __future__ import annotations

import warnings

import nbformat
import nbformat.validator
import nbgrader.api  # noqa: F401  (the gradebook models whose mappers are configured below)
from sqlalchemy.orm import configure_mappers

from .sandbox import freeze_for_forks


def warm_up() -> None:
    warnings.filterwarnings(
        "ignore", message=r"'autograde\.[\w.]+' found in sys\.modules after import of package", category=RuntimeWarning
    )
    for relax in (False, True):
        nbformat.validator.get_validator(version=4, version_minor=nbformat.v4.nbformat_minor, relax_add_props=relax)
    configure_mappers()
    freeze_for_forks()  # last: what the preloads built is out of the children's collections


warm_up()
