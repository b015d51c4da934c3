"""Conformance of the course's GRPO losses and advantages with TRL's real ``GRPOTrainer`` code paths.

Lesson 3B (``nb03b_loss_family_trl``) hands its learner's own functions to :func:`check_trl_conformance`; the check
runs TRL's private methods next to them on controlled inputs and returns a JSON-ready dict:

- ``GRPOTrainer._calculate_rewards``: two reward functions, ``None`` -> NaN, a dataset column passed through;
- ``GRPOTrainer._compute_loss``: every ``loss_type`` the course teaches (grpo, bnpo, dr_grpo, dapo, cispo, GSPO's
  sequence level, and the provided sapo / luspo / vespo, ``delta``, ``use_bias_correction_kl=True`` and the
  gradient-accumulation division), value and gradient with respect to the per-token log-probs;
- the advantage block of ``GRPOTrainer._generate_and_score_completions`` (``scale_rewards`` group / batch / none,
  ``multi_objective_aggregation="normalize_then_sum"``), executed from TRL's installed source.

No model, no generation, no full ``Trainer``: a stand-in object provides exactly the attributes those methods read,
and records every read (reported as ``trl_reads``). ``status`` is ``passed`` / ``failed`` (with ``failed``: the cases
that differ), ``skipped`` (no TRL installed; the lesson then needs the PT-CPU profile) or ``api_changed`` (TRL's
private API moved: ``attribute`` names what). Written for ``trl==1.16.0``; another version runs and is noted.

This module is the check's public face (the lesson imports it); the code lives in ``tools.conformance``: ``check``
(the entry point and the schema), ``losses`` / ``rewards`` / ``advantages`` (one check each), ``loss_calls`` (one
loss case on both sides), ``stand_ins`` (what TRL's methods read), ``cases``, ``summary``.
"""

from __future__ import annotations

from tools.conformance.advantages import ADVANTAGE_BLOCK_END, ADVANTAGE_BLOCK_START
from tools.conformance.cases import ADVANTAGE_CASES, EXTENDED_CASES, LOSS_CASES
from tools.conformance.check import SCHEMA_PATH, TRL_VERSION_WRITTEN_FOR, check_trl_conformance, validate_result
from tools.conformance.stand_ins import TrlApiChanged
from tools.conformance.summary import print_conformance_summary

__all__ = [
    "ADVANTAGE_BLOCK_END",
    "ADVANTAGE_BLOCK_START",
    "ADVANTAGE_CASES",
    "EXTENDED_CASES",
    "LOSS_CASES",
    "SCHEMA_PATH",
    "TRL_VERSION_WRITTEN_FOR",
    "TrlApiChanged",
    "check_trl_conformance",
    "print_conformance_summary",
    "validate_result",
]
