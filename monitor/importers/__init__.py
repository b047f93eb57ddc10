"""Reference runs from anywhere: `load(source)` reads a file, folder or URL into an ImportedRun.

The format is the first of `FORMATS` that recognizes the source (`detect_format`); metric names are mapped onto gapwatch's
keys by a profile (`monitor.importers.profiles`), detected from the names unless one is named.
Parsers never touch a store: `monitor.importers.store_writer.write_run` writes an ImportedRun
atomically and idempotently. `import_source` does both; JSONL and CSV logs it imports chunk by
chunk (`table_import`), so their memory is bounded by a chunk, not by the file.

Formats: `wandb-file` (a `.wandb` file or offline run folder), `wandb-history-folder` (a W&B run
folder with its history as `wandb-history.jsonl`, as wandb before 0.10 wrote it), `wandb-api`
(`wandb://entity/project/run_id`), `wandb-csv` (W&B CSV exports), `lm-eval-json` (lm-eval results,
a file or a folder of them), `tensorboard` (event files or a log folder), `jsonl`, `csv` and `parquet`
(generic metric logs; `csv` reads a Lightning CSVLogger folder too), `mlflow` (an MLflow file-store run folder), `mlflow-db` (MLflow's SQLite database store), `mlflow-server` (a run's page on an MLflow tracking server, `http(s)://.../#/experiments/<e>/runs/<id>`), `hf-trainer-state` (the Hugging Face Trainer's `trainer_state.json`, a
checkpoint folder or an output folder of them), `llmc-log` (llm.c, modded-nanogpt, nanoGPT and torchtune text logs), `megatron-log`
(the stdout logs of Megatron-LM, Megatron-DeepSpeed, GPT-NeoX and nanotron), `fairseq-log` (fairseq's and
metaseq's stdout logs), `composer-log` (MosaicML Composer's console log, llm-foundry's), `olmo-core-log` (an OLMo-core run's console log),
`torchtitan-log` and `maxtext-log` (torchtitan's and MaxText's console logs), `clu-log` (the console
log of a JAX trainer writing through CLU's LoggingWriter: Flax's examples), `levanter-log` (a Levanter
job's console log, its JSON logger tracker's lines), `hf-console-log`
(the Hugging Face Trainer's console output, its progress bar and logged dicts),
`deepspeed-csv` (the folder DeepSpeed's CSV monitor writes), `lingua` (the dump folder of a lingua job),
`dvclive` (a DVCLive folder: a metric's history a TSV file),
`fairseq2` (the `metrics/` folder of a fairseq2 job's output directory),
`tensorboard-export` (scalars downloaded from TensorBoard's page, a file or a folder of them),
`gapwatch-export` (what `gapwatch export` writes: CSV, JSON Lines or Parquet). A source on an object
store (`gs://`, `s3://`, ...) is copied into a local folder first (`remote_copy`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from monitor.errors import GapwatchError

from . import clu_log, composer_log, deepspeed_csv, dvclive_folder, fairseq2_metrics, fairseq_log, generic_table, hf_console_log, hf_trainer_state, levanter_log, lingua_dump, lm_eval_json, maxtext_log, megatron_log, mlflow_db, mlflow_runs, mlflow_server, olmo_core_log, remote_copy, run_export, sample_steps, tensorboard_events, tensorboard_export, text_logs, torchtitan_log, wandb
from .formats import Format, Probe, ReadOptions
from .imported_run import ImportedRun, empty_scalars, scalars_frame
from .input_checks import check_source
from .meaning import cadences, mapping_rows, pick_profile
from .normalize import apply_profile
from .profiles import Profile, get_profile, marked_step_key
from .step_axis import WANDB_ROW_KEY, choose_step_key, is_wandb_history, on_trainer_step
from .wandb import api, csv_export, history_folder
from .wandb.history_sample import HistorySample

# Every format, in the order detection asks them (see `formats`): a folder holding a W&B run may
# hold TensorBoard files too (so may an MLflow run's artifacts), and a W&B export is a CSV before it is a generic one.
# A folder of CSV files is Lightning's CSVLogger's before it is DeepSpeed's, and DeepSpeed's before lm-eval's
# (which takes any folder with a JSON file in it). TensorBoard's downloads are CSV and JSON files before they
# are generic CSV logs or lm-eval results, and a lingua folder holds JSON Lines files. A fairseq2 output
# directory holds its TensorBoard files (tb/) beside the JSON Lines it is read from.
FORMATS = [api.FORMAT, mlflow_server.FORMAT, wandb.RUN_FILE, history_folder.FORMAT, mlflow_runs.FORMAT, mlflow_db.FORMAT, fairseq2_metrics.FORMAT, tensorboard_events.FORMAT, tensorboard_export.FORMAT, run_export.FORMAT,
           csv_export.FORMAT, generic_table.CSV, deepspeed_csv.FORMAT, generic_table.PARQUET, hf_trainer_state.FORMAT, lingua_dump.FORMAT, dvclive_folder.FORMAT, lm_eval_json.FORMAT, fairseq_log.FORMAT,
           composer_log.FORMAT, olmo_core_log.FORMAT, text_logs.FORMAT,
           megatron_log.FORMAT, torchtitan_log.FORMAT, maxtext_log.FORMAT, clu_log.FORMAT, levanter_log.FORMAT, hf_console_log.FORMAT, generic_table.JSONL]


def get_format(name: str) -> Format:
    """The registered format called `name`."""
    for form in FORMATS:
        if form.name == name:
            return form
    raise GapwatchError(f"unknown import format {name!r}; known: "
                        f"{', '.join(f.name for f in FORMATS)}")


def detect_format(source: str | os.PathLike) -> str:
    """The name of the first format that recognizes a source: by URL scheme, else by the file's
    or folder's name and first bytes."""
    for form in FORMATS:
        if form.url_scheme and str(source).startswith(form.url_scheme):
            return form.name
    probe = Probe.of(source)
    found = _recognized(probe)
    if found is not None:
        return found
    if not probe.is_dir:
        raise GapwatchError(f"{source}: unrecognised format (no importer reads this file; --format names one)")
    inside = _importable_files(probe.path)
    hint = (f"; files in it that import on their own: {', '.join(inside)}" if inside else "")
    raise GapwatchError(f"{source}: unrecognised format (no importer reads this folder as one run{hint})")


