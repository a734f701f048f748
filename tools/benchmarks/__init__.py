"""Benchmarks run by ``tools/bench.py``; one module per benchmark name."""
