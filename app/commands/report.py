"""`gapwatch report`: compare a run with its reference in one self-contained file."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from monitor.errors import GapwatchError

from app.options import add_store_argument, add_watch_config_argument, judging_settings

FORMATS = ("html", "md", "json")
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}
DEFAULT_HTML_PATH = "report.html"


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "report", help="compare a run with its reference in one file (HTML, Markdown or JSON)",
        description="Compare a run with its reference: a verdict with its evidence, tables of train, "
                    "held-out and downstream deltas, spikes, resumes, data coverage, throughput and an "
                    "energy estimate, and charts. A run with no reference is reported alone: its own "
                    "findings, with the comparisons said not made. The HTML opens offline.",
    )
    parser.add_argument("--run", required=True, metavar="NAME", help="the run to judge")
    parser.add_argument("--reference", metavar="NAME",
                        help="the run to compare with (default: the reference recorded with the run; "
                             "none: the run alone)")
    parser.add_argument("-o", "--output", metavar="PATH",
                        help=f"file to write ('-' for stdout); default: {DEFAULT_HTML_PATH} for HTML, "
                             "stdout for Markdown and JSON")
    parser.add_argument("--format", choices=FORMATS,
                        help="output format (default: from the output file's suffix, else html)")
    add_store_argument(parser)
    add_watch_config_argument(parser, overrides=("--axis",))
    parser.add_argument("--axis", choices=("auto", "step", "tokens"), default=None,
                        help="compare at equal steps or equal tokens (default: the config's, else tokens when the "
                             "batch sizes differ)")
    parser.add_argument("--windows", type=int, metavar="N", help="windows of the train-loss table (default 8)")
    parser.add_argument("--no-figures", action="store_true", help="leave the charts out of the HTML")
    energy = parser.add_argument_group("energy estimate (OLMo 2's method; defaults from its report)")
    energy.add_argument("--gpus", type=int, metavar="N", help="GPUs each run used (default: from the run's config)")
    energy.add_argument("--gpu-power-w", type=float, metavar="W", help="power per GPU in watts (default 700)")
    energy.add_argument("--pue", type=float, help="power usage effectiveness of the data centre (default 1.2)")
    energy.add_argument("--carbon-intensity", type=float, metavar="KG_PER_KWH",
                        help="grid carbon intensity, kg CO2e per kWh (default 0.332)")
    energy.add_argument("--wue-onsite", type=float, metavar="L_PER_KWH", help="water used on site per kWh (default 0)")
    energy.add_argument("--wue-offsite", type=float, metavar="L_PER_KWH",
                        help="water used generating the electricity per kWh (default 1.29)")
    parser.set_defaults(func=run)


def choose_format(fmt: str | None, output: str | None) -> str:
    if fmt:
        return fmt
    if output and output != "-":
        return SUFFIX_FORMATS.get(Path(output).suffix.lower(), "html")
    return "html"


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from monitor.store import open_store

    from app.heap import collect_less, keep_freed_memory
    from app.report import ReportConfig, build_report, load_pair, render
    from app.report.energy import EnergyParams

    keep_freed_memory()  # whole runs in memory: freed pages are reused (app/heap.py)
    collect_less()
    fmt = choose_format(args.format, args.output)
    output = args.output or (DEFAULT_HTML_PATH if fmt == "html" else "-")
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    config = ReportConfig(with_figures=not args.no_figures and fmt == "html")
    try:
        config.energy = EnergyParams(**{k: v for k, v in {
            "gpus": args.gpus, "gpu_power_w": args.gpu_power_w, "pue": args.pue,
            "carbon_intensity_kg_per_kwh": args.carbon_intensity, "wue_onsite_l_per_kwh": args.wue_onsite,
            "wue_offsite_l_per_kwh": args.wue_offsite}.items() if v is not None})
    except ValueError as exc:
        raise GapwatchError(str(exc)) from None
    if args.windows is not None:
        if args.windows < 1:
            raise GapwatchError(f"--windows must be at least 1, not {args.windows}")
        config.train = replace(config.train, windows=args.windows)
    detect, incidents = judging_settings(args)  # a bad config is its error, before any store is opened
    with open_store(args.store, read_only=True) as store:
        pair = load_pair(store, args.run, args.reference, detect=detect, incidents=incidents, progress=progress)
    progress("building tables, verdict and charts")
    report = build_report(pair, config)
    progress(f"writing {fmt}")
    text = render(report, fmt)
    if output == "-":
        sys.stdout.write(text)
    else:
        write_atomically(Path(output), text)
        progress(f"wrote {output} ({len(text.encode('utf-8')) / 1e6:.1f} MB): {report.verdict.headline}")
    return 0


def write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never sees half a report."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise GapwatchError(f"{path}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        # mkstemp's file is the owner's alone; a report is a file to share, made as `open` makes one.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise GapwatchError(f"{path}: cannot write: {exc.strerror}") from None
