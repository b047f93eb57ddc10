"""Decoding W&B `Record` protobufs exactly, with wandb's own classes (wandb.proto.wandb_internal).

Used for the records the vectorised reader (`wire`) does not take (nested dicts, typed values,
records split over blocks, any unexpected shape) and for the few run, config, metric (a
`define_metric`), exit and header records. Also the value conversion both paths share: JSON text -> float64.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError
from wandb.proto import wandb_internal_pb2 as wpb

from monitor.errors import GapwatchError

from .step_metric import StepDeclaration

NESTED_SEP = "."  # wandb shows a nested dict {"a": {"b": 1}} as the metric "a.b"
# JSON numbers and the non-finite spellings wandb writes; anything else is decoded by json.loads.
_NUMBER = r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$|^(?:NaN|-?Infinity)$"


@dataclass
class ExactRecords:
    """What a set of exactly decoded records holds (record numbers are positions in the file)."""

    history: list[tuple[int, str, str]] = field(default_factory=list)  # record, name, json
    summary: list[tuple[int, str, str | None]] = field(default_factory=list)  # None: removed
    config_updates: list[tuple[tuple[str, ...], object]] = field(default_factory=list)
    config_removes: list[tuple[str, ...]] = field(default_factory=list)
    runs: list = field(default_factory=list)  # wandb RunRecord messages
    step_declarations: list[StepDeclaration] = field(default_factory=list)  # define_metric(..., step_metric=)
    exit_code: int | None = None
    finished: bool = False
    producer: str | None = None


def decode_exact(payloads: list[tuple[int, bytes]], source: str) -> ExactRecords:
    """Decode (record number, payload) pairs one by one, in order."""
    out = ExactRecords()
    for number, payload in payloads:
        rec = wpb.Record()
        try:
            rec.ParseFromString(payload)
        except DecodeError:
            raise GapwatchError(
                f"{source}: record {number + 1}: not a W&B record (cannot be decoded)"
            ) from None
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            for item in rec.history.item:
                out.history.append((number, _name(item), _item_json(item)))
        elif kind == "summary":
            for item in rec.summary.update:
                out.summary.append((number, _name(item), item.value_json))
            for item in rec.summary.remove:
                out.summary.append((number, _name(item), None))
        elif kind == "run":
            out.runs.append(rec.run)
            for item in rec.run.config.update:
                out.config_updates.append((_parts(item), _json_or_text(item.value_json)))
        elif kind == "config":
            for item in rec.config.update:
                out.config_updates.append((_parts(item), _json_or_text(item.value_json)))
            for item in rec.config.remove:
                out.config_removes.append(_parts(item))
        elif kind == "metric" and rec.metric.step_metric:
            m = rec.metric
            out.step_declarations.append(StepDeclaration(m.glob_name or m.name, bool(m.glob_name), m.step_metric))
        elif kind == "exit":
            out.exit_code = rec.exit.exit_code
            out.finished = True
        elif kind == "header":
            out.producer = rec.header.version_info.producer or out.producer
    return out


def _name(item) -> str:
    return NESTED_SEP.join(item.nested_key) if len(item.nested_key) else item.key


def _parts(item) -> tuple[str, ...]:
    return tuple(item.nested_key) if len(item.nested_key) else (item.key,)


def _item_json(item) -> str:
    """The JSON text of a history item, whichever of wandb's value fields holds it."""
    if item.value_json:
        return item.value_json
    which = item.WhichOneof("value")
    if which == "number":
        x = item.number
        if math.isfinite(x):
            return json.dumps(x)
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if which == "integer":
        return str(item.integer)
    if which == "boolean":
        return "true" if item.boolean else "false"
    if which == "text":
        return json.dumps(item.text)
    if which == "json":
        return item.json
    return "null"


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


class NotText(ValueError):
    """A value that is not UTF-8 text (protobuf rejects its record); `index` is its position."""

    def __init__(self, index: int) -> None:
        super().__init__(f"value {index} is not UTF-8 text")
        self.index = index


class UnfitValue(ValueError):
    """A number no 64-bit float holds (`1e309`, 400 digits); `index` is its position."""

    def __init__(self, index: int, text: str) -> None:
        super().__init__(f"value {index} does not fit a float")
        self.index = index
        self.text = text


def to_float(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 of JSON value texts, and a mask of those that are not numbers (to leave out).

    Numbers (and NaN/Infinity) go through Arrow's cast in bulk; booleans become 1/0; strings,
    null, W&B media and histograms are not scalars. A number that overflows a float raises
    UnfitValue (Arrow's cast would make it infinity, which the run never logged)."""
    try:
        out = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
        skipped = np.zeros(len(values), dtype=bool)
    except pa.ArrowInvalid:
        out, skipped = _to_float_slowly(values)
    for i in np.flatnonzero(np.isinf(out)).tolist():
        text = values[i].as_py()
        text = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        if text.strip().lstrip("-") not in ("Infinity", "inf"):
            raise UnfitValue(i, text)
    return out, skipped


def _to_float_slowly(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    # Some value is not a number: plain strings, which every kernel takes.
    values = pc.cast(values, pa.large_string())
    numeric = pc.match_substring_regex(values, _NUMBER).to_numpy(zero_copy_only=False)
    out = np.full(len(values), np.nan)
    idx = np.flatnonzero(numeric)
    if len(idx):
        out[idx] = pc.cast(values.take(pa.array(idx)), pa.float64()).to_numpy(
            zero_copy_only=False)
    skipped = np.zeros(len(values), dtype=bool)
    raw = values.view(pa.large_binary())
    for i in np.flatnonzero(~numeric).tolist():
        try:
            text = raw[i].as_py().decode()
        except UnicodeDecodeError:
            raise NotText(i) from None
        parsed = json_scalar(text)
        if parsed is None:
            skipped[i] = True
        else:
            out[i] = parsed
    return out, skipped


def json_scalar(text: str | None) -> float | None:
    """A JSON value as a float if it is a number or a boolean; None for anything else."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf  # an integer beyond a float: to_float names it
    return None
