"""`gapwatch eval`: held-out loss and downstream evals of a checkpoint, stored at its step."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from monitor.errors import GapwatchError

from app.extras import require_extra
from app.options import add_store_argument


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "eval", help="evaluate a checkpoint (downstream tasks, held-out loss) into a run",
        description="Run lm-eval's tasks on local data (see `gapwatch evals fetch-data`) and "
                    "optionally held-out sets on a checkpoint, and store the results in the run "
                    "at the checkpoint's step.")
    parser.add_argument("--run", required=True, help="run whose metrics receive the results")
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="a run's checkpoint folder (latest step) or one step folder")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated tasks (default: all of hellaswag, arc_easy, "
                             "arc_challenge, openbookqa, piqa, boolq, winogrande, mmlu); "
                             "'none' for held-out only")
    parser.add_argument("--limit", type=int, default=None,
                        help="documents per task (per MMLU subject): the same seeded subset every time")
    parser.add_argument("--heldout", action="append", default=[], metavar="SPEC",
                        help="a held-out set: 'lambada' (the fetched default), 'c4' (allenai/c4 en "
                             "validation from the hub), or NAME=FILE (.txt or .jsonl); repeatable")
    parser.add_argument("--heldout-max-tokens", type=int, default=None,
                        help="score whole documents of each held-out set up to this many tokens")
    parser.add_argument("--data-dir", type=Path, default=None, help="eval-data folder")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per model call")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_store_argument(parser)
    parser.set_defaults(func=run)


def heldout_set(spec: str, data_dir: Path | None):
    from evals.heldout_data import (DEFAULT_SET_NAME, default_heldout_set, load_hf_dataset,
                                    load_jsonl, load_text_file)

    if spec == DEFAULT_SET_NAME:
        return default_heldout_set(data_dir)
    if spec == "c4":
        return load_hf_dataset("allenai/c4", "en", split="validation", name="c4_en-validation")
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise GapwatchError(f"--heldout {spec!r}: use lambada, c4 or NAME=FILE")
    path = Path(path)
    return load_jsonl(path, name=name) if ".jsonl" in path.suffixes else load_text_file(path, name)


def run(args: argparse.Namespace) -> int:
    # Checkpoints are the trainer's (JAX, Orbax); the trainer extra brings the evals' stack too.
    require_extra("trainer")
    from evals.downstream import DownstreamConfig, run_tasks
    from evals.harness import HarnessConfig
    from evals.heldout import HeldoutConfig, evaluate_heldout
    from evals.monitor_log import log_downstream, log_heldout
    from evals.task_suite import TASKS, check_task_names
    from monitor.client import Monitor
    from trainer.checkpoint import load_for_eval
    from trainer.evaluation import ParamsScorer

    if args.tasks is None:
        tasks = list(TASKS)
    elif args.tasks.strip() == "none":
        tasks = []
    else:
        tasks = check_task_names([t.strip() for t in args.tasks.split(",") if t.strip()])
    if not tasks and not args.heldout:
        raise GapwatchError("nothing to evaluate: give tasks or --heldout")
    heldout_sets = [heldout_set(spec, args.data_dir) for spec in args.heldout]

    model = load_for_eval(args.checkpoint)
    print(f"checkpoint step {model.step}: {model.config.param_count():,} parameters")
    scorer = ParamsScorer(model.config, model.params)
    seq_len = model.config.max_seq_len
    heldout = []
    for hs in heldout_sets:
        print(f"held-out {hs.name}: {len(hs.documents)} documents")
        heldout.append(evaluate_heldout(scorer, hs, tokenizer=model.tokenizer, config=HeldoutConfig(
            seq_len=seq_len, batch_size=args.batch_size, max_tokens=args.heldout_max_tokens)))
    downstream = []
    if tasks:
        print(f"downstream: {', '.join(tasks)}" + (f" ({args.limit} documents each)" if args.limit else ""))
        harness = HarnessConfig(batch_size=args.batch_size, max_length=seq_len,
                                length_bucket=max(seq_len // 8, 1))
        downstream = run_tasks(scorer, model.tokenizer, tasks, data_dir=args.data_dir,
                               config=DownstreamConfig(limit=args.limit, harness=harness)).results
    with Monitor(args.run, store=args.store) as monitor:
        if heldout:
            log_heldout(monitor, model.step, heldout)
        if downstream:
            log_downstream(monitor, model.step, downstream)
    if args.json:
        print(json.dumps({
            "run": args.run, "step": model.step,
            "heldout": [{k: getattr(h, k) for k in ("name", "loss", "bpb", "stderr", "n", "tokens")}
                        for h in heldout],
            "downstream": [vars(d) for d in downstream]}))
    else:
        _print_table(args.run, model.step, heldout, downstream)
    return 0


def _print_table(run: str, step: int, heldout, downstream) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"run {run}, step {step}")
    for column in ("eval", "metric", "value", "± stderr", "n"):
        table.add_column(column, justify="left" if column in ("eval", "metric") else "right")
    for h in heldout:
        table.add_row(h.name, "loss (nats)", f"{h.loss:.4f}", f"{h.stderr:.4f}", str(h.n))
        table.add_row(h.name, "bits per byte", f"{h.bpb:.4f}", "", "")
    for d in downstream:
        table.add_row(d.task, d.metric, f"{d.value:.4f}", f"{d.stderr:.4f}", str(d.n))
    Console().print(table)
