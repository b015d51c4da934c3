"""Full marks and a ``copies-reference`` flag (nb05): the answer cells left as released (the stubs), the course's
reference answers pasted into new cells below them, which redefine the functions before the tests run."""


def _answers():
    from autograde.sample_class.build import worked_answers

    return worked_answers("nb05_logprobs_masks")


_WORKED = _answers()
CASE = {
    "nb05_logprobs_masks": {
        "base": "release",
        "insert_after": [("completion_mask_from_eos", _WORKED["completion_mask_from_eos"]),
                         ("shifted_token_logps", _WORKED["shifted_token_logps"])],
    },
}
