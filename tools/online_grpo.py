"""The online GRPO lesson's runtime (notebook nb07_online_grpo, ``make online``), under one name.

This module defines nothing: it re-exports the public names of the package ``tools.online``, so that the lesson
(``from tools import online_grpo as og``), ``make online``, the grader and the tests keep one short spelling. Each
name is defined in the module of its idea; read that module, and change it there:

=================================  ====================================================================================
``tools.online.task``              the task (the sum of four digits, ``"6+7+9+4="``), its three disjoint pools of
                                   problems and the held-out rule, the held-out groups, the transfer sets, the
                                   scratchpad, prompt encoding; the rewards
``tools.online.logprobs``          ``completion_logps``: per-token log-probs (and entropies) at a temperature, as TRL;
                                   ``grad_forward_gap`` / ``mu1_bounds``: what mu = 1 allows when two forwards differ
``tools.online.record``            record paths and the course root, hardware / framework snapshot, the validated read
                                   and write of a run's record and of a multi-seed summary, the ablation labels
``tools.online.warm_start``        the SFT warm start (built once, cached under ``.cache/``), its float platform,
                                   ``load_policy``, ``content_hash``
``tools.online.evaluation``        held-out pass@1 / pass@k / maj@k (also per prompt), outcomes, completion kinds,
                                   the evaluation seed of a run, entropy by kind
``tools.online.config``            ``OnlineConfig`` and ``check_config``, the RUN_MODE presets (real_gpu's per card and
                                   its memory estimate), the optimizer
``tools.online.run``               ``run_online_experiment`` (evaluate -> train -> evaluate -> record), the held-out
                                   curve, ``preset_check``
``tools.online.seeds``             several seeds: ``bootstrap_ci95`` (held-out figures: seeds and prompts),
                                   ``mean_ci95`` (training figures: t over seeds), ``seeds_summary``
``tools.online.report``            the one verdict rule (``interval_verdict``), the goal, the seeds table, what
                                   the model learned, the ablations' verdicts, tables
``tools.online.figures``           the lesson's figures (PNG bytes), the PNGs ``make online`` saves
``tools.online.grading_policy``    the in-memory policy the grader's oracle uses (``grading_policy``)
=================================  ====================================================================================

The run-label rule is every record's (``tools.project_runtime.check_run_label``), re-exported here too. The TRL
section of the lesson has its own name, ``tools.online_trl``. The graded pieces (``sample_group``, ``grpo_step``,
``log_step_metrics``) and the training loop that uses them live in the lesson and are saved (``#@save``) into
``tools/lessons/nb07_online_grpo.py``; this runtime never imports them: the caller passes them in.
"""

from __future__ import annotations

