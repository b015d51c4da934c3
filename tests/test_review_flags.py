"""Review flags: what a human may want to look at in a submission, never a score change. They read only the lines
the learner wrote (not the release's), and ``monkeypatch`` reads the syntax tree of those lines: an attribute of an
imported module or class written by any spelling."""

from __future__ import annotations

import pytest


def test_review_flags_read_only_the_lines_the_learner_wrote():
    """``import numpy as np`` added to nb04's imports cell (which imports ``subprocess`` and ``sys`` as released)
    raises no flag; a line the learner adds that calls ``subprocess`` does."""
    import nbformat

    from autograde.grpo_grader.course import ROOT
    from autograde.grpo_grader.review import compare_with_release, scan_flags

    lesson = "nb04_verifiable_rewards"
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)
    imports = next(c for c in sub.cells if c.cell_type == "code" and "import subprocess" in c.source)
    assert "import subprocess" in imports.source and not imports.metadata.get("nbgrader")
    imports.source = imports.source.replace("import math\n", "import math\nimport numpy as np\n", 1)
    assert scan_flags(compare_with_release(sub, release)[2]) == []
    imports.source += "\nsubprocess.run(['ls', '/'])\n"
    assert scan_flags(compare_with_release(sub, release)[2]) == ["processes"]


PATCH_SPELLINGS = {  # an added cell of the learner: each writes an attribute of an imported module or class
    "attribute": "torch.equal = lambda *a, **k: True",
    "alias": "import torch as _t\n_t.equal = lambda *a, **k: True",
    "alias of an alias": "import torch as _t\n_u = _t\n_u.equal = None",
    "setattr": "setattr(torch, 'equal', lambda *a, **k: True)",
    "getattr chain": "setattr(getattr(torch, 'Tensor'), 'tolist', lambda self: [])",
    "vars": "vars(torch)['equal'] = lambda *a, **k: True",
    "__dict__": "torch.__dict__['equal'] = None",
    "__dict__ update": "torch.__dict__.update(equal=None)",
    "builtins": "import builtins\nbuiltins.isinstance = lambda *a: True",
    "__builtins__ item": "__builtins__['isinstance'] = None",
    "class attribute": "torch.Tensor.tolist = lambda self: []",
    "imported class": "from torch import Tensor\nTensor.dtype = property(lambda self: torch.float64)",
    "type of a library object": "type(torch.zeros(1)).tolist = lambda self: []",
    "sys.modules": "import sys\nsys.modules['torch'].equal = None",
    "__import__": "__import__('json').dumps = str",
    "inside a function": "def f():\n    torch.isnan = None\nf()",
    "tuple target": "torch.equal, x = None, 1",
    "augmented": "import math\nmath.pi += 1",
    "delete": "del torch.equal",
}
HONEST = {  # no module attribute written: instances, the learner's own objects, library settings by item
    "instance": "x = torch.zeros(3)\nx.data = torch.ones(3)",
    "own class": "class A:\n    pass\nA.f = 1",
    "rcParams item": "import matplotlib.pyplot as plt\nplt.rcParams['font.size'] = 9",
    "own dict": "d = {}\nd['equal'] = 1\nvars()['y'] = 2",
    "comparison": "ok = torch.equal(torch.zeros(1), torch.zeros(1)) == True",
}


def _with_added_cell(source: str):
    import nbformat

    from autograde.grpo_grader.course import ROOT

    lesson = "nb01_group_advantages"
    release = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    sub = nbformat.reads(nbformat.writes(release), as_version=4)
    sub.cells.append(nbformat.v4.new_code_cell(source))
    return sub, release


@pytest.mark.parametrize("spelling", sorted(PATCH_SPELLINGS))
def test_monkeypatch_flag_sees_every_spelling(spelling):
    """``monkeypatch`` is raised by the syntax tree of what the learner wrote, not a pattern of it: each spelling of
    a write into an imported module or class (an alias, ``setattr``, ``vars(m)[...]``, ``m.__dict__``,
    ``builtins``, ``sys.modules[...]``...) is found, where the patterns alone miss most of them."""
    from autograde.grpo_grader.review import compare_with_release, module_patches, scan_flags

    sub, release = _with_added_cell(PATCH_SPELLINGS[spelling])
    patches = module_patches(sub, release)
    assert patches, spelling
    assert "monkeypatch" in scan_flags(compare_with_release(sub, release)[2], patches)


def test_monkeypatch_flag_spares_honest_code_and_the_release():
    """Attributes of instances and of the learner's own objects, library settings set by item, and every line of
    the release (whatever it assigns) raise nothing; the patterns alone miss most spellings above (why the tree)."""
    from autograde.grpo_grader.review import module_patches, scan_flags

    for name, source in HONEST.items():
        sub, release = _with_added_cell(source)
        assert module_patches(sub, release) == [], name
    sub, release = _with_added_cell("")
    assert module_patches(release, release) == []
    missed = [s for s, code in PATCH_SPELLINGS.items() if "monkeypatch" not in scan_flags(code)]
    assert len(missed) >= len(PATCH_SPELLINGS) // 2, missed
