"""The commit-msg check of the pre-commit config: a commit subject says what changed in at most 72 characters.

``pre-commit install`` (which installs the ``commit-msg`` hook type too: ``default_install_hook_types`` in
``.pre-commit-config.yaml``) runs ``python -m tools.cli.commit_msg <message file>`` on every commit. The why and the
figures go in the body, after one blank line.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with a commit message (git's comment lines and the scissors part left out); [] when fine."""
    lines = []
    for line in message.splitlines():
        if line.startswith("# ------------------------ >8 ------------------------"):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        return ["the commit message is empty"]
    found = []
    subject = lines[0]
    if len(subject) > MAX_SUBJECT:
        found.append(f"the subject has {len(subject)} characters (at most {MAX_SUBJECT}): {subject!r}")
    if len(lines) > 1 and lines[1]:
        found.append("the subject must be followed by a blank line before the body")
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.cli.commit_msg <commit message file>", file=sys.stderr)
        return 2
    found = problems(Path(args[0]).read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"commit-msg: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
