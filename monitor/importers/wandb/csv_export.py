"""W&B CSV exports: wide tables, one row per logged step, one column per metric.

Two layouts exist and both are read:
* a run's history export: `_step` plus one column per metric name;
* a chart panel export: its x axis (`Step`, or the step metric the chart was drawn against, such as
  `train/global_step`) plus `<run name> - <metric>` columns, each optionally with
  `__MIN`/`__MAX` companions (the min and max of the points W&B merged into one when it sampled the
  chart), read under their own names and kept as the metric's band (`panel_band`). A panel that
  showed several runs holds each under its own prefix: one run is read at a time (`run=`, one of
  `panel_runs`), only the rows where it has a value.

A W&B *runs table* export (one row per run: `Name`, `State`, `Created`, ... and final values) is
not a history: `runs_table_error` says so in one line.

Some exports have no step column but are keyed by cumulative tokens (OLMo's
`throughput/total_tokens`). Then step = tokens / tokens-per-step, with tokens-per-step from a
constant `batch_size_in_tokens` column or the caller; a non-integral quotient is an error.

Rules:
* An empty cell is "not logged at that step"; `NaN`, `inf`, `Infinity` are logged values.
* A column whose non-empty cells are all text (W&B media, tables) is not a scalar: left out, noted.
  A text cell in a numeric column is an error naming the line and column.
* W&B history steps only grow, so a step lower than or equal to the row before it means the file
  was damaged or concatenated: an error naming the line (not a restart).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from ..formats import Format, Probe
from ..imported_run import ImportedRun, scalars_frame
from ..input_checks import csv_header, repeated_name, shown, unfit_literal, unnamed_columns
from ..step_axis import WANDB_ROW_KEY
from .history_sample import HistorySample, went_back


STEP_COLUMNS = ("_step", "Step", "step")
# Cumulative-token columns an export may be keyed by, and the per-step batch column beside them.
TOKEN_COLUMNS = ("throughput/total_tokens", "throughput/total tokens")
BATCH_TOKEN_COLUMNS = ("batch_size_in_tokens",)
_SAMPLING_SUFFIX = re.compile(r"__(MIN|MAX)$")
_PANEL_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+)$")
# Tokens / batch size must land on an integer step to within float rounding of the export.
_STEP_ROUNDING_TOL = 1e-6


# Columns only W&B exports have: a plain `step` column is any trainer's CSV (generic_table).
_WANDB_STEP_COLUMNS = ("_step", "Step")


def separator(path: Path) -> str:
    return "\t" if path.suffix.lower() == ".tsv" else ","


def sniff(header: list[str]) -> bool:
    cols = set(header)
    return bool(cols & set(_WANDB_STEP_COLUMNS)) or bool(cols & set(TOKEN_COLUMNS)) or panel_x(header) is not None


def panel_x(header: list[str]) -> str | None:
    """The x axis of a chart panel export: its first column, where every other one is a
    `<run> - <metric>` column (`Step`, or the metric the chart was drawn against, such as
    `train/global_step`); None for any other header."""
    first, *others = header or [""]
    if not others or _PANEL_COLUMN.match(first) or not all(_PANEL_COLUMN.match(c) for c in others):
        return None
    return first


# Columns of W&B's runs-table export (the project page's table, "Export as CSV").
RUNS_TABLE_COLUMNS = ("Name", "State", "Notes", "User", "Tags", "Created", "Runtime", "Sweep", "ID")


def recognize(probe: Probe) -> bool:
    """A CSV file with W&B's step or token columns; a W&B runs table is refused."""
    if probe.suffix not in (".csv", ".tsv"):
        return False
    try:
        header = next(csv.reader([probe.head.split("\n", 1)[0]], delimiter=separator(probe.path)), [])
    except csv.Error as exc:
        raise GapwatchError(f"{probe.path}: not a valid CSV file ({exc})") from None
    header = [h.strip() for h in header]
    if is_runs_table(header):
        raise runs_table_error(probe.path)
    return sniff(header)


