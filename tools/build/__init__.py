"""The single-source build chain: solutions/*.py -> autograde/source -> notebooks/."""