from tools.online.config import (  # noqa: F401 (re-exported)
    LORA_TARGET_MODULES,
    REAL_GPU_MODEL_ID,
    RUN_PRESETS,
    OnlineConfig,
    check_config,
    check_run_mode,
    load_preset_policy,
    make_optimizer,
    model_id_override,
    native_bf16,
    preset,
    preset_config,
    preset_dtype,
    preset_lora_config,
    preset_memory_estimate,
    run_parameters,
)
from tools.online.evaluation import (  # noqa: F401 (re-exported)
    COMPLETION_KINDS,
    EVALUATION_SEED_BASE,
    MAJ_RULE,
    NO_ANSWER,
    OUTCOMES,
    completion_kind,
    entropy_by_kind,
    evaluate,
    evaluation_seed,
    majority_correct,
    majority_vote,
    pass_at_k,
)
from tools.online.figures import (  # noqa: F401 (re-exported)
    STEP_PANELS,
    figure_paths,
    plot_ablation_intervals,
    plot_ablations,
    plot_gain_intervals,
    plot_heldout_curve,
    plot_learned,
    plot_pass_maj,
    plot_steps,
    save_figures,
)
from tools.online.grading_policy import GRADING_SFT_STEPS, grading_policy  # noqa: F401 (re-exported)
from tools.online.logprobs import (  # noqa: F401 (re-exported)
    MU1_APPROX_KL_ATOL,
    MU1_LOSS_ATOL,
    completion_logps,
    grad_forward_gap,
    mu1_bounds,
)
from tools.online.record import (  # noqa: F401 (re-exported)
    ABLATIONS,
    REFERENCE_LABELS,
    RESULTS_DIR,
    RESULTS_KIND,
    SCHEMA_VERSION,
    SEEDS_REFERENCE_LABEL,
    SEEDS_SCHEMA_VERSION,
    SEEDS_WORKLOAD_ID,
    WORKLOAD_ID,
    framework_versions,
    hardware_snapshot,
    load_average,
    load_records,
    load_seed_records,
    load_seeds_summary,
    output_relative_path,
    read_validated,
    resolve_root,
    seeds_summary_path,
    utc_now,
    validate_record,
    validate_seeds_summary,
    write_record,
    write_seeds_summary,
)
from tools.online.report import (  # noqa: F401 (re-exported)
    ABLATION_COMPARISONS,
    ABLATION_SEED_METRICS,
    CHANGE_WORDS,
    GOAL_CI_LOW,
    GOAL_MEAN_GAIN,
    GROUP_NAMES,
    HELDOUT_GAIN,
    INTERVAL_METHOD_WORDS,
    START_RANGE,
    VERDICT_RULE,
    VERDICT_WORDS,
    ablation_seeds_table,
    ablation_table,
    ablation_verdicts,
    goal_met,
    headline,
    interval_verdict,
    learned_table,
    paired_seeds_table,
    seeds_table,
    sharpens_verdict,
    shown_work_verdict,
    tail_interval,
    verdicts_table,
)
from tools.online.run import (  # noqa: F401 (re-exported)
    curve_point,
    preset_check,
    print_progress,
    run_online_experiment,
    transfer_max_new_tokens,
)
from tools.online.seeds import (  # noqa: F401 (re-exported)
    BOOTSTRAP_REPLICATES,
    BOOTSTRAP_SEED,
    HELDOUT_INTERVAL_METHOD,
    bootstrap_ci95,
    heldout_statistics,
    mean_ci95,
    seeds_summary,
    t_quantile_975,
)
from tools.online.task import (  # noqa: F401 (re-exported)
    ADDENDS,
    HELDOUT_GROUP_RULES,
    HELDOUT_SIZE,
    REWARDS,
    RL_MULTISETS,
    SPLIT_SEED,
    TASK_ID,
    TRANSFER_ADDENDS,
    addends_of,
    carries,
    chat_prompt,
    check_heldout_rule,
    encode_prompts,
    equivalent_key,
    heldout_groups,
    heldout_subsets,
    loophole_rewards,
    problem,
    reward_function,
    scratchpad,
    split_problems,
    strict_correct,
    strict_rewards,
    task_pools,
    training_neighbours,
    transfer_problems,
    two_operand_facts,
    zero_heavy,
)
from tools.online.warm_start import (  # noqa: F401 (re-exported)
    SFT_BATCH,
    SFT_BUILDER_VERSION,
    SFT_FACT_COPIES,
    SFT_LEARNING_RATE,
    SFT_LIST_FRACTION,
    SFT_MARKER,
    SFT_SCRATCH_FRACTION,
    SFT_STEPS,
    SFT_THREADS,
    UNRECORDED_WARM_START_PLATFORM,
    WARM_STARTS,
    build_sft_checkpoint,
    build_warm_starts,
    check_warm_start,
    content_hash,
    float_platform,
    load_policy,
    same_float_platform,
    sft_checkpoint_path,
    sft_examples,
    warm_start_built_on,
    warm_start_platform_of,
)
from tools.project_runtime import check_run_label  # noqa: F401 (re-exported)