def is_runs_table(header: list[str]) -> bool:
    cols = set(header)
    return ("Name" in cols and len(cols & set(RUNS_TABLE_COLUMNS)) >= 3
            and not cols & set(STEP_COLUMNS))


def runs_table_error(path) -> GapwatchError:
    return GapwatchError(
        f"{path}: a W&B runs table (one row per run with its final values, no steps), not a "
        "run's history: export a history instead (a chart panel's menu: Export > CSV, or "
        "wandb.Api().run(PATH).history()), or import the run itself as wandb://entity/project/id"
    )


def panel_runs(path: str | Path) -> list[str]:
    """The run names of a chart panel export, in column order ([] for any other CSV)."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh, delimiter=separator(path)), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    header = [h.strip() for h in header]
    x = panel_x(header)
    if x is None:
        return []
    matches = [_PANEL_COLUMN.match(c) for c in header if c != x]
    if not matches or not all(matches):
        return []
    return list(dict.fromkeys(m.group("run") for m in matches))


def parse_wandb_csv(path: str | Path, tokens_per_step: float | None = None,
                    step_column: str | None = None, run: str | None = None) -> ImportedRun:
    path = Path(path)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[],
                            skipinitialspace=True, sep=separator(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise GapwatchError(f"{path}: cannot read: {exc}") from None
    except (pd.errors.ParserError, csv.Error) as exc:
        raise GapwatchError(f"{path}: not a valid CSV file: {' '.join(str(exc).split())}") from None
    except pd.errors.EmptyDataError:
        raise GapwatchError(f"{path}: empty file") from None
    # pandas renames a repeated column `name.1` and an unnamed one `Unnamed: N`: look at the
    # header as written.
    written = csv_header(path, separator(path))
    dup = repeated_name(written)
    if dup is not None:
        raise GapwatchError(f"{path}: column {shown(dup)} appears twice")
    if table.empty:
        raise GapwatchError(f"{path}: a header and no rows: no history to import")
    unnamed, note = unnamed_columns(path, written)
    table = table.drop(columns=[table.columns[i] for i in unnamed if i < len(table.columns)])
    notes: list[str] = [note] if note else []
    name_hint = path.stem
    if is_runs_table(list(table.columns)):
        raise runs_table_error(path)
    table, run_name = _strip_panel_prefixes(table, path, run)
    if run_name:
        name_hint = run_name

    numeric: dict[str, np.ndarray] = {}
    logged: dict[str, np.ndarray] = {}
    for col in table.columns:
        cells = table[col]
        present = cells.str.strip() != ""
        values = pd.to_numeric(cells.where(present, "nan"), errors="coerce").to_numpy("float64")
        bad = present.to_numpy() & np.isnan(values) & ~_nan_literal(cells)
        if bad.any() and bad.sum() == present.sum():
            notes.append(f"{path}: column {shown(col)} holds text, not numbers: left out")
            continue
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise GapwatchError(f"{path}: line {row + 2}: column {shown(col)}: "
                                f"{shown(cells.iloc[row])} is not a number")
        for row in np.flatnonzero(np.isinf(values)).tolist():
            if unfit_literal(cells.iloc[row]):
                raise GapwatchError(f"{path}: line {row + 2}: column {shown(col)}: the number "
                                    f"{shown(cells.iloc[row])} does not fit a 64-bit float")
        numeric[col] = values
        logged[col] = present.to_numpy()

    steps, step_col, derived_from = _steps(path, table, numeric, logged, tokens_per_step,
                                           step_column)
    if derived_from:
        notes.append(f"{path}: steps derived from {derived_from}")
    _check_increasing(path, steps)
    if step_col == WANDB_ROW_KEY:
        sample = HistorySample(str(path))
        sample.add(steps)
        notes += [n for n in [sample.note()] if n]

    keys, step_list, values = [], [], []
    for col, vals in numeric.items():
        if col == step_col:
            continue
        mask = logged[col]
        keys.append(np.full(int(mask.sum()), col, dtype=object))
        step_list.append(steps[mask])
        values.append(vals[mask])
    if not keys:
        raise GapwatchError(f"{path}: no metric columns besides the step")
    if not sum(len(k) for k in keys):
        raise GapwatchError(f"{path}: every metric cell is empty: no history to import")
    frame = scalars_frame(np.concatenate(step_list), np.concatenate(keys),
                          np.concatenate(values))
    # Row-major order: the order the run logged them.
    frame = frame.sort_values("step", kind="stable").reset_index(drop=True)
    return ImportedRun(name_hint=name_hint, scalars=frame, source=str(path), notes=notes,
                       tokens_per_step=tokens_per_step)


def _nan_literal(cells: pd.Series) -> np.ndarray:
    return cells.str.strip().str.lower().isin(["nan", "-nan", "+nan"]).to_numpy()


def _strip_panel_prefixes(table: pd.DataFrame, path: Path,
                          run: str | None) -> tuple[pd.DataFrame, str | None]:
    """`<run> - <metric>` panel columns -> `<metric>`, of the one run the export holds or of
    `run` (one of them), on the rows where that run has a value."""
    x = panel_x(list(table.columns))
    others = [c for c in table.columns if c != x]
    matches = [_PANEL_COLUMN.match(c) for c in others]
    if x is None:
        if run is not None:
            raise GapwatchError(f"{path}: not a W&B panel export of several runs: "
                                "import it without naming one of its runs")
        return table, None
    runs = list(dict.fromkeys(m.group("run") for m in matches))
    if run is None and len(runs) > 1:
        raise GapwatchError(
            f"{path}: a W&B panel export of {len(runs)} runs ({', '.join(runs[:4])}"
            f"{', ...' if len(runs) > 4 else ''}): name one with --run NAME, or import each "
            "with --all-runs"
        )
    run = runs[0] if run is None else run
    if run not in runs:
        raise GapwatchError(f"{path}: no run {run!r} in this panel export; it holds "
                            + ", ".join(runs))
    mine = [c for c, m in zip(others, matches) if m.group("run") == run]
    steps = [x]
    values = [c for c in mine if not _SAMPLING_SUFFIX.search(c)]
    has_value = (table[values].apply(lambda col: col.str.strip() != "")).any(axis=1)
    table = table.loc[has_value, steps + mine].reset_index(drop=True)
    renamed = {c: _PANEL_COLUMN.match(c).group("metric") for c in mine}
    if x not in STEP_COLUMNS and x not in TOKEN_COLUMNS:  # tokens: the steps come from them below
        _check_x_is_steps(path, x, table[x])
        renamed[x] = "Step"  # the chart was drawn against the trainer's step: its x is the step
    return table.rename(columns=renamed), run


def _check_x_is_steps(path: Path, x: str, cells: pd.Series) -> None:
    """A panel drawn against a metric of its own has steps where that metric is the trainer's
    step (`train/global_step`); against time (`Relative Time (Wall)`), epochs or samples, none."""
    from ..step_axis import STEP_KEYS, whole_steps

    if x not in STEP_KEYS:
        raise GapwatchError(f"{path}: a chart exported against {shown(x)}, which is not the trainer's step "
                            f"({', '.join(STEP_KEYS)}): export the chart against Step or the trainer's step")
    values = pd.to_numeric(cells.str.strip(), errors="coerce").to_numpy(dtype=float)
    bad = ~whole_steps(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise GapwatchError(f"{path}: a chart exported against {shown(x)}, which is no step count (line {row + 2}: "
                            f"{shown(cells.iloc[row])}): export the chart against Step or the trainer's step")


def _steps(path, table, numeric, logged, tokens_per_step, step_column):
    """The step of every row, the step column's name (None if derived) and what it came from."""
    candidates = [step_column] if step_column else list(STEP_COLUMNS)
    for col in candidates:
        if col and col in table.columns:
            if col not in numeric:
                raise GapwatchError(f"{path}: step column {col!r} holds text, not numbers")
            vals, present = numeric[col], logged[col]
            missing = ~present | ~np.isfinite(vals)
            if missing.any():
                row = int(np.flatnonzero(missing)[0])
                raise GapwatchError(f"{path}: line {row + 2}: no step in column {col!r}")
            if not np.all(vals == np.round(vals)):
                row = int(np.flatnonzero(vals != np.round(vals))[0])
                raise GapwatchError(
                    f"{path}: line {row + 2}: step {vals[row]!r} is not a whole number"
                )
            return _exact_steps(path, table[col], vals), col, None
    if step_column:
        raise GapwatchError(f"{path}: no column {step_column!r} to take steps from")
    token_col = next((c for c in TOKEN_COLUMNS if c in numeric), None)
    if token_col is None:
        raise GapwatchError(
            f"{path}: no step column (expected one of {', '.join(STEP_COLUMNS)}) "
            f"and no token column ({', '.join(TOKEN_COLUMNS)})"
        )
    batch = tokens_per_step
    batch_col = next((c for c in BATCH_TOKEN_COLUMNS if c in numeric), None)
    if batch is None and batch_col is not None:
        sizes = np.unique(numeric[batch_col][logged[batch_col]])
        if len(sizes) == 1 and sizes[0] > 0:
            batch = float(sizes[0])
    if batch is None:
        raise GapwatchError(
            f"{path}: keyed by {token_col!r} with no step column and no constant "
            "batch_size_in_tokens column: give tokens per step (--tokens-per-step)"
        )
    tokens = numeric[token_col]
    missing = ~logged[token_col] | ~np.isfinite(tokens)
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise GapwatchError(f"{path}: line {row + 2}: no value in step column {token_col!r}")
    exact = tokens / batch
    steps = np.round(exact)
    off = np.abs(exact - steps) > _STEP_ROUNDING_TOL * np.maximum(1.0, steps)
    if off.any():
        row = int(np.flatnonzero(off)[0])
        raise GapwatchError(
            f"{path}: line {row + 2}: {token_col} = {tokens[row]:.0f} is not a whole number "
            f"of steps of {batch:.0f} tokens"
        )
    _check_range(path, steps)
    return steps.astype("int64"), None, f"{token_col} / {batch:.0f} tokens per step"


def _exact_steps(path: Path, cells: pd.Series, vals: np.ndarray) -> np.ndarray:
    """The steps as written (a float holds steps exactly only up to 2**53)."""
    _check_range(path, vals)
    exact = pd.to_numeric(cells.str.strip(), errors="coerce")
    return exact.to_numpy("int64") if exact.dtype == np.int64 else vals.astype("int64")


def _check_range(path: Path, steps: np.ndarray) -> None:
    out = np.flatnonzero((steps < 0) | (steps >= 2.0**63))
    if len(out):
        row = int(out[0])
        raise GapwatchError(f"{path}: line {row + 2}: step {steps[row]:.0f} is outside the steps a "
                            f"store keeps (0 to {MAX_STEP})")


def _check_increasing(path: Path, steps: np.ndarray) -> None:
    if len(steps) < 2:
        return
    back = np.flatnonzero(np.diff(steps) <= 0)
    if len(back):
        i = int(back[0]) + 1
        raise GapwatchError(went_back(f"{path}: line {i + 2}", steps[i], steps[i - 1]))


FORMAT = Format("wandb-csv", lambda source, options: parse_wandb_csv(
    source, tokens_per_step=options.tokens_per_step, run=options.source_run), recognize, runs=panel_runs, steps="rows")
