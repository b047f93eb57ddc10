"""`gapwatch import SOURCE [--run NAME]`: bring a reference run (or any run) into the store."""

from __future__ import annotations

import argparse
import math
import re
from urllib.parse import urlsplit

from app.options import add_store_argument

# Mapping rows an import prints before its summary (lm-eval results map hundreds of keys).
MAPPING_ROWS_SHOWN = 20
# Written out, not read from monitor.importers.FORMATS, so that `--help` loads no reader
# (tests/monitor/importers/test_import_cmd.py holds the two lists alike).
FORMAT_HELP = ("wandb-file, wandb-history-folder, wandb-api, mlflow-server, wandb-csv, tensorboard, jsonl, csv, parquet, lm-eval-json, "
               "hf-trainer-state, mlflow, mlflow-db, llmc-log, megatron-log, fairseq-log, composer-log, olmo-core-log, "
               "torchtitan-log, maxtext-log, clu-log, levanter-log, hf-console-log, deepspeed-csv, lingua, dvclive, fairseq2, tensorboard-export, gapwatch-export "
               "(default: detected)")
# The hosts of W&B's cloud app, whose run pages are https://wandb.ai/<entity>/<project>/runs/<id>.
WANDB_APP_HOSTS = ("wandb.ai", "www.wandb.ai")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import a run from W&B, TensorBoard, lm-eval, CSV/JSONL or a training log",
        description="Import a run into the store, atomically and idempotently: importing the same "
        "source again writes nothing, a source that grew adds only its new rows. SOURCE is a "
        ".wandb file, a run folder or a wandb/ folder (a resumed run's folders are one run), "
        "wandb://entity/project/run_id, a W&B CSV export, lm-eval results (a file or a folder), "
        "TensorBoard event files (a file or a folder), a JSONL or CSV metric log, a Hugging Face "
        "trainer_state.json (or its checkpoint folder), an MLflow run folder (mlruns/) or database "
        "(mlflow.db) or a run's or experiment's page on an MLflow server, an llm.c / "
        "modded-nanogpt / nanoGPT log, a Megatron-LM / GPT-NeoX / nanotron stdout log, a lingua dump "
        "folder, a fairseq2 output directory (its metrics/), a DVCLive folder, a console log of CLU's LoggingWriter (Flax's "
        "examples, T5X) or of Levanter's JSON logger, or a file "
        "`gapwatch export` wrote. Steps are the "
        "trainer's own when the source logs them; the mapping of its keys is printed.",
    )
    parser.add_argument("source", metavar="SOURCE",
                        help="file, folder, wandb:// URL, a W&B run page's address (https://wandb.ai/...), an "
                        "MLflow run's or experiment's page (http://host:5000/#/experiments/...), or a file "
                        "or folder in a bucket (gs://, s3://, ...: copied first, checkpoints left aside)")
    parser.add_argument("--run", metavar="NAME",
                        help="run name in the store (default: the name the source gives it: a "
                        "W&B run's display name, a TensorBoard run's folder, a file's stem); for "
                        "a W&B panel export, a folder of TensorBoard downloads, an MLflow "
                        "database or an MLflow experiment's page of several runs, the run (column prefix, "
                        "run-NAME-tag-..., run name) to import, stored under that name")
    parser.add_argument("--all-runs", action="store_true",
                        help="import every run of a W&B panel export, a folder of TensorBoard "
                        "downloads, an MLflow database or an MLflow experiment's page, each under its own name")
    parser.add_argument("--dry-run", action="store_true",
                        help="print how the source's keys would map (key, metric, cadence, "
                        "count, why) and store nothing")
    parser.add_argument("--step-key", metavar="KEY", default=None,
                        help="the source key that holds the trainer's step (default: the "
                        "profile's, else train/global_step, trainer/global_step, global_step, "
                        "iter, step, Step or trainer/step when logged; W&B's _step otherwise)")
    parser.add_argument("--profile", metavar="NAME", default=None,
                        help="metric-name profile: gapwatch, olmo, maxtext, llmc, nanogpt, hf, lightning, torchtitan, megatron, composer, nemo, fairseq, deepspeed, litgpt, llamafactory, swift, lingua, fairseq2, flax, levanter, t5x, t5x-normalized, pax or a "
                        "user profile (default: detected from the metric names)")
    parser.add_argument("--profiles-file", metavar="PATH", default=None,
                        help="user profile YAML (default: $GAPWATCH_PROFILES, else profiles.yaml "
                        "in the per-user config directory)")
    parser.add_argument("--format", dest="fmt", metavar="FORMAT", default=None, help=FORMAT_HELP)
    parser.add_argument("--follow", action="store_true",
                        help="keep importing what the source appends until it finishes")
    parser.add_argument("--poll-interval", type=float, default=30.0, metavar="SECONDS",
                        help="seconds between reads with --follow (default: 30)")
    parser.add_argument("--idle-timeout", type=float, default=None, metavar="SECONDS",
                        help="with --follow, stop after this long without new rows")
    parser.add_argument("--reference", metavar="RUN", default=None,
                        help="record RUN, already in the store, as the imported run's reference (what "
                        "it is compared with)")
    parser.add_argument("--reference-of", metavar="RUN", default=None,
                        help="make the imported run the reference of this run in the store")
    parser.add_argument("--project", default=None, help="project to file the run under")
    parser.add_argument("--tokens-per-step", type=float, default=None, metavar="N",
                        help="tokens in one optimizer step, when the source does not say")
    parser.add_argument("--step", type=int, default=None,
                        help="step of an lm-eval results file whose model_args have no revision")
    parser.add_argument("--wandb-base-url", metavar="URL", default=None,
                        help="W&B server for wandb:// sources (default: $WANDB_BASE_URL, else "
                        "W&B's cloud)")
    add_store_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from app.heap import IMPORT_HEAP_BYTES, collect_less, keep_freed_memory
    from monitor.errors import GapwatchError
    from monitor.importers import detect_format, get_format, load
    from monitor.importers.meaning import format_table
    from monitor.importers.remote_copy import is_remote, local_copy
    from monitor.importers.wandb.api import ApiConfig

    if args.poll_interval <= 0:
        raise GapwatchError("--poll-interval must be positive")
    if args.tokens_per_step is not None and not 0 < args.tokens_per_step < math.inf:
        raise GapwatchError(f"--tokens-per-step must be a positive number, not {args.tokens_per_step}")
    console = Console(stderr=True)
    source = web_source(args.source)
    if source != args.source:
        console.print(f"note: importing the W&B run page {args.source} as {source}", highlight=False,
                      markup=False, soft_wrap=True)
        args.source = source
    # A bucket's source is copied once and read from its copy; `--follow` keeps the URL, whose copy
    # it brings up to date at each poll.
    args.followed = args.source
    if is_remote(args.source):
        args.source = str(local_copy(args.source, said=lambda line: console.print(
            line, highlight=False, markup=False, soft_wrap=True)))
    collect_less()  # an import makes many short-lived containers and no cycles worth a pass
    keep_freed_memory(IMPORT_HEAP_BYTES, IMPORT_HEAP_BYTES)  # within the import's bound on growth
    api_config = ApiConfig(base_url=args.wandb_base_url)
    fmt = args.fmt or detect_format(args.source)
    load_kwargs = {"tokens_per_step": args.tokens_per_step, "profiles_file": args.profiles_file}
    write_kwargs = {"project": args.project, "reference_of": args.reference_of}
    runs = get_format(fmt).runs
    targets = _targets(args, fmt, runs(args.source) if runs else [])
    if args.dry_run:
        for name, source_run in targets:
            run = load(args.source, args.profile, fmt=fmt, step=args.step, api_config=api_config,
                       step_key=args.step_key, source_run=source_run, **load_kwargs)
            if len(targets) > 1:
                print(f"{name}:")
            print(format_table(run.mapping))
        return 0
    for name, source_run in targets:
        _import_one(args, fmt, name, source_run, load_kwargs, write_kwargs, api_config, console,
                    table=len(targets) == 1)
    return 0


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, singular for one: "1 new row", "2 new rows"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def web_source(source: str) -> str:
    """`source` as the importers take it: a W&B run page pasted from the browser becomes the
    wandb://entity/project/run_id it shows, an MLflow run's or experiment's page is read as it is; any other URL
    but a wandb:// one is refused in one line
    (read as a path, it would end in "no such file" with its double slash folded)."""
    from monitor.errors import GapwatchError
    from monitor.importers.mlflow_server import is_mlflow_page
    from monitor.importers.remote_copy import is_remote

    if (source.startswith("wandb://") or not re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", source)
            or is_mlflow_page(source) or is_remote(source)):
        return source
    url = urlsplit(source)
    parts = [p for p in url.path.split("/") if p]
    run_page = url.scheme in ("http", "https") and len(parts) >= 4 and parts[2] == "runs"
    if run_page and url.hostname in WANDB_APP_HOSTS:
        return f"wandb://{parts[0]}/{parts[1]}/{parts[3]}"
    if url.hostname in WANDB_APP_HOSTS:
        raise GapwatchError(f"{source}: a W&B page, but not a run's; open the run and paste its address "
                            "(https://wandb.ai/entity/project/runs/run_id), or import wandb://entity/project/run_id")
    origin = f"{url.scheme}://{url.netloc}"
    if run_page:  # a W&B server of one's own shows its runs at the same path
        raise GapwatchError(f"{source}: gapwatch does not download web pages; if {origin} is a W&B server, "
                            f"import wandb://{parts[0]}/{parts[1]}/{parts[3]} --wandb-base-url {origin}")
    raise GapwatchError(f"{source}: gapwatch does not download {url.scheme}:// URLs; import a W&B run as "
                        "wandb://entity/project/run_id (or its page, https://wandb.ai/entity/project/runs/run_id), "
                        "an MLflow run by its page (http://host:port/#/experiments/<experiment>/runs/<run id>, or its "
                        "experiment's with --run), "
                        "or download the file and import that")


