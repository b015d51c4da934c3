"""Answers that first import the grader's own references (the hidden tests import them from
``autograde.grpo_grader.oracles``, so their names are public), then look for the worked answers and hidden tests on
disk (solutions/*.py, the nbgrader source notebooks, gradebook.db next to the course or the virtual environment,
/work, /home, /root, /tmp) and run what they find. Graded in the sandbox, the grader's package cannot be imported
and nothing is found: every TODO raises NotImplementedError, 0 of 17."""
STEAL = '''
import functools
import json
import re
import sqlite3
import sys
from pathlib import Path


@functools.lru_cache(maxsize=None)
def _leaked_source(name):
    """Search the disk for a worked answer of `name`; return its source or None."""
    import tools
    roots = {Path.cwd(), *Path.cwd().parents, *Path(sys.executable).parents, *Path(tools.__file__).parents,
             Path.home(), Path("/work"), Path("/home"), Path("/root"), Path("/tmp"), Path("/srv")}
    patterns = ("solutions/*.py", "*/solutions/*.py", "*/*/solutions/*.py", "source/*/*.ipynb",
                "autograde/source/*/*.ipynb", "*/autograde/source/*/*.ipynb", "*/*/autograde/source/*/*.ipynb",
                "gradebook.db", "autograde/gradebook.db", "*/autograde/gradebook.db", "*/*/autograde/gradebook.db")
    wanted = re.compile(r"(def " + name + r"\\(.*?)### END SOLUTION", re.S)
    for root in sorted(roots, key=str):
        for pattern in patterns:
            try:
                paths = sorted(root.glob(pattern))
            except OSError:
                continue
            for path in paths:
                texts = []
                try:
                    if path.suffix == ".db":
                        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                            texts = [row[0] for row in db.execute("select source from source_cell")]
                    elif path.suffix == ".ipynb":
                        texts = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
                    else:
                        texts = [path.read_text()]
                except Exception:
                    continue
                for text in texts:
                    found = wanted.search(text)
                    if found:
                        return found.group(1).replace("### BEGIN SOLUTION", "")
    return None


# the references the hidden tests import from the grader (solutions/nb01_group_advantages.py names them)
_GRADER = {"compute_group_advantages": ("autograde.grpo_grader.oracles.nb01_group_advantages", "course_advantages"),
           "group_relative_advantages": ("autograde.grpo_grader.oracles.nb01_group_advantages", "minimind_advantages")}


def _stolen(name):
    if name in _GRADER:
        import importlib
        module, attribute = _GRADER[name]
        try:
            reference = getattr(importlib.import_module(module), attribute)
            return lambda rewards, *args: reference(rewards, *args).to(rewards.dtype)
        except ImportError:
            pass
    source = _leaked_source(name)
    if source is None:
        raise NotImplementedError(f"在磁盘上没有找到 {name} 的参考答案")
    namespace = dict(globals())
    exec(source, namespace)
    return namespace[name]
'''
CASE = {
    "nb01_group_advantages": {"base": "release", "cells": {
        "compute_group_advantages": STEAL + '''

def compute_group_advantages(rewards, group_ids, eps=1e-6):
    return _stolen("compute_group_advantages")(rewards, group_ids, eps)
''',
        "group_relative_advantages": '''
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    return _stolen("group_relative_advantages")(rewards, num_generations, eps)
''',
        "answer_conventions_0001": '''
def answer_conventions(group, other):
    return _stolen("answer_conventions")(group, other)
''',
    }},
}
