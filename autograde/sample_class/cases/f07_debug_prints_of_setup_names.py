"""Worked answers in every lesson, each with one honest debug line at the top of an answer cell that reads a name a
released setup cell defines (one execution per notebook: every name the learner's own run has is there when the
grader's cases run): lesson 7's ``tokenizer.eos_token_id`` (the warm-start cell), lesson 3A's ``trace`` (the trace
lab), lesson 4's ``code_records`` (the code-verifier demo), lesson 5's ``tokenizer``, lesson 3B's
``EXTENDED_LOSS_TYPES``, lesson 2's ``bc_new``, lesson 1's ``flat_ids``. Full marks in every lesson, no flag but the
copy flags."""
LINES = {
    "nb01_group_advantages": ("group_relative_advantages", "print('debug:', flat_ids.shape)\n"),
    "nb02_grpo_objective": ("compute_grpo_loss", "print('debug:', bc_new.shape)\n"),
    "nb03a_cispo_trace_lab": ("q2_answer", "print('debug:', type(trace).__name__)\n"),
    "nb03b_loss_family_trl": ("q9_answer", "print('debug:', EXTENDED_LOSS_TYPES)\n"),
    "nb04_verifiable_rewards": ("combine_rewards", "print('debug:', sorted(code_records))\n"),
    "nb05_logprobs_masks": ("shifted_token_logps", "print('debug:', tokenizer.eos_token_id)\n"),
    "nb07_online_grpo": ("sample_group", "print('debug:', tokenizer.eos_token_id)\n"),
}
CASE = {lesson: {"base": "solution", "prepend": {gid: line}} for lesson, (gid, line) in LINES.items()}
