"""Maintainer tooling: the single-source -> nbgrader source -> learner release chain."""
