"""Benchmarks: bench/run.py (see bench/README.md)."""
