"""os._exit(0) at the top of an answer cell (nb02 compute_grpo_loss): the kernel dies there. The tests that
ran before keep their points (token_kl_penalty: 2 + 2), every later cell gets a KernelDied error: 4 of 16."""
CASE = {
    "nb02_grpo_objective": {"base": "solution", "edit": {"compute_grpo_loss": [
        ("def compute_grpo_loss(", "import os\nos._exit(0)  # 想重启内核\n\n\ndef compute_grpo_loss("),
    ]}},
}
