"""Parquet metric tables: a W&B run's history saved from pandas (`run.history().to_parquet(...)`),
the history files W&B keeps for each run, or any trainer's table of one step a row.

A table is read a batch of rows at a time (`batches`), so memory is bounded by a batch, and handed
to the same rules as a CSV or JSON Lines log (table_stream.py): a column a metric, the step from
the same step fields, null "not logged" and NaN a logged value. A struct column (a nested dict, as
`{"optim": {"lr": ...}}` is stored) is read as its fields, `optim/lr`; a column of text, lists or
other non-numbers is left out, its values counted in the import's note.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from monitor.errors import GapwatchError

from .generic_rows import NESTED_SEP
from .step_axis import whole_steps as step_values

SUFFIXES = (".parquet", ".pq")


def batches(path: Path, values: int) -> tuple[int, Iterator[pa.RecordBatch]]:
    """The table's row count (from its footer, for progress) and its rows, a batch of about
    `values` cells at a time; one clear error for a file that is not Parquet. Memory is bounded by
    one row group, as its writer sized it: a row group is decoded whole."""
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (OSError, pa.ArrowException) as exc:
        raise _unreadable(path, exc) from None
    rows = max(1, values // max(1, len(table.schema_arrow.names)))

    def read() -> Iterator[pa.RecordBatch]:
        try:
            yield from table.iter_batches(batch_size=rows, use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise _unreadable(path, exc) from None

    return table.metadata.num_rows, read()


def _unreadable(path: Path, exc: Exception) -> GapwatchError:
    return GapwatchError(f"{path}: not a readable Parquet file: {' '.join(str(exc).split())}")


def columns(batch: pa.RecordBatch) -> list[tuple[str, pa.Array]]:
    """(name, column) of every column, a struct's fields as `parent/field` (with the struct's own
    nulls), however deep."""
    out: list[tuple[str, pa.Array]] = []

    def walk(name: str, column: pa.Array) -> None:
        if pa.types.is_struct(column.type):
            for field, child in zip(column.type, column.flatten()):
                walk(f"{name}{NESTED_SEP}{field.name}", child)
        else:
            out.append((name, column))

    for name, column in zip(batch.schema.names, batch.columns):
        walk(name, column)
    return out


def is_numeric(column: pa.Array) -> bool:
    kind = column.type
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind)


def whole_steps(column: pa.Array) -> np.ndarray | None:
    """The steps as 64-bit integers when every cell holds one (step_axis.whole_steps); None
    otherwise (the row-by-row reading then says which row is wrong)."""
    if not is_numeric(column) or column.null_count or pa.types.is_null(column.type):
        return None
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64(), safe=False).to_numpy(zero_copy_only=False)  # exact, however large
    values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return values.astype(np.int64) if step_values(values).all() else None
