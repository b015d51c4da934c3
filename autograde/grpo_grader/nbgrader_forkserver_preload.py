"""First-use costs that every ``nbgrader autograde`` child would pay again, paid once in nbgrader's forkserver.

Imported by the forkserver only (``nbgrader_forkserver.PRELOAD``, last): its children are forked from it and inherit what this
builds. Nothing here changes what nbgrader computes; it builds, ahead of time, objects nbgrader builds lazily and
caches for the life of a process:

- nbformat's two compiled v4 validators (fastjsonschema compiles each in ~0.06 s): every child reads
  and writes notebooks at the current minor version, strict and with ``relax_add_props``;
- SQLAlchemy's mapper configuration of nbgrader's gradebook models (~0.05 s at a child's first query).
"""

from __future__ import annotations

import nbformat
import nbformat.validator
import nbgrader.api  # noqa: F401  (the gradebook models whose mappers are configured below)
from sqlalchemy.orm import configure_mappers


def warm_up() -> None:
    for relax in (False, True):
        nbformat.validator.get_validator(version=4, version_minor=nbformat.v4.nbformat_minor, relax_add_props=relax)
    configure_mappers()


warm_up()
