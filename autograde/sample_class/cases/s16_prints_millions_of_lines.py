"""A cell that prints three million lines (nb02, at the top of the token_kl_penalty answer cell): the output
is capped while the cell runs and in the saved notebook; the answers are right: 16 of 16."""
CASE = {
    "nb02_grpo_objective": {"base": "solution", "edit": {"token_kl_penalty": [
        ("def token_kl_penalty(",
         "for _chunk in range(30):  # debugging output left in\n"
         "    print(\"\\n\".join(str(i) for i in range(_chunk * 100_000, (_chunk + 1) * 100_000)))\n\n\n"
         "def token_kl_penalty("),
    ]}},
}
