"""The TRL ``loss_type`` values the course teaches: the one home of these names (no imports, so the command line
can validate ``--loss-type`` before torch is loaded).

``LOSS_TYPES``: every loss type lesson 3B's graded functions cover. ``CLIPPED_LOSS_TYPES``: the four that share the
PPO-style clipped-ratio token loss and differ only in how the token losses are reduced; lesson 7's ``grpo_step``,
``make online --loss-type`` and the TRL agreement matrix use these (CISPO clips the importance weight instead).
"""

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo")
CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")  # written out (not sliced) so that a copy elsewhere is found
assert set(CLIPPED_LOSS_TYPES) < set(LOSS_TYPES)
