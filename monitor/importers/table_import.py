"""Importing a JSONL or CSV log into a store chunk by chunk: parse, map names, write, repeat.

Memory is bounded by a chunk (`table_stream.CHUNK_ROWS` rows), not by the file, and the stored run
is the one `load` + `write_run` would store: the same rows, attempts, events, run fields and import
bookkeeping (row count and fingerprint), in one transaction.

The profile, when none is named, is detected from the names of the first chunk. The file's whole
set of names decides it, as it always did, so once every chunk is read the choice is checked
against all the names; in the rare file whose later names change the choice (or make the first
choice map two names onto one key), the transaction is rolled back and the file imported again
with the profile all its names choose.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from monitor.errors import GapwatchError

from . import freed_memory
from .imported_run import ImportedRun
from .meaning import CadenceTally, ChunkCadence, contradictions, mapping_rows, with_evidence
from .normalize import NameMapper, TokensPerStep
from .profiles import Profile, detect_profile, get_profile
from .read_ahead import read_ahead
from .sample_steps import SampleSteps, SpacingChanged
from .step_axis import WANDB_ROW_KEY, StepAxisInParts, is_wandb_history
from .store_writer import ImportWriter, WriteResult
from .table_stream import TableStream
from .wandb.history_sample import HistorySample


@dataclass
class ImportSummary:
    """What a person is told about an import (the written run is in the store)."""

    source: str
    profile: str | None
    keys: list[str]
    notes: list[str] = field(default_factory=list)
    live: bool = False
    crashed: bool = False
    mapping: list[dict] = field(default_factory=list)


class _ProfileRevised(Exception):
    def __init__(self, profile: Profile) -> None:
        super().__init__(profile.name)
        self.profile = profile


def import_table(store, name: str | None, source: str | os.PathLike, fmt: str,
                 profile: str | Profile | None = None, *, tokens_per_step: float | None = None,
                 profiles_file: str | os.PathLike | None = None, project: str | None = None,
                 reference_of: str | None = None, progress=None,
                 step_key: str | None = None) -> tuple[WriteResult, ImportSummary]:
    """Import a `jsonl` or `csv` log, or a W&B history export (`wandb-csv` with a `_step`
    column), as run `name` (None: the name the file gives it; arguments as for `load` and
    `write_run`).

    progress: called with (bytes_read, bytes_total) after each chunk.
    step_key: the column that holds the step (default: the profile's, else `generic_rows`').
    """
    named = get_profile(profile, profiles_file) if isinstance(profile, str) and profile else profile
    step_key = step_key or (named.step_key if isinstance(named, Profile) else None)
    args = dict(store=store, name=name, source=source, fmt=fmt, step_key=step_key,
                tokens_per_step=tokens_per_step, profiles_file=profiles_file, project=project,
                reference_of=reference_of, progress=progress)
    infer = not named  # a profile the user named is taken at its word (as `load` does)
    fixed, kept = named or None, ""
    # Each pass that meets a surprise settles it for the passes after (the profile all names
    # choose; DeepSpeed's samples kept), so there are at most three.
    for _ in range(2):
        try:
            return _import_once(fixed=fixed, infer=infer, samples_kept=kept, **args)
        except _ProfileRevised as revised:
            fixed = revised.profile
        except SpacingChanged as changed:
            kept = changed.why
    return _import_once(fixed=fixed, infer=infer, samples_kept=kept, **args)


def _detect(names, profiles_file, cadence) -> Profile:
    names = list(names)
    return detect_profile(names, profiles_file,
                          against=lambda p: contradictions(p, names, cadence))


def _read(stream, axis: StepAxisInParts | None, samples: SampleSteps, source_id: str,
          history: HistorySample) -> Iterator[tuple[pd.DataFrame, ChunkCadence]]:
    """The stream's chunks on the trainer's step axis (DeepSpeed's series by samples on steps),
    each with its share of the cadences: the work on a chunk that does not wait for the chunks
    before it to be written. A W&B history's rows (`axis` given) are watched for a sample's
    marks on the way."""
    for raw in stream.chunks():
        if axis is not None:
            history.add(raw["step"].to_numpy())
            raw = axis.apply(ImportedRun(name_hint="", scalars=raw, source=source_id)).scalars
        raw = samples.place(raw)
        if len(raw):
            yield raw, ChunkCadence.of(raw)
    rest = samples.rest()
    if rest is not None:
        yield rest, ChunkCadence.of(rest)


def _import_once(*, store, name, source, fmt, step_key, fixed: Profile | None, infer: bool,
                 samples_kept: str, tokens_per_step, profiles_file, project, reference_of, progress):
    if fmt == "wandb-csv":
        from .wandb.csv_stream import WandbCsvStream

        stream = WandbCsvStream(source, step_key=step_key)
    axis = None
    if is_wandb_history(source, fmt):
        # W&B history as JSON Lines or Parquet: W&B's row counter, then the trainer's step (step_axis).
        stream = TableStream(source, fmt, step_key=WANDB_ROW_KEY)
        axis = StepAxisInParts(step_key)
    elif fmt != "wandb-csv":
        stream = TableStream(source, fmt, step_key=step_key)
    # The same file wherever it is imported from (a Lightning version folder is its metrics.csv).
    source_id = str(Path(stream.source).resolve())
    names: dict[str, None] = {}
    mapper: NameMapper | None = None
    tokens = TokensPerStep()
    tally = CadenceTally()
    collision: GapwatchError | None = None
    # closing(): an error here stops the reader at once, not when the traceback lets go of it.
    held = freed_memory.HeldMemory()
    samples = SampleSteps(keep=samples_kept)
    history = HistorySample(source_id)
    with store.atomic(), closing(read_ahead(_read(stream, axis, samples, source_id, history))) as chunks:
        writer = ImportWriter(store, name or stream.name_hint, source_id)
        for raw, cadence in chunks:
            if progress is not None:
                progress(stream.bytes_read, stream.bytes_total)
            fresh = [n for n in cadence.names if n not in names]
            tally.add(cadence)
            names.update(dict.fromkeys(fresh))
            if collision is not None:
                continue  # only the names matter now
            if mapper is None:
                # The first chunk's cadences stand for the file's (names first seen later are
                # mapped by the profile alone).
                base = fixed or _detect(names, profiles_file, tally.cadences())
                chosen, evidence = (with_evidence(base, list(names), tally.cadences())
                                    if infer else (base, {}))
                mapper = NameMapper(chosen, source_id)
                writer.start(project=project, profile=mapper.profile.name, config=dict(stream.config),
                             tokens_per_step=tokens_per_step)
            try:
                mapper.add(fresh)
            except GapwatchError as exc:
                if fixed is not None:
                    raise
                collision = exc
                continue
            mapped = mapper.apply(raw)
            tokens.add(mapped)
            writer.add(mapped)
            del raw, mapped
            held.settle()
        if fixed is None:
            chosen = _detect(names, profiles_file, tally.cadences())
            if chosen != base:
                raise _ProfileRevised(chosen)
            if collision is not None:
                raise collision
        notes = list(stream.notes)
        dropped = mapper.dropped_note()
        notes += [n for n in (samples.note(source_id), history.note(), dropped,
                              mapper.unmeasured_note()) if n]
        result = writer.finish(events=samples.events(stream.events), reference_of=reference_of,
                               tokens_per_step=tokens_per_step or tokens.result({}))
        if not result.rows_total:  # a run of no history is not imported (rolled back)
            raise GapwatchError(f"{source_id}: no values to import ({dropped})")
    mapping = mapping_rows(list(names), mapper.key_map, mapper.profile, evidence,
                           tally.cadences(), axis.key if axis is not None else None)
    return result, ImportSummary(source_id, mapper.profile.name, mapper.keys, notes,
                                 mapping=mapping)
