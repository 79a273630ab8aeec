"""Deterministic simulation: the real broker, fetcher and controller classes on virtual time, a seeded
in-memory network and a disk that can lose what was never flushed. See docs/simulation.md."""
