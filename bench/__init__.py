"""Benchmarks: each `bench_<topic>.py` measures ours against a peer or the naive way, side by side."""
