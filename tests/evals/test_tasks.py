"""Each task config runs lm-eval's own task on the real benchmark files, with a real model, and
the numbers it reports agree with a direct computation."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from evals.downstream import DownstreamConfig, run_tasks
from evals.harness import HarnessConfig
from evals.task_data import subset_indices
from evals.task_suite import LM_EVAL_TASKS, TASKS, task_manager
from monitor.errors import GapwatchError

LIMIT = 24
CONFIG = DownstreamConfig(limit=LIMIT, harness=HarnessConfig(batch_size=32, max_length=2048))
EXPECTED_METRICS = {
    "hellaswag": {"acc", "acc_norm"}, "arc_easy": {"acc", "acc_norm"},
    "arc_challenge": {"acc", "acc_norm"}, "openbookqa": {"acc", "acc_norm"},
    "piqa": {"acc", "acc_norm"}, "boolq": {"acc"}, "winogrande": {"acc"}, "mmlu": {"acc"},
}


def direct_loglikelihood(bigram, tokenizer, context: str, continuation: str) -> float:
    """Sum of log p over the continuation's bytes, straight from the bigram table."""
    ctx = tokenizer.encode(context) if context else [tokenizer.eot_token_id]
    ids = ctx + tokenizer.encode(continuation)
    return float(sum(bigram.log_probs[ids[i - 1], ids[i]] for i in range(len(ctx), len(ids))))


@pytest.fixture(scope="module")
def single_runs(bigram, byte_tokenizer, eval_data_dir):
    """One lm-eval run over every non-MMLU task, with per-document samples."""
    tasks = [t for t in TASKS if t != "mmlu"]
    return run_tasks(bigram, byte_tokenizer, tasks, data_dir=eval_data_dir, config=CONFIG,
                     log_samples=True)


@pytest.mark.parametrize("task", [t for t in TASKS if t != "mmlu"])
def test_task_scores_match_direct_computation(task, single_runs, bigram, byte_tokenizer):
    samples = single_runs.raw["samples"][task]
    assert len(samples) == LIMIT
    for sample in samples:
        direct = [direct_loglikelihood(bigram, byte_tokenizer, ctx, cont)
                  for ctx, cont in sample["arguments"]]
        harness = [resp[0] for resp in sample["filtered_resps"]]
        assert harness == pytest.approx(direct, abs=1e-3)
    results = {r.metric: r for r in single_runs.results if r.task == task}
    assert set(results) == EXPECTED_METRICS[task]
    for metric, result in results.items():
        per_doc = np.array([s[metric] for s in samples])
        assert result.n == LIMIT
        assert result.value == pytest.approx(per_doc.mean())
        # lm-eval's closed-form stderr of a mean: sample std (ddof=1) over sqrt(n).
        assert result.stderr == pytest.approx(per_doc.std(ddof=1) / math.sqrt(LIMIT))


def test_arc_easy_accuracy_from_first_principles(single_runs, bigram, byte_tokenizer):
    """Prompt, gold answer and length normalisation rebuilt by hand from ARC's documents."""
    samples = single_runs.raw["samples"]["arc_easy"]
    correct, correct_norm = [], []
    for s in samples:
        doc = s["doc"]
        context = f"Question: {doc['question']}\nAnswer:"
        choices = doc["choices"]["text"]
        gold = doc["choices"]["label"].index(doc["answerKey"])
        lls = np.array([direct_loglikelihood(bigram, byte_tokenizer, context, " " + c)
                        for c in choices])
        correct.append(np.argmax(lls) == gold)
        correct_norm.append(np.argmax(lls / np.array([len(c) for c in choices])) == gold)
    by_metric = {r.metric: r.value for r in single_runs.results if r.task == "arc_easy"}
    assert by_metric["acc"] == pytest.approx(np.mean(correct))
    assert by_metric["acc_norm"] == pytest.approx(np.mean(correct_norm))


def test_mmlu_group_pools_its_subjects(bigram, byte_tokenizer, eval_data_dir):
    run = run_tasks(bigram, byte_tokenizer, ["mmlu"], data_dir=eval_data_dir,
                    config=DownstreamConfig(limit=2), log_samples=True)
    (result,) = run.results
    per_doc = np.concatenate([[s["acc"] for s in samples]
                              for name, samples in run.raw["samples"].items()
                              if name.startswith("mmlu_")])
    subjects = [n for n in run.raw["samples"] if n.startswith("mmlu_")]
    assert len(subjects) == 57 and result.n == 2 * 57 == len(per_doc)
    assert result.value == pytest.approx(per_doc.mean())
    assert 0 < result.stderr < 0.1


def test_limit_is_the_same_spread_subset_every_time(bigram, byte_tokenizer, eval_data_dir):
    first = subset_indices(1000, 10, seed=1234)
    assert first == subset_indices(1000, 10, seed=1234) and first != list(range(10))
    assert max(first) > 100  # spread over the split, not its head
    a = run_tasks(bigram, byte_tokenizer, ["piqa"], data_dir=eval_data_dir,
                  config=DownstreamConfig(limit=10), log_samples=True)
    b = run_tasks(bigram, byte_tokenizer, ["piqa"], data_dir=eval_data_dir,
                  config=DownstreamConfig(limit=10), log_samples=True)
    docs = [s["doc"]["goal"] for s in a.raw["samples"]["piqa"]]
    assert docs == [s["doc"]["goal"] for s in b.raw["samples"]["piqa"]]
    assert a.results[0].value == b.results[0].value


def test_global_random_generators_are_left_alone(bigram, byte_tokenizer, eval_data_dir):
    random.seed(7)
    np.random.seed(7)
    expected = (random.random(), np.random.rand())
    random.seed(7)
    np.random.seed(7)
    run_tasks(bigram, byte_tokenizer, ["boolq"], data_dir=eval_data_dir,
              config=DownstreamConfig(limit=4))
    assert (random.random(), np.random.rand()) == expected


def test_every_config_is_indexed_and_includes_lm_eval(eval_data_dir):
    with task_manager(eval_data_dir) as manager:
        assert set(TASKS) <= set(manager.all_tasks)
        lm_eval_subjects = {p.stem for p in (LM_EVAL_TASKS / "mmlu/default").glob("mmlu_*.yaml")}
        assert {t for t in manager.all_subtasks if t.startswith("mmlu_")} == lm_eval_subjects


def test_unknown_task_and_missing_data_are_clear_errors(bigram, byte_tokenizer, tmp_path):
    with pytest.raises(GapwatchError, match="unknown task"):
        run_tasks(bigram, byte_tokenizer, ["lambada_openai"], data_dir=tmp_path)
    with pytest.raises(GapwatchError, match="gapwatch evals fetch-data"):
        run_tasks(bigram, byte_tokenizer, ["piqa"], data_dir=tmp_path)
