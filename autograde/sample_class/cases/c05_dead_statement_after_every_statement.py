"""Full marks and a ``copies-reference`` flag (nb01): the course's reference answers with a statement that does
nothing after every statement - an assignment to a name never read, ``pass``, a bare expression, a string, an
``if False:`` block, a pure call, and unreachable code after each ``return``/``raise`` - which together add more
k-grams than the reference has. The fingerprint is taken after dead statements are removed."""
import ast

_DEAD = [
    "_unused_{i} = {i}",
    "pass",
    "None",
    "'step {i}'",
    "if False:\n    _never_{i} = {i}",
    "len('{i}')",
    "{i} + {i}",
]


def _with_dead_statements(source):
    tree = ast.parse(source)
    count = [0]

    def dead():
        count[0] += 1
        return ast.parse(_DEAD[count[0] % len(_DEAD)].format(i=count[0])).body

    def interleave(body):
        out = []
        for statement in body:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(statement, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    setattr(statement, field, interleave(block))
            out.append(statement)
            out.extend(dead())
        return out

    tree.body = interleave(tree.body)
    return ast.unparse(tree) + "\n"


def _cells():
    from autograde.sample_class.build import worked_answers

    answers = worked_answers("nb01_group_advantages")
    return {gid: _with_dead_statements(answers[gid])
            for gid in ("compute_group_advantages", "group_relative_advantages", "answer_conventions_0001")}


CASE = {"nb01_group_advantages": {"base": "release", "cells": _cells()}}
