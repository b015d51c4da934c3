"""Full marks, ``encoded-exec`` and a ``copies-reference`` flag (nb04): every answer cell is
``exec(zlib.decompress(base64.b64decode(...)))`` of the course's reference answer. The grader decodes the string
(never runs it) and fingerprints what it decodes to; the exec of a decoded string is a review flag of its own."""
import base64
import zlib


def _encoded(source):
    blob = base64.b64encode(zlib.compress(source.encode("utf-8"))).decode()
    return f'import base64, zlib\n\nexec(zlib.decompress(base64.b64decode("{blob}")).decode("utf-8"))\n'


def _cells():
    from autograde.sample_class.build import worked_answers

    answers = worked_answers("nb04_verifiable_rewards")
    return {gid: _encoded(answers[gid])
            for gid in ("verify_integer_response", "rewards_per_func_from_lists", "combine_rewards")}


CASE = {"nb04_verifiable_rewards": {"base": "release", "cells": _cells()}}
