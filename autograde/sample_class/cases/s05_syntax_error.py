"""A syntax error in one answer cell (nb02 token_kl_penalty); the rest of the notebook is still graded.

The KL tests fail (NameError), and so does every test that needs the KL term; the two compute_grpo_loss
visible tests without KL still pass: 2 + 2 = 4 of 16.
"""
CASE = {
    "nb02_grpo_objective": {"base": "solution", "edit": {"token_kl_penalty": [
        ("return torch.exp(delta) - delta - 1.0", "return torch.exp(delta) - delta - 1.0)"),
    ]}},
}
