"""Benchmarks of the course code (`make bench`); see benchmarks/README.md."""
