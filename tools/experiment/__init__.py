"""The pieces of the final experiment (nb06); ``tools.grpo_experiment`` is their public face."""
