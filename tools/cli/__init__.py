"""Command-line entry points behind the make targets (setup, lab, demo, experiment)."""
