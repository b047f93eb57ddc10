"""Reference runs from anywhere: `load(source)` reads a file, folder or URL into an ImportedRun.

The format is detected from the source (`detect_format`); metric names are mapped onto gapwatch's
keys by a profile (`monitor.importers.profiles`), detected from the names unless one is named.
Parsers never touch a store: `monitor.importers.store_writer.write_run` writes an ImportedRun
atomically and idempotently. `import_source` does both; JSONL and CSV logs it imports chunk by
chunk (`table_import`), so their memory is bounded by a chunk, not by the file.

Formats: `wandb-file` (a `.wandb` file or offline run folder), `wandb-api`
(`wandb://entity/project/run_id`), `wandb-csv` (W&B CSV exports), `lm-eval-json` (lm-eval results,
a file or a folder of them), `tensorboard` (event files or a log folder), `jsonl` and `csv`
(generic metric logs), `llmc-log` (llm.c, modded-nanogpt and nanoGPT text logs),
`gapwatch-export` (what `gapwatch export` writes: CSV, JSON Lines or Parquet).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pandas as pd

from monitor.errors import GapwatchError

from .imported_run import ImportedRun, empty_scalars, scalars_frame
from .input_checks import check_source
from .meaning import cadences, mapping_rows, pick_profile
from .normalize import apply_profile
from .profiles import Profile, get_profile
from .step_axis import (ROW_COUNTER_FORMATS, WANDB_ROW_KEY, choose_step_key,
                        is_wandb_history_jsonl, on_trainer_step)
from .table_import import STREAMED_FORMATS

FORMATS = ("wandb-file", "wandb-api", "wandb-csv", "lm-eval-json", "tensorboard", "jsonl",
           "csv", "llmc-log", "gapwatch-export")
WANDB_URL_SCHEME = "wandb://"
_SNIFF_BYTES = 64 * 1024


def detect_format(source: str | os.PathLike) -> str:
    """The importer for a source, from its URL scheme, name, and first bytes."""
    text = str(source)
    if text.startswith(WANDB_URL_SCHEME):
        return "wandb-api"
    path = Path(source)
    check_source(path)
    from . import lm_eval_json, run_export, tensorboard_events, text_logs
    from .wandb import csv_export

    if path.is_dir():
        from .wandb import run_file  # imports wandb itself: only where a folder may be a W&B run

        if run_file.is_wandb_source(path):
            return "wandb-file"
        if any(tensorboard_events.is_event_file(f) for f in path.rglob("*tfevents*")):
            return "tensorboard"
        if any(path.rglob("*.json")):
            return "lm-eval-json"
        raise GapwatchError(f"{source}: no importer reads this folder (no .wandb run, "
                            "TensorBoard event files or lm-eval results in it)")
    if tensorboard_events.is_event_file(path):
        return "tensorboard"
    head = _head(path)
    if not head.strip():
        raise GapwatchError(f"{source}: empty file: nothing to import")
    if run_export.is_export(path, head):
        return "gapwatch-export"
    if head.startswith(":W&B"):
        return "wandb-file"
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        try:
            header = next(csv.reader([head.split("\n", 1)[0]],
                                     delimiter=csv_export.separator(path)), [])
        except csv.Error as exc:
            raise GapwatchError(f"{source}: not a valid CSV file ({exc})") from None
        header = [h.strip() for h in header]
        if csv_export.is_runs_table(header):
            raise csv_export.runs_table_error(source)
        return "wandb-csv" if csv_export.sniff(header) else "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return "jsonl"
        except RecursionError:
            raise GapwatchError(f"{source}: JSON nested too deep to be lm-eval results") from None
        if lm_eval_json.sniff(doc):
            return "lm-eval-json"
        raise GapwatchError(f"{source}: a JSON file that is not lm-eval results")
    if text_logs.sniff(head):
        return "llmc-log"
    first = head.lstrip()[:1]
    if first == "{":
        return "jsonl"
    raise GapwatchError(f"{source}: unrecognised format (no importer reads this file)")


def load(source: str | os.PathLike, profile: str | Profile | None = None, *,
         fmt: str | None = None, tokens_per_step: float | None = None, step: int | None = None,
         profiles_file: str | os.PathLike | None = None, progress=None,
         api_config=None, step_key: str | None = None, wandb_run: str | None = None
         ) -> ImportedRun:
    """Read one source into an ImportedRun with gapwatch metric keys.

    profile: a profile name or object; None detects it from the source's metric names.
    fmt: force an importer (one of FORMATS) instead of detecting it.
    tokens_per_step: tokens in one optimizer step, when the source does not say.
    step: the step of an lm-eval results file whose model_args name no revision.
    profiles_file: the user's profile YAML (default: $GAPWATCH_PROFILES or the config dir).
    progress: called with (done, total) while a large source is read.
    api_config: how a wandb:// source's server is reached (wandb.api.ApiConfig).
    step_key: the source key that holds the trainer's step (default: the profile's, else the
        first of `step_axis.STEP_KEYS` the run logs).
    wandb_run: which run of a multi-run W&B panel export (a column prefix).
    """
    fmt = fmt or detect_format(source)
    if fmt != "wandb-api":
        check_source(source)
    if fmt not in FORMATS:
        raise GapwatchError(f"unknown import format {fmt!r}; known: {', '.join(FORMATS)}")
    named = get_profile(profile, profiles_file) if isinstance(profile, str) and profile else profile
    if fmt == "gapwatch-export" and not named:
        named = get_profile("gapwatch")  # its keys are gapwatch's already
    step_key = step_key or (named.step_key if isinstance(named, Profile) else None)
    # W&B history saved as JSON Lines: read on W&B's row counter, then on the trainer's step.
    wandb_rows = fmt == "jsonl" and is_wandb_history_jsonl(source)
    raw, prefer = _parse(fmt, source, tokens_per_step=tokens_per_step, step=step,
                         step_key=WANDB_ROW_KEY if wandb_rows else step_key, progress=progress,
                         api_config=api_config, wandb_run=wandb_run)
    if tokens_per_step is not None:
        raw.tokens_per_step = float(tokens_per_step)
    if fmt != "wandb-api":
        # The source's identity in the store: the same file wherever it is imported from.
        raw.source = str(Path(raw.source or source).resolve())
    band = None
    if fmt == "wandb-csv":
        from .wandb.panel_band import split_band

        raw, band = split_band(raw)
    names = [str(n) for n in raw.scalars["key"].unique().tolist()]
    axis = None
    if fmt in ROW_COUNTER_FORMATS or wandb_rows or (step_key and fmt == "tensorboard"):
        axis = choose_step_key(names, step_key, raw.source)
        if axis is not None:
            logged = raw.scalars.loc[raw.scalars["key"] == axis, "value"]
            axis_rows = pd.DataFrame({"key": axis, "step": logged.to_numpy(dtype="int64")})
            raw = on_trainer_step(raw, axis)
            names.remove(axis)
    cadence = cadences(raw.scalars)
    if axis is not None:
        cadence.update(cadences(axis_rows))  # the step key's own values: the steps it logged
    chosen, evidence = pick_profile(named, names, cadence, prefer=prefer,
                                    user_file=profiles_file)
    run = apply_profile(raw, chosen)
    run.mapping = mapping_rows(names, run.key_map, chosen, evidence, cadence, axis)
    if band is not None:
        from .wandb.panel_band import attach_band

        run = attach_band(run, band, chosen)
    return run


def import_source(store, name: str, source: str | os.PathLike, profile: str | Profile | None = None,
                  *, fmt: str | None = None, tokens_per_step: float | None = None,
                  step: int | None = None, profiles_file: str | os.PathLike | None = None,
                  api_config=None, project: str | None = None, reference_of: str | None = None,
                  progress=None, step_key: str | None = None, wandb_run: str | None = None):
    """Read `source` and write it into `store` as run `name`: (WriteResult, ImportSummary).

    Arguments as for `load` and `store_writer.write_run`. progress: called with (phase, done,
    total): phase "importing" (bytes of a streamed log), else "reading" then "writing" (rows).
    The summary's `mapping` lists what each source name became (`meaning.mapping_rows`).
    """
    from .store_writer import write_run
    from .table_import import ImportSummary, import_table

    fmt = fmt or detect_format(source)
    if fmt in STREAMED_FORMATS or is_streamed_export(fmt, source, wandb_run):
        check_source(source)
        on_bytes = None if progress is None else (
            lambda done, total: progress("importing", done, total))
        return import_table(store, name, source, fmt, profile, tokens_per_step=tokens_per_step,
                            profiles_file=profiles_file, project=project,
                            reference_of=reference_of, progress=on_bytes, step_key=step_key)
    reading = None if progress is None else (lambda done, total: progress("reading", done, total))
    writing = None if progress is None else (lambda done, total: progress("writing", done, total))
    run = load(source, profile, fmt=fmt, tokens_per_step=tokens_per_step, step=step,
               profiles_file=profiles_file, progress=reading, api_config=api_config,
               step_key=step_key, wandb_run=wandb_run)
    if run.scalars.empty:
        raise GapwatchError(f"{run.source}: no values to import ({'; '.join(run.notes) or 'none logged'})")
    result = write_run(store, name, run, project=project, reference_of=reference_of,
                       progress=writing)
    return result, ImportSummary(run.source, run.profile, run.keys, list(run.notes), run.live,
                                 crashed=run.crashed, mapping=run.mapping)


def is_streamed_export(fmt: str, source, wandb_run: str | None = None) -> bool:
    """A W&B history export (`_step`, no run-name prefixes): imported chunk by chunk, as a generic
    log is (`wandb.csv_stream`)."""
    if fmt != "wandb-csv" or wandb_run is not None:
        return False
    from .wandb.csv_stream import streamable

    return streamable(source)


def _parse(fmt: str, source, *, tokens_per_step, step, step_key, progress, api_config,
           wandb_run=None):
    """The raw ImportedRun (source metric names) and the profile the format usually uses."""
    if fmt == "gapwatch-export":
        from .run_export import parse_export

        return parse_export(source), "gapwatch"
    if fmt == "llmc-log":
        from .text_logs import parse_text_log

        return parse_text_log(source), "llmc"
    if fmt == "wandb-csv":
        from .wandb.csv_export import parse_wandb_csv

        return parse_wandb_csv(source, tokens_per_step=tokens_per_step, run=wandb_run), None
    if fmt == "wandb-file":
        from .wandb.run_file import parse_wandb_run

        return parse_wandb_run(source, progress=progress), None
    if fmt == "wandb-api":
        from .wandb.api import parse_wandb_api

        return parse_wandb_api(str(source), api_config, progress=progress), None
    if fmt == "lm-eval-json":
        from .lm_eval_json import parse_lm_eval

        return parse_lm_eval(source, step=step), "gapwatch"
    if fmt == "tensorboard":
        from .tensorboard_events import parse_tensorboard

        return parse_tensorboard(source), None
    if fmt == "jsonl":
        from .generic_table import parse_jsonl

        return parse_jsonl(source, step_key=step_key), None
    from .generic_table import parse_generic_csv

    return parse_generic_csv(source, step_key=step_key), None


def _head(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None


def history(run: str, keys=None, *, store=None):
    """A stored run's history as a DataFrame (see `run_export.history`)."""
    from .run_export import history as run_history

    return run_history(run, keys, store=store)


__all__ = [
    "history",
    "ImportedRun",
    "Profile",
    "load",
    "import_source",
    "detect_format",
    "empty_scalars",
    "scalars_frame",
    "FORMATS",
    "STREAMED_FORMATS",
    "WANDB_URL_SCHEME",
]
