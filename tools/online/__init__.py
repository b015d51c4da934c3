"""The runtime of the online GRPO lesson (nb07), one idea per module; ``tools.online_grpo`` re-exports the public
names of its lesson runtime under one spelling (``og``), ``tools.online_trl`` those of its TRL section.

Imports go one way, lowest first in ``MODULES``: a module imports only modules listed before it, never the two
re-exporting modules (``tests/test_nb07_runtime.py`` checks). torch, transformers, TRL and matplotlib are imported
inside the functions that need them, so importing any of these modules stays cheap (``make online`` checks its
arguments before torch is imported).
"""

MODULES = (
    "task",
    "logprobs",
    "record",
    "warm_start",
    "evaluation",
    "config",
    "run",
    "seeds",
    "report",
    "figures",
    "grading_policy",
    "trl_trainer",
    "trl_agreement",
    "trl_scenarios",
    "trl_mutations",
    "trl_comparison",
    "trl_runs",
    "trl_ranks",
    "trl_multiprocess",
    "trl_scaling",
)
