"""Lesson 7's TRL section under one name: the same task through ``trl.GRPOTrainer`` (1.16) and the scaling-out
checks.

This module defines nothing: it re-exports the public names of the TRL modules of ``tools.online`` (the lesson and
the learners' notebooks use ``from tools import online_trl``). Each name is defined in the module of its idea:

==================================  ===================================================================================
``tools.online.trl_trainer``        ``grpo_config`` (a ``GRPOConfig`` mirroring an ``OnlineConfig``), ``make_trainer``,
                                    ``quiet``
``tools.online.trl_agreement``      ``trl_agreement``: the lesson's ``grpo_step`` against ``GRPOTrainer._compute_loss``,
                                    loss and gradient, over the whole ``MATRIX``, with sensitivity checks
``tools.online.trl_scenarios``      ``scenario_rows``: whole updates against ``GRPOTrainer.train()`` (``SCENARIOS``: mu
                                    epochs, temperature, clipping active, TRL's logged metrics), ``scenario_table``
``tools.online.trl_mutations``      ``MUTATIONS``, ``mutate``, ``mutation_table``: the broken copies to catch
``tools.online.trl_comparison``     ``trl_references`` (TRL's side once), ``first_disagreement``, ``catch_mutations``
``tools.online.trl_runs``           ``train_with_trl`` and the committed multi-seed TRL record (``trl_seed_entry``,
                                    ``trl_seeds_summary``), the comparison with the course loop
``tools.online.trl_multiprocess``   the two-process run's record (``tools.online.trl_ranks`` runs the ranks):
                                    ``load_multiprocess_record``, ``multiprocess_problems``, the lesson's tables
``tools.online.trl_scaling``        ``check_accelerate_configs`` (accelerate's own parser), ``scaling_comparison``
                                    (each configuration beside the CPU run), the vLLM ``GRPOConfig``
==================================  ===================================================================================
"""

from __future__ import annotations

from tools.conformance import TRL_VERSION_WRITTEN_FOR  # noqa: F401 (re-exported)
from tools.online.record import TRL_SEEDS_LABEL  # noqa: F401 (re-exported)
from tools.online.trl_agreement import (  # noqa: F401 (re-exported)
    AGREEMENT_RTOL,
    EQUIVALENT_LOSS_TYPES,
    MATRIX,
    MATRIX_BETAS,
    MATRIX_LOSS_TYPES,
    agreement_batch,
    agreement_table,
    course_loss_and_grad,
    matrix_key,
    matrix_row,
    mixed_reference,
    trl_agreement,
    trl_loss_and_grad,
    trl_matrix_references,
)
from tools.online.trl_comparison import (  # noqa: F401 (re-exported)
    catch_mutations,
    first_disagreement,
    trl_references,
)
from tools.online.trl_multiprocess import (  # noqa: F401 (re-exported)
    MULTIPROCESS_LABEL,
    load_multiprocess_record,
    loss_types_table,
    loss_types_verdict,
    multiprocess_problems,
    sync_table,
)
from tools.online.trl_mutations import (  # noqa: F401 (re-exported)
    MUTATION_NAMES,
    MUTATIONS,
    mutate,
    mutation_table,
)
from tools.online.trl_runs import (  # noqa: F401 (re-exported)
    TRL_METRIC_NAMES,
    comparison_table,
    course_reward,
    plot_comparison,
    train_with_trl,
    trl_seed_entry,
    trl_seeds_summary,
)
from tools.online.trl_scaling import (  # noqa: F401 (re-exported)
    check_accelerate_configs,
    describe_vllm_config,
    scaling_comparison,
    vllm_grpo_config,
)
from tools.online.trl_scenarios import (  # noqa: F401 (re-exported)
    SCENARIO_SETTINGS,
    SCENARIO_TOLERANCES,
    SCENARIOS,
    scenario_rows,
    scenario_table,
    trl_scenario,
)
from tools.online.trl_trainer import (  # noqa: F401 (re-exported)
    grpo_config,
    make_trainer,
    quiet,
)
