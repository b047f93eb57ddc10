"""`gapwatch train`: train the OLMo-3-style model and stream its health into the store.

    gapwatch train [--config tiny|demo|FILE] [--steps N] [--run NAME] [--store URL] [--seed S]
                   [--fault NAME [--fault-step N]] [--until-done] [--wandb offline|online]
                   [--corpus SRC ...] [--devices N] [--kill-at-step N] ...

A run resumes from its latest checkpoint (run directory: --run-dir, default the per-user data
directory) whenever one exists. `--until-done` runs the command as a child process and starts it
again after a crash, with backoff, until the step budget is reached.
"""

from __future__ import annotations

import argparse
import sys
import time

from app.extras import require_extra
from app.options import add_store_argument

FAULT_NAMES = ("double-sharding", "resume-off-by-one", "loss-spike", "nan", "slow-host")
# Parsed values that are not passed on to the supervised child process.
CHILD_SKIP = {"until_done", "max_restarts", "backoff", "restart_exit_code", "func", "command"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train the OLMo-3-style JAX model, streaming metrics into the store",
        description="Train a small OLMo-3-style model on CPU (or any JAX device) with the "
        "instrumented trainer; resumes from the run's latest checkpoint when there is one.",
    )
    parser.add_argument("--config", default="tiny", metavar="tiny|demo|FILE",
                        help="a preset or a YAML/TOML file mirroring TrainConfig (default: tiny)")
    parser.add_argument("--steps", type=int, help="optimizer steps of the whole run")
    parser.add_argument("--run", help="run name (default: <config>-<date>-<time>)")
    add_store_argument(parser)
    parser.add_argument("--seed", type=int,
                        help="seed of the data order (and of the initial parameters unless the "
                             "config sets init_seed)")
    parser.add_argument("--fault", choices=FAULT_NAMES, help="inject a fault (trainer/faults.py)")
    parser.add_argument("--fault-step", type=int, metavar="N",
                        help="first step of the loss-spike, nan and slow-host faults")
    parser.add_argument("--corpus", nargs="+", metavar="SRC",
                        help="stdlib, .txt/.jsonl files or folders, or hf:NAME[:CONFIG][@SPLIT]")
    parser.add_argument("--data-hosts", type=int, help="data hosts the loader plays")
    parser.add_argument("--global-batch-size", type=int, help="sequences per optimizer step")
    parser.add_argument("--run-dir", help="folder for checkpoints (default: per-user data dir)")
    parser.add_argument("--wandb", choices=("offline", "online"), help="also log to Weights & Biases")
    parser.add_argument("--wandb-project", help="W&B project (default: gapwatch)")
    parser.add_argument("--project", help="project of the run in the store")
    parser.add_argument("--reference", help="name of the run's reference run in the store")
    parser.add_argument("--devices", type=int, metavar="N",
                        help="virtual CPU devices for data parallelism on a CPU-only machine")
    parser.add_argument("--kill-at-step", type=int, metavar="N",
                        help="SIGKILL the first process after step N (a real crash, to test resume)")
    parser.add_argument("--no-monitor", action="store_true", help="do not log to the store")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--coordinator", metavar="HOST:PORT",
                        help="multi-process: address of process 0's coordinator")
    parser.add_argument("--num-processes", type=int, default=1, help="multi-process: processes in the job")
    parser.add_argument("--process-id", type=int, default=0, help="multi-process: this process's index")
    parser.add_argument("--until-done", action="store_true",
                        help="restart after a crash, with backoff, until the step budget is reached")
    parser.add_argument("--max-restarts", type=int, default=10, help="with --until-done (default: 10)")
    parser.add_argument("--backoff", type=float, default=1.0, metavar="SECONDS",
                        help="with --until-done: first wait before a restart, doubling after (default: 1)")
    parser.add_argument("--restart-exit-code", type=int, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_extra("trainer")
    if args.run is None:
        name = args.config if args.config in ("tiny", "demo") else "train"
        args.run = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.until_done:
        return _supervise(args)
    return _train(args)


def _supervise(args: argparse.Namespace) -> int:
    from trainer.supervisor import SupervisorConfig, supervise

    child = [sys.executable, "-m", "app.cli", "train", *_child_options(args)]
    policy = SupervisorConfig(max_restarts=args.max_restarts, backoff_s=args.backoff)
    return supervise(child, policy, say=lambda msg: print(msg, file=sys.stderr, flush=True))


def _child_options(args: argparse.Namespace) -> list[str]:
    """The parsed options again as a command line, minus the supervisor's own."""
    out: list[str] = []
    for dest, value in vars(args).items():
        if dest in CHILD_SKIP or value is None or value is False:
            continue
        flag = "--" + dest.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def _train(args: argparse.Namespace) -> int:
    import os

    if args.devices:
        # Must happen before JAX initialises its backends; XLA_FLAGS is read only then.
        flag = f"--xla_force_host_platform_device_count={args.devices}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    from pathlib import Path

    from trainer import config as train_config
    from trainer.distributed import DistributedConfig, initialize
    from trainer.loop import RunOptions, train

    initialize(DistributedConfig(args.coordinator, args.num_processes, args.process_id))
    cfg = train_config.load(args.config)
    cfg = _apply_overrides(cfg, args)
    options = RunOptions(
        run=args.run, store=args.store, run_dir=Path(args.run_dir) if args.run_dir else None,
        monitor=not args.no_monitor, wandb=args.wandb, wandb_project=args.wandb_project,
        console_every=0 if args.quiet else None, restart_exit_code=args.restart_exit_code,
        project=args.project, reference=args.reference,
    )
    result = train(cfg, options)
    if not args.quiet:
        print(f"run {args.run}: trained steps {result.first_step}..{result.last_step}; "
              f"checkpoints in {result.checkpoint_dir}")
    return 0


def _apply_overrides(cfg, args: argparse.Namespace):
    import dataclasses

    if args.steps is not None:
        cfg = cfg.replace(steps=args.steps)
    if args.seed is not None:
        cfg = cfg.replace(seed=args.seed)
    if args.kill_at_step is not None:
        cfg = cfg.replace(kill_at_step=args.kill_at_step)
    if args.fault is not None or args.fault_step is not None:
        fault = dataclasses.replace(cfg.fault, name=args.fault or cfg.fault.name)
        if args.fault_step is not None:
            fault = dataclasses.replace(fault, at_step=args.fault_step)
        cfg = cfg.replace(fault=fault)
    data = cfg.data
    if args.corpus:
        data = dataclasses.replace(data, corpus=dataclasses.replace(data.corpus, sources=tuple(args.corpus)))
    if args.data_hosts is not None:
        data = dataclasses.replace(data, data_hosts=args.data_hosts)
    if args.global_batch_size is not None:
        data = dataclasses.replace(data, global_batch_size=args.global_batch_size)
    return cfg.replace(data=data)
