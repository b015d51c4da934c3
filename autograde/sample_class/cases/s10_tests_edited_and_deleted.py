"""Visible test cells edited to `pass` and the hidden test cell deleted (nb02), with a wrong
compute_grpo_loss (token mean instead of per-candidate mean). nbgrader restores the edited cells by checksum
and the deleted one from the gradebook (for the feedback), and the oracle grades every test cell anyway
(editing or deleting a test changes nothing): token_kl_penalty 2 + 2; every compute_grpo_loss test draws
ragged masks, where the token mean is wrong: 4 of 16."""
CASE = {
    "nb02_grpo_objective": {
        "base": "solution",
        "cells": {
            "test_token_kl_penalty_visible": "pass",
            "test_grpo_advantages_and_value_visible": "pass",
            "test_grpo_clip_kl_gradient_visible": "pass",
            "test_grpo_weighting_contract_visible": "pass",
        },
        "edit": {"compute_grpo_loss": [
            ("    per_candidate = per_token_loss.sum(dim=-1) / lengths.to(per_token_loss.dtype)  # [N] mean over valid tokens\n"
             "    return per_candidate.mean(), advantages",
             "    return per_token_loss.sum() / lengths.sum(), advantages"),
        ]},
        "delete": ["test_compute_grpo_loss_hidden"],
    },
}
