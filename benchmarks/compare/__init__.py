"""Pieces of benchmarks/trl_compare.py."""