def _recognized(probe: Probe) -> str | None:
    return next((form.name for form in FORMATS if form.recognize(probe)), None)


# Entries of a folder looked at for the files in it that import, and the most of them named.
_FOLDER_ENTRIES_LOOKED_AT = 200
_FILES_NAMED = 5


def _importable_files(folder: Path) -> list[str]:
    """`name (format)` of the files directly in an unrecognised folder that a format reads."""
    named = []
    entries = sorted(folder.iterdir())[:_FOLDER_ENTRIES_LOOKED_AT]
    for path in (p for p in entries if p.is_file() and p.stat().st_size):
        try:
            fmt = _recognized(Probe.of(path))
        except GapwatchError:
            continue
        if fmt is not None:
            named.append(f"{path.name} ({fmt})")
        if len(named) == _FILES_NAMED:
            break
    return named


def load(source: str | os.PathLike, profile: str | Profile | None = None, *,
         fmt: str | None = None, tokens_per_step: float | None = None, step: int | None = None,
         profiles_file: str | os.PathLike | None = None, progress=None,
         api_config=None, step_key: str | None = None, source_run: str | None = None
         ) -> ImportedRun:
    """Read one source into an ImportedRun with gapwatch metric keys.

    profile: a profile name or object; None detects it from the source's metric names.
    fmt: force a format (a name in FORMATS) instead of detecting it.
    tokens_per_step: tokens in one optimizer step, when the source does not say.
    step: the step of an lm-eval results file whose model_args name no revision.
    profiles_file: the user's profile YAML (default: $GAPWATCH_PROFILES or the config dir).
    progress: called with (done, total) while a large source is read.
    api_config: how a wandb:// source's server is reached (wandb.api.ApiConfig).
    step_key: the source key that holds the trainer's step (default: the profile's, else the
        first of `step_axis.STEP_KEYS` the run logs).
    source_run: which run of a source that holds several (a W&B panel export's column prefix, a
        folder of TensorBoard downloads' run).
    """
    if remote_copy.is_remote(source):
        source = remote_copy.local_copy(str(source))
    form = get_format(fmt or detect_format(source))
    if not form.url_scheme:
        check_source(source)
    named = get_profile(profile, profiles_file) if isinstance(profile, str) and profile else profile
    if form.own_keys and not named:
        named = get_profile(form.profile)
    step_key = step_key or (named.step_key if isinstance(named, Profile) else None)
    # W&B history saved as JSON Lines or Parquet: read on W&B's row counter, then on the trainer's step.
    wandb_rows = form.streamed and is_wandb_history(source, form.name)
    raw = form.read(source, ReadOptions(
        tokens_per_step=tokens_per_step, step=step, progress=progress, api_config=api_config,
        step_key=WANDB_ROW_KEY if wandb_rows else step_key, source_run=source_run))
    if tokens_per_step is not None:
        raw.tokens_per_step = float(tokens_per_step)
    if not form.url_scheme:
        # The source's identity in the store: the same file wherever it is imported from.
        raw.source = str(Path(raw.source or source).resolve())
    band = None
    if form is csv_export.FORMAT:
        from .wandb.panel_band import split_band

        raw, band = split_band(raw)
    if wandb_rows:
        _check_history_rows(raw)
    names = [str(n) for n in raw.scalars["key"].unique().tolist()]
    axis = None
    # A source with steps of its own is put on a trainer's step only when one is named or marked.
    asked = form.steps == "asked" and (step_key or marked_step_key(names))
    if form.steps == "rows" or wandb_rows or asked:
        axis = choose_step_key(names, step_key, raw.source, raw.step_key)
        if axis is not None:
            logged = raw.scalars.loc[raw.scalars["key"] == axis, "value"]
            axis_rows = pd.DataFrame({"key": axis, "step": logged.to_numpy(dtype="int64")})
            raw = on_trainer_step(raw, axis)
            names.remove(axis)
    raw = sample_steps.on_steps(raw)
    cadence = cadences(raw.scalars)
    if axis is not None:
        cadence.update(cadences(axis_rows))  # the step key's own values: the steps it logged
    chosen, evidence = pick_profile(named, names, cadence, prefer=raw.profile or form.profile,
                                    user_file=profiles_file)
    run = apply_profile(raw, chosen)
    declared = axis is not None and axis == raw.step_key and axis != step_key
    run.mapping = mapping_rows(names, run.key_map, chosen, evidence, cadence, axis,
                               "the trainer's step (declared by define_metric)" if declared
                               else "the trainer's step")
    if band is not None:
        from .wandb.panel_band import attach_band

        run = attach_band(run, band, chosen)
    return run


