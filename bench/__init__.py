"""Benchmarks: each `python -m bench.NAME [--quick]` prints one JSON object as its last line."""
