"""The cost of lm-evaluation-harness around a scoring function: loglikelihood requests per second.

Three ways to score the same (context, continuation) requests of real benchmark documents:
- direct: the requests tokenized beforehand, scored in the same fixed-shape batches with the
  scoring function, log-probabilities summed: the least work possible;
- ScoringLM: our lm-eval model class (`loglikelihood(instances)`: tokenization, sorting, batching);
- harness: `evals.downstream.run_tasks`, lm-eval end to end (documents, prompt templates, requests,
  metrics, stderr).
Measured for two scoring functions: a byte bigram model (nearly free, so the harness's own cost
shows) and a small jitted JAX transformer of our trainer's architecture. The ratios and the
overhead per request (ms) are the result.
"""

from __future__ import annotations

import argparse
import functools
import logging
import tempfile
import time
from pathlib import Path


from bench.real_data import REAL_DATA
from bench.results import record, table

TASKS = ("arc_easy", "piqa", "hellaswag")
SHARED_EVALS = REAL_DATA / "evals"
TRAIN_TEXT = REAL_DATA / "text" / "wikitext-2" / "test.txt"


def _data_dir(tmp: Path) -> Path:
    """The benchmark files beside the repository, else what `gapwatch evals fetch-data` fetched."""
    from evals.data_convert import convert_original
    from evals.data_layout import default_data_dir

    if SHARED_EVALS.is_dir():
        convert_original(SHARED_EVALS, tmp)
        return tmp
    return default_data_dir()


def _models(tokenizer):
    """(name, scoring function) pairs; the transformer is our trainer's model, randomly initialised
    (speed does not depend on the weights)."""
    import jax

    from evals.ngram import BigramModel
    from evals.scoring import jax_token_scorer
    from trainer.model import ModelConfig, forward, init_params

    text = TRAIN_TEXT.read_text() if TRAIN_TEXT.is_file() else "the quick brown fox " * 1000
    bigram = BigramModel.fit([text], tokenizer)
    config = ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                         head_dim=16, mlp_hidden=128, max_seq_len=1024, sliding_window=128)
    params = init_params(config, jax.random.key(0))
    fn = jax.jit(functools.partial(forward, config=config))
    return [("byte bigram (NumPy)", bigram), (
        f"JAX transformer ({config.param_count() / 1e6:.2f}M params)",
        jax_token_scorer(lambda tokens: fn(params, tokens)))]


REPEATS = 3  # the fastest of three timings: the machine is shared, noise only ever adds time


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _requests(run) -> list[tuple[str, str]]:
    return [tuple(arg) for samples in run.raw["samples"].values() for s in samples
            for arg in s["arguments"]]


def measure(model, tokenizer, data_dir: Path, limit: int, harness_config) -> dict:
    from lm_eval.api.instance import Instance

    from evals.downstream import DownstreamConfig, run_tasks
    from evals.harness import ScoringLM
    from evals.scoring import as_token_scorer, score_rows

    def harness(n_docs: int):
        config = DownstreamConfig(limit=n_docs, harness=harness_config)
        started = time.perf_counter()
        run = run_tasks(model, tokenizer, TASKS, data_dir=data_dir, config=config, log_samples=True)
        return time.perf_counter() - started, _requests(run)

    harness(limit)  # warm-up: compiles every shape, reads and processes the documents once
    t_small, small = harness(limit // 4)
    t_harness, pairs = harness(limit)
    lm = ScoringLM(model, tokenizer, harness_config)
    instances = [Instance("loglikelihood", {}, pair, 0) for pair in pairs]
    # Tokenized as ScoringLM does (lm-eval's TemplateLM._encode_pair), sorted as it sorts.
    encoded = [lm._encode_pair(c, x) if c else ([tokenizer.eot_token_id], tokenizer.encode(x))
               for c, x in pairs]
    rows = sorted((((ctx + cont)[-harness_config.max_length:], len(cont)) for ctx, cont in encoded),
                  key=lambda r: -len(r[0]))
    scorer = as_token_scorer(model)

    def direct():
        scored = score_rows(scorer, [r for r, _ in rows], harness_config.batch_shape,
                            tokenizer.eot_token_id)
        return [float(logp[-n:].sum()) for (_, n), (logp, _) in zip(rows, scored)]

    t_direct = min(_timed(direct) for _ in range(REPEATS))
    t_lm = min(_timed(lambda: lm.loglikelihood(instances, disable_tqdm=True)) for _ in range(REPEATS))
    n = len(pairs)
    # Two sizes separate what a run costs once (tasks, documents) from what each request adds.
    marginal = (t_harness - t_small) / (n - len(small))
    return {"requests": n, "direct req/s": n / t_direct, "ScoringLM req/s": n / t_lm,
            "harness req/s": n / t_harness, "ScoringLM / direct": t_lm / t_direct,
            "harness / direct": t_harness / t_direct,
            "fixed s": t_harness - marginal * n,
            "added ms/req": 1000 * (marginal - t_direct / n)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_harness")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # per-task notices would flood the output
    from evals.harness import HarnessConfig
    from evals.tokenizer import ByteTokenizer

    limit = 12 if args.quick else 50
    tokenizer = ByteTokenizer()
    harness_config = HarnessConfig(batch_size=32, max_length=1024, length_bucket=128)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = _data_dir(Path(tmp))
        for name, model in _models(tokenizer):
            print(f"{name}: {limit} documents of each of {', '.join(TASKS)}", flush=True)
            m = measure(model, tokenizer, data_dir, limit, harness_config)
            rows.append({"scoring function": name, "requests": m["requests"],
                         "direct req/s": f"{m['direct req/s']:,.0f}",
                         "ScoringLM req/s": f"{m['ScoringLM req/s']:,.0f}",
                         "harness req/s": f"{m['harness req/s']:,.0f}",
                         "ScoringLM / direct": f"{m['ScoringLM / direct']:.2f}x",
                         "harness / direct": f"{m['harness / direct']:.2f}x",
                         "harness fixed s per run": f"{m['fixed s']:.1f}",
                         "harness adds ms/req": f"{m['added ms/req']:.2f}"})
    record("harness", "lm-eval harness overhead: loglikelihood requests per second",
           f"Tasks {', '.join(TASKS)}, {limit} seeded documents each, byte tokenizer, batches of "
           f"{harness_config.batch_size} padded to multiples of {harness_config.length_bucket} tokens "
           "(the same shapes in every column). Harness runs with the documents already read once "
           "in the process, as in-loop evals after the first; its cost split into a fixed part per "
           "run and a part per request from runs of two sizes.\n\n" + table(rows))


if __name__ == "__main__":
    main()