def _targets(args, fmt: str, runs: list[str]) -> list[tuple[str | None, str | None]]:
    """(store run name or None for the source's own, the source's run or None) of each run the
    command imports; runs: the runs a source of several holds (`Format.runs`: a W&B panel export,
    a folder of TensorBoard downloads, an MLflow database; [] for any other source)."""
    from monitor.errors import GapwatchError

    if args.dry_run and not args.run and len(runs) > 1:
        return [(r, r) for r in runs]  # the mapping of every run the export holds
    if args.all_runs:
        if len(runs) < 2:
            raise GapwatchError(f"--all-runs: {args.source} does not hold several runs (a W&B panel "
                                "export, a folder of TensorBoard downloads, an MLflow database or experiment); name the "
                                "run with --run")
        return [(r, r) for r in runs]
    if len(runs) > 1 and args.run in runs:
        return [(args.run, args.run)]
    if args.follow and not args.run:
        raise GapwatchError("--follow needs --run NAME: the run every poll adds to")
    return [(args.run, None)]


def _import_one(args, fmt, name, source_run, load_kwargs, write_kwargs, api_config, console,
                table: bool) -> None:
    """Import one run; table: print the mapping table before the summary line."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from monitor.errors import GapwatchError
    from monitor.importers import get_format, import_source, is_streamed_export
    from monitor.importers.follow import FollowConfig, follow
    from monitor.importers.meaning import format_table
    from monitor.judging.settings_diff import compare_settings, summary_line
    from monitor.store import open_store

    from app.output import phases

    args = argparse.Namespace(**{**vars(args), "run": name})
    store = open_store(args.store)
    try:
        if args.reference is not None and store.get_run(args.reference) is None:
            raise GapwatchError(f"--reference {args.reference!r}: no such run in {store.url.redacted()}; import "
                                "it first, or record it later with `gapwatch runs set-reference RUN NAME`")
        if args.follow:
            config = FollowConfig(poll_interval_s=args.poll_interval,
                                  idle_timeout_s=args.idle_timeout)

            def report(poll):
                if args.reference is not None and poll.poll == 1:
                    store.set_reference(args.run, args.reference)  # the run exists from the first poll on
                state = "finished" if poll.finished else "following"
                console.print(f"poll {poll.poll}: {counted(poll.rows_new, 'new row')}, "
                              f"{counted(poll.rows_total, 'source row')} in all ({state})",
                              highlight=False, markup=False, soft_wrap=True)

            # One run of a source of several (an MLflow database a job still tracks into) is read
            # again at each poll, that run only.
            picked = {"source_run": source_run} if source_run is not None else {}
            follow(store, args.run, args.followed, fmt, profile=args.profile,
                   load_kwargs={**load_kwargs, "step_key": args.step_key, **picked},
                   write_kwargs=write_kwargs, config=config,
                   api_config=api_config, on_poll=report)
            return
        import_kwargs = {**load_kwargs, **write_kwargs, "fmt": fmt, "step": args.step,
                         "api_config": api_config, "step_key": args.step_key,
                         "source_run": source_run}
        if console.is_terminal:
            columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console, transient=True) as progress:
                task = progress.add_task(f"reading {fmt}", total=None)

                def show(phase, done, total):
                    what = f"{phase} {fmt}" if phase != "writing" else "writing rows"
                    progress.update(task, description=what, completed=done, total=total or None)

                result, imported = import_source(store, args.run, args.source, args.profile,
                                                 progress=show, **import_kwargs)
        else:
            # No terminal to redraw a bar on (a CI log, a pipe): one line per phase.
            with phases("import") as phase:
                announced = set()

                def announce(name, done, total):
                    if name == "writing" and name not in announced:
                        announced.add(name)
                        phase(f"writing {total:,} rows" + (f" as {args.run}" if args.run else ""))

                # read and written chunk by chunk
                streamed = (get_format(fmt).streamed
                            or is_streamed_export(fmt, args.source, source_run))
                phase(f"importing {args.source} ({fmt})" + (f" as {args.run}" if args.run else "")
                      if streamed else f"reading {args.source} ({fmt})")
                result, imported = import_source(store, args.run, args.source, args.profile,
                                                 progress=announce, **import_kwargs)
        if imported.mapping and table:
            console.print(format_table(imported.mapping, limit=MAPPING_ROWS_SHOWN),
                          highlight=False, markup=False, soft_wrap=True)
        for note in imported.notes:
            label = "warning" if "crashed:" in note else "note"
            console.print(f"{label}: {note}", highlight=False, markup=False, soft_wrap=True)
        if args.reference is not None:
            store.set_reference(result.run, args.reference)
        what = "created" if result.created else "updated"
        named = "" if args.run else " (the source's name; --run NAME names it otherwise)"
        console.print(
            f"{what} run {result.run!r}{named} from {imported.source} (profile {imported.profile}): "
            # Source rows count those a profile drops and repeats that the store keeps once.
            f"{counted(result.rows_new, 'new row')}, {counted(result.rows_total, 'source row')} in all, "
            f"{counted(len(imported.keys), 'metric')}" + (", still running" if imported.live else "")
            + (f", compared with {args.reference!r}" if args.reference is not None else "")
            + (", crashed (what was complete is imported)" if imported.crashed else ""),
            highlight=False, markup=False, soft_wrap=True,  # one line, whole, for a script that reads it
        )
        # With a reference on either side, where the two recipes differ is the first thing to know.
        compared = ((result.run, args.reference) if args.reference is not None
                    else (args.reference_of, result.run) if args.reference_of is not None else None)
        if compared is not None:
            run, reference = compared
            diff = compare_settings(store.run_info(run).config, store.run_info(reference).config)
            console.print(summary_line(diff, run, reference), highlight=False, markup=False, soft_wrap=True)
    finally:
        store.close()
