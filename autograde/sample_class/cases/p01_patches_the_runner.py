"""s04's lesson 1 bug (``compute_group_advantages`` shifts ``rewards`` in place: the result is right, the caller's
tensor is not) and, in a cell of its own below the answer, what would have hidden it from a runner that looks its
functions up when it runs: ``torch.equal`` always True through an alias and through ``setattr``, ``Tensor.tolist``
answering the value a tensor had before the call, and a ``json.dumps`` that drops what a call left in its inputs.
The case runner captured its functions before the first cell, sends the inputs as data, and the grader compares them
with its own copy: the hidden test still loses its 5 points (12 of 17, as ``s04``); ``monkeypatch`` is raised by the
syntax tree (the alias and ``setattr`` spellings included)."""
PATCHES = '''# 让评测看不到原地修改（学员自己加的单元）
import json as _json
import torch as _t

_t.equal = lambda *args, **kwargs: True
setattr(_t, "equal", lambda *args, **kwargs: True)
_real_tolist = _t.Tensor.tolist
_BEFORE = {}
_t.Tensor.tolist = lambda self: _BEFORE.pop(id(self), None) or _real_tolist(self)
_real_dumps = _json.dumps


def _dumps(obj, *args, **kwargs):
    if isinstance(obj, dict):
        obj.pop("inputs", None)
        obj.pop("mutated", None)
    return _real_dumps(obj, *args, **kwargs)


_json.dumps = _dumps
_compute = compute_group_advantages


def compute_group_advantages(rewards, group_ids, eps=1e-6):
    _BEFORE[id(rewards)] = _real_tolist(rewards)
    return _compute(rewards, group_ids, eps=eps)
'''
CASE = {
    "nb01_group_advantages": {
        "base": "solution",
        "edit": {"compute_group_advantages": [
            ("shifted = rewards - pivot[inverse]", "shifted = rewards.sub_(pivot[inverse])"),
        ]},
        "insert_after": [("compute_group_advantages", PATCHES)],
    },
}
