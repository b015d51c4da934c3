"""Full marks and a ``copies-reference`` flag (nb02): the course's reference answers pasted into a cell the learner
added above the first answer, under other names (``_kl_impl``, ``_loss_impl``); the answer cells only call them.
The answer cells alone hold almost nothing: the copy is found because a graded function's unit follows the names
it calls into the learner's other cells."""


def _cells():
    from autograde.sample_class.build import worked_answers

    answers = worked_answers("nb02_grpo_objective")
    pasted = (answers["token_kl_penalty"].replace("def token_kl_penalty(", "def _kl_impl(")
              + "\n\n" + answers["compute_grpo_loss"].replace("def compute_grpo_loss(", "def _loss_impl("))
    return pasted


CASE = {
    "nb02_grpo_objective": {
        "base": "release",
        "cells": {
            "token_kl_penalty": "def token_kl_penalty(policy_logps, ref_logps):\n"
                                "    return _kl_impl(policy_logps, ref_logps)\n",
            "compute_grpo_loss": "def compute_grpo_loss(log_probs_new, log_probs_old, rewards, group_ids,\n"
                                 "                      response_mask=None, clip_range=0.2, eps=1e-6,\n"
                                 "                      log_probs_ref=None, beta=0.0):\n"
                                 "    return _loss_impl(log_probs_new, log_probs_old, rewards, group_ids,\n"
                                 "                      response_mask, clip_range, eps, log_probs_ref, beta)\n",
        },
        "insert_before": [("token_kl_penalty", _cells())],
    },
}
