"""Tuning records: which schedule knobs a kernel runs with, keyed by workload and CPU class."""
