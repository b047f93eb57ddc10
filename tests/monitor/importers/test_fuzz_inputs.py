"""The fast part of the fuzz corpus (the whole runs in `make bench`, bench/bench_fuzz.py): each case
imported in a forked process of its own ends in one clean error line or a faithful import."""

from __future__ import annotations

import random

from bench.fuzz_corpus import SEED, WILD, Case, corruptions, generated
from bench.fuzz_runner import original_oracles, run_cases

# Every STRIDE-th generated case: a spread over formats, encodings and corruptions.
STRIDE = 12
TIMEOUT_S = 120.0


def test_a_spread_of_the_corpus_ends_in_clean_errors_or_faithful_imports():
    cases = generated(random.Random(SEED))[::STRIDE]
    (small,) = (WILD / "wandb" / "14_nanogpt_muon_2026").rglob("*.wandb")
    oracle = original_oracles([small])[small]
    cases += [Case(f"{small.name} {name}", small.name, data, oracle)
              for name, data in corruptions(random.Random(SEED), small.read_bytes(), tries=1)]
    results = run_cases(cases, TIMEOUT_S)
    bad = [(r.case, r.outcome, r.detail) for r in results if r.outcome not in ("clean error", "imported")]
    assert bad == []
    assert {r.outcome for r in results} == {"clean error", "imported"}  # the spread holds both


def test_the_judge_sees_a_silent_change(tmp_path):
    """An import that stores a value the input does not hold is caught (the judge is no rubber stamp)."""
    from bench.fuzz_corpus import text_oracle

    data = b'{"step": 1, "train/loss": 1.5}\n'
    truth = text_oracle(data, "jsonl")
    told = text_oracle(b'{"step": 1, "train/loss": 2.5}\n', "jsonl")  # what the judge is told it holds
    results = run_cases([Case("held", "log.jsonl", data, truth), Case("changed", "log.jsonl", data, told)])
    assert [r.outcome for r in results] == ["imported", "silent change"]
    assert "1.5 is no number of the input" in results[1].detail
