"""The course's Python code: what the notebooks import, the build chain and the command-line entry points.

Runtime the notebooks import (``notebook_runtime``, ``post_training_runtime``, ``training_mechanism_runtime``
and ``project_runtime`` keep the names of the reference document: they are the public contract).

Imports go one way (``tests/test_tools_layout.py`` checks them): the generated ``tools.lessons`` may import the
runtime; the runtime never imports ``tools.lessons`` (a lesson's function reaches it as an argument, e.g.
``run_online_experiment(train_fn, ..., verify=...)``); the command-line entry points ``tools.cli`` (and
``benchmarks/``) import both and hand the lessons' functions to the runtime; the grader ``autograde/`` does not
import the build chain ``tools.chain``.

======================================  =============================================================================
module                                  what it holds
======================================  =============================================================================
``tools.project_runtime``               ``resolve_project_root``: the course root (the folder holding ``course.toml``),
                                        and ``course_settings`` / ``course_id``: the ``[course]`` table of that file;
                                        where records go, and the run-label rule of every record (``check_run_label``)
``tools.notebook_runtime``              evidence helpers: atomic JSON (``save_json``), stable hashes, versions,
                                        model commits, failure records
``tools.post_training_runtime``         response batches (chat template, masks) and response log-probs of a causal LM
``tools.training_mechanism_runtime``    hardware snapshot, gradient norms, timing summaries, memory
``tools.grading``                       comparison helpers of the visible and hidden tests, immune to rebinding
``tools.bootstrap``                     what the locked first cell of every notebook runs (find or clone the course,
                                        install the profile, preflight)
``tools.preflight``                     the environment check of a profile (``python -m tools.preflight``)
``tools.tiny_model``                    the course's own tiny Qwen2-architecture checkpoint (no downloads)
``tools.grpo_experiment``               the pieces of the final experiment (nb06): the names the notebook, the
                                        entry points and the tests use, re-exported from ``tools.experiment``
``tools.experiment.candidates``         nb06's fixed candidate groups, the verifier's scores, group advantages and
                                        the zero-variance guard (imports nb01's and nb04's graded functions)
``tools.experiment.model``              nb06's precision (per card, its memory estimate), checkpoint paths, LoRA
                                        policy and sequence log-probs
``tools.experiment.update``             nb06's clipped objective, one update step, the effective-steps loop
``tools.experiment.measures``           nb06's no-update noise margin, policy separation, peak memory, token hashes
``tools.experiment.record``             nb06's evidence record, decision rule, evidence level, failure record
``tools.experiment.evidence``           nb06's record paths, schema validation, writing, headlines, Markdown table
``tools.online_grpo``                   nb07's runtime under one name (``og``): re-exports ``tools.online``'s lesson
                                        modules below (``task`` ... ``grading_policy``), defines nothing
``tools.online_trl``                    nb07's TRL section under one name: re-exports the ``tools.online.trl_*`` modules
``tools.online.task``                   nb07's task: four-digit sums, the disjoint held-out / RL / SFT pools, the
                                        held-out rule and groups, the transfer sets, scratchpad, prompt encoding;
                                        the rewards
``tools.online.logprobs``               ``completion_logps``: per-token log-probs (and entropies) at a temperature;
                                        ``grad_forward_gap`` / ``mu1_bounds``: what mu = 1 allows when two forwards differ
``tools.online.record``                 nb07's record paths and course root, hardware / framework snapshot, validated
                                        read and write of a run's record and of a multi-seed summary
``tools.online.warm_start``             nb07's SFT warm start (built once, cached), its float platform, ``load_policy``
``tools.online.evaluation``             held-out pass@1 / pass@k / maj@k (also per prompt), outcomes, completion
                                        kinds, the evaluation seed of a run
``tools.online.config``                 ``OnlineConfig`` and its check, the RUN_MODE presets (dtype, LoRA), optimizer
``tools.online.run``                    ``run_online_experiment`` (evaluate -> train -> evaluate -> record),
                                        ``preset_check``
``tools.online.seeds``                  several seeds: the bootstrap over seeds and prompts (held-out figures), the
                                        t interval (training figures), ``seeds_summary``
``tools.online.report``                 nb07's one verdict rule, goal, seeds table, what the model learned, ablation
                                        verdicts from intervals, Markdown tables
``tools.online.figures``                nb07's figures (PNG bytes), the PNGs ``make online`` saves
``tools.online.grading_policy``         the in-memory policy of nb07's grading oracle
``tools.online.trl_trainer``            a ``GRPOConfig`` mirroring an ``OnlineConfig``, the ``GRPOTrainer`` on the task
``tools.online.trl_agreement``          ``grpo_step`` vs ``GRPOTrainer._compute_loss``: loss / gradient agreement
``tools.online.trl_scenarios``          ``grpo_step`` vs ``GRPOTrainer.train()`` on a fixed batch: mu epochs, temperature,
                                        clipping, weights and TRL's logged metrics
``tools.online.trl_mutations``          the broken copies of ``grpo_step`` the comparisons must catch (``MUTATIONS``)
``tools.online.trl_comparison``         TRL's side computed once, the first disagreement, the mutations caught
``tools.online.trl_runs``               ``GRPOTrainer.train()`` on the task, the committed multi-seed TRL record
``tools.online.trl_ranks``              one rank of the multi-process run under torchrun: ``GRPOTrainer.train()`` with
                                        the batch split, one step per ``loss_type`` on a fixed batch
``tools.online.trl_multiprocess``       the multi-process run's record (schema, checks, the lesson's tables)
``tools.online.trl_scaling``            accelerate configs (accelerate's parser) beside the CPU run, the vLLM
                                        ``GRPOConfig``
``tools.env_vars``                      every ``GRPO_*`` environment variable: its one home, meaning and who sets it (the
                                        table of docs/CONVENTIONS.md is generated from it)
``tools.loss_types``                    the TRL ``loss_type`` names the course teaches (``LOSS_TYPES``,
                                        ``CLIPPED_LOSS_TYPES``): their one home
``tools.trl_conformance``               nb03b's conformance check of the course's losses and advantages against
                                        TRL's ``GRPOTrainer`` code paths: the names the lesson imports, re-exported
                                        from ``tools.conformance``
``tools.conformance.check``             ``check_trl_conformance`` (every check, one JSON-ready result) and
                                        ``validate_result`` (its schema)
``tools.conformance.losses``            the loss checks: the graded family and the provided extended loss against
                                        ``GRPOTrainer._compute_loss``
``tools.conformance.rewards``           the reward check against ``GRPOTrainer._calculate_rewards``
``tools.conformance.advantages``        the advantage check against the advantage block of TRL's own source
``tools.conformance.loss_calls``        one loss case on both sides: controlled batch, TRL's loss, the course's
``tools.conformance.stand_ins``         the stand-in trainer and views that record what TRL reads; ``TrlApiChanged``
``tools.conformance.cases``             the controlled cases (loss types and options, advantage settings)
``tools.conformance.summary``           ``print_conformance_summary``: the result for a reader (Chinese)
``tools.experiment_settings``           nb06's run modes, defined once (read from its schema), without torch
``tools.lessons.<assignment>``          generated by ``make release``: the ``#@save`` cells of a lesson's solution,
                                        the one home of a graded function later lessons, tools and benchmarks use
``tools.schemas``                       JSON schemas of the evidence files
``tools.chain.notebooks``               the single-source chain: ``solutions/`` -> nbgrader source -> learner release,
                                        release check, execution harness (``execute``, ``substitute_answers``)
``tools.chain.cells``                   the badge cell and the locked bootstrap cell stamped on every notebook
``tools.chain.saved``                   the ``#@save`` extraction that writes ``tools/lessons/``
``tools.chain.readme_table``            the notebook table of README.md
``tools.device.gpu_wheelhouse``        ``make gpu-wheelhouse``: the wheels ``benchmarks/gpu_check.sh`` installs on a bare
                                        CUDA machine
``tools.device.gpu_steps``              ``benchmarks/gpu_check.sh``'s steps (``--dry-run`` lists and checks them), their
                                        runner and its record (``tools/schemas/gpu-check-v1.json``)
``tools.device.gpu_check``              nb06 on the device for that script: its real_gpu cells, record invariants, report
``tools.cli.setup_env``                 ``make setup``: the virtual environment of a profile
``tools.cli.ready``                     what the course targets need beyond the venv (bubblewrap, checkpoints, warm
                                        starts, playwright-core), made ready by ``make setup``, ``demo``, ``test``...
``tools.cli.lab``                       ``make lab``: JupyterLab with the nbgrader extensions
``tools.cli.workspace``                 ``make workspace``: the learner's work copy of ``notebooks/`` in ``work/``
``tools.cli.demo``                      ``make demo``: build, execute, release, grade the sample class, experiment
``tools.cli.experiment``                ``make experiment``: the final notebook headless
``tools.cli.online``                    ``make online``: nb07's online GRPO run headless (seeds, TRL trainer, presets)
``tools.cli.multiprocess``              ``make online ONLINE_ARGS="--processes 2"``: torchrun launches and their workers
``tools.cli.testrun``                   ``make test`` / ``test-fast`` / ``test-integration``: pytest, timed into a git-ignored
                                        record
``tools.cli.commit_msg``                the pre-commit config's commit-msg check (subject at most 72 characters)
======================================  =============================================================================
"""