def _check_history_rows(raw: ImportedRun) -> None:
    """A W&B history's rows, read whole: refused where `_step` goes back, noted where they look
    like a sample (wandb/history_sample.py)."""
    history = HistorySample(raw.source)
    history.add(raw.scalars["step"].to_numpy())
    raw.notes += [n for n in [history.note()] if n]


def import_source(store, name: str | None, source: str | os.PathLike, profile: str | Profile | None = None,
                  *, fmt: str | None = None, tokens_per_step: float | None = None,
                  step: int | None = None, profiles_file: str | os.PathLike | None = None,
                  api_config=None, project: str | None = None, reference_of: str | None = None,
                  progress=None, step_key: str | None = None, source_run: str | None = None):
    """Read `source` and write it into `store` as run `name`: (WriteResult, ImportSummary).

    name: None stores it under the name the source gives it (`ImportedRun.name_hint`: a W&B run's
    display name, a TensorBoard run's folder, a file's stem), which `WriteResult.run` reports.
    Other arguments as for `load` and `store_writer.write_run`. progress: called with (phase, done,
    total): phase "importing" (bytes of a streamed log), else "reading" then "writing" (rows).
    The summary's `mapping` lists what each source name became (`meaning.mapping_rows`).
    """
    from .store_writer import write_run
    from .table_import import ImportSummary, import_table

    if remote_copy.is_remote(source):
        source = remote_copy.local_copy(str(source))
    fmt = fmt or detect_format(source)
    if get_format(fmt).streamed or is_streamed_export(fmt, source, source_run):
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
               step_key=step_key, source_run=source_run)
    if run.scalars.empty:
        raise GapwatchError(f"{run.source}: no values to import ({'; '.join(run.notes) or 'none logged'})")
    name = name or run.name_hint
    if not name:
        raise GapwatchError(f"{run.source} does not name its run: give it a name (--run NAME)")
    result = write_run(store, name, run, project=project, reference_of=reference_of,
                       progress=writing)
    return result, ImportSummary(run.source, run.profile, run.keys, list(run.notes), run.live,
                                 crashed=run.crashed, mapping=run.mapping)


def is_streamed_export(fmt: str, source, source_run: str | None = None) -> bool:
    """A W&B history export (`_step`, no run-name prefixes): imported chunk by chunk, as a generic
    log is (`wandb.csv_stream`)."""
    if fmt != "wandb-csv" or source_run is not None:
        return False
    from .wandb.csv_stream import streamable

    return streamable(source)


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
    "get_format",
    "scalars_frame",
    "Format",
    "FORMATS",
]
