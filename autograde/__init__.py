"""The course's nbgrader root and the grading pipeline around it (``python -m autograde.pipeline <command>``).

``autograde.grpo_grader`` holds the pipeline's modules; ``autograde.grpo_grader.oracles`` the trusted
per-lesson oracles. This folder is also the nbgrader course root (``nbgrader_config.py``).
"""
