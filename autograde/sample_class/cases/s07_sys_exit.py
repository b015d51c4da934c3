"""sys.exit() inside an answer (nb01 group_relative_advantages): every test that calls it fails with
SystemExit, the kernel survives and the rest is graded (3 + 5 = 8 of 17)."""
CASE = {
    "nb01_group_advantages": {"base": "solution", "edit": {"group_relative_advantages": [
        ("    grouped = rewards.reshape(-1, num_generations)",
         "    import sys\n    sys.exit(\"不会写了\")\n    grouped = rewards.reshape(-1, num_generations)"),
    ]}},
}
