"""`gapwatch demo`: the main job end to end (see app/demo.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.extras import require_extra
from app.options import add_store_argument, port


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "demo",
        help="train four runs (one from W&B), catch their bugs, report and serve the dashboard",
        description="Train a reference run logged to W&B offline and import it; train a run with the "
        "double-sharding data-loader bug, one killed and resumed off by one batch, and a clean rerun; "
        "watch them, write the report and serve the dashboard.",
    )
    parser.add_argument("--workdir", type=Path, default=Path("demo-output"),
                        help="folder for the store, checkpoints, W&B files and the report (default: demo-output)")
    add_store_argument(parser)
    parser.add_argument("--config", default="demo", help="trainer preset or file for every run (default: demo)")
    parser.add_argument("--steps", type=int, default=None, help="steps of each run (default: the preset's)")
    parser.add_argument("--kill-at-step", type=int, default=None,
                        help="SIGKILL the resumed run after this step (default: 40%% of the run)")
    parser.add_argument("--eval-data", type=Path, default=None,
                        help="benchmark files for the in-loop downstream evals (default: the per-user "
                             "cache, filled once by `gapwatch evals fetch-data`)")
    parser.add_argument("--no-serve", action="store_true", help="do not serve the dashboard at the end")
    parser.add_argument("--port", type=port, default=8050, help="dashboard port (default: 8050)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require_extra("trainer")  # the demo trains its four runs
    from app.demo import Demo, DemoConfig

    config = DemoConfig(workdir=args.workdir, store=args.store, config=args.config, steps=args.steps,
                        kill_at_step=args.kill_at_step, serve=not args.no_serve, port=args.port,
                        eval_data=args.eval_data)
    return 0 if Demo(config).run() else 1
