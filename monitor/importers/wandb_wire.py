"""A vectorised reader for the two record shapes that make up almost all of a `.wandb` file.

Why not just the protobuf library: it builds a Python object per record and per item, and at about
3 records and 20 items per logged step that costs more than the 4 us a step that a 1.4M-step
reference run allows (see bench/bench_importers.py). The protobuf runtime stays the reference:
everything this module does not positively recognise goes to wandb's own `Record` class
(`wandb_records`), and the tests check both give the same rows on files the real wandb wrote.

What is recognised, exactly as the protobuf wire format (and wandb 0.31) lays it out:

    Record        = [num: field 1 varint] then history (field 2) or summary (field 3) as the
                    record's last field
    HistoryRecord = item (field 1)* [step (field 2)]
    SummaryRecord = update (field 1)*
    item          = nested_key (field 2)+ or key (field 1), then value_json (field 16)

Records are decoded all at once, one field position at a time across every record (numpy
arrays of cursors), so the Python loop runs once per field position, not once per record. The
names and values are gathered into Arrow string arrays from (offset, length) pairs. An item whose
name is one nested-key part or a plain key is kept under that name; an item with several parts
is kept only when its name starts with `_` (wandb's own keys, which importers drop anyway); any
other shape (nested dicts logged by the user, typed values, removals, varints longer than the
data) marks the record `bad`, and the caller decodes it with the protobuf library instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

HISTORY_TAG = 0x12  # Record.history: field 2, wire type 2
SUMMARY_TAG = 0x1A  # Record.summary: field 3, wire type 2
_ITEM_TAG = 0x0A  # HistoryRecord.item / SummaryRecord.update: field 1, wire type 2
_STEP_TAG = 0x12  # HistoryRecord.step: field 2, wire type 2
_KEY_TAG = 0x0A  # item.key: field 1
_PART_TAG = 0x12  # item.nested_key: field 2
_VALUE_TAG = (0x82, 0x01)  # item.value_json: field 16, wire type 2 (a two-byte tag)
_UNDERSCORE = ord("_")


@dataclass
class Items:
    """The items of a set of records, in record order, as offsets into one byte buffer."""

    record: np.ndarray  # index (into the records given) of the record each item belongs to
    name_start: np.ndarray
    name_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    bad: np.ndarray  # indices of records this reader could not take: decode them exactly


def varint(data: np.ndarray, pos: np.ndarray, max_bytes: int):
    """(value, width, ok) of the varints starting at `pos`; ok is False when one is longer than
    `max_bytes` or runs past the data. One-byte varints (almost all lengths) take one pass."""
    n = len(data)
    inside = pos < n
    byte = data[np.where(inside, pos, 0)].astype(np.int64)
    value = byte & 0x7F
    width = np.ones(len(pos), dtype=np.int64)
    ok = inside.copy()
    longer = np.flatnonzero(inside & (byte >= 0x80))
    if len(longer):
        at = pos[longer]
        v = value[longer]
        w = np.zeros(len(longer), dtype=np.int64)
        open_ = np.arange(len(longer))  # varints whose last byte is not found yet
        for k in range(1, max_bytes):
            where = at[open_] + k
            within = where < n
            b = np.where(within, data[np.where(within, where, 0)], 0x80).astype(np.int64)
            v[open_] |= (b & 0x7F) << (7 * k)
            ends = within & (b < 0x80)
            w[open_[ends]] = k + 1
            open_ = open_[~ends & within]
            if not len(open_):
                break
        value[longer] = v
        width[longer] = w
        ok[longer] = w > 0
    return value, width, ok


def record_field_start(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Offset of each record's first field after `num` (its record-type field, in wandb's order)."""
    has_num = data[starts] == 0x08
    _, width, ok = varint(data, starts + 1, 10)
    return np.where(has_num & ok, starts + 1 + width, np.where(has_num, -1, starts))


def record_tags(data: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """The record-type tag of each record: one byte, or 256 * second + first for two-byte tags,
    -1 when unreadable."""
    pos = record_field_start(data, starts)
    ok = (pos >= 0) & (pos < stops)
    safe = np.where(ok, pos, 0)
    first = data[safe].astype(np.int64)
    second = data[np.minimum(safe + 1, len(data) - 1)].astype(np.int64)
    tag = np.where(first < 0x80, first, first + 256 * second)
    return np.where(ok, tag, -1)


def read_items(data: np.ndarray, starts: np.ndarray, stops: np.ndarray, tag: int) -> Items:
    """Items of records that are all history (tag 0x12) or all summary (tag 0x1a) records."""
    n = len(starts)
    bad = np.zeros(n, dtype=bool)
    field = record_field_start(data, starts)
    bad |= field < 0
    field = np.where(bad, starts, field)
    bad |= data[field] != tag
    sub_len, w, ok = varint(data, field + 1, 4)
    sub_start = field + 1 + w
    # The history/summary message must be the record's last field, so it ends where the record does.
    bad |= ~ok | (sub_start + sub_len != stops)

    rec_parts, start_parts, end_parts = [], [], []
    cur = np.where(bad, stops, sub_start)
    idx = np.arange(n)
    active = cur < stops
    while active.any():
        a = idx[active]
        pos = cur[a]
        ftag = data[pos]
        length, w, ok = varint(data, pos + 1, 4)
        body = pos + 1 + w
        end = body + length
        good = ok & (end <= stops[a])
        is_item = good & (ftag == _ITEM_TAG)
        # A history record's `step` field is skipped; anything else is a shape we do not take.
        is_step = good & (ftag == _STEP_TAG) & (tag == HISTORY_TAG)
        wrong = ~(is_item | is_step)
        bad[a[wrong]] = True
        rec_parts.append(a[is_item])
        start_parts.append(body[is_item])
        end_parts.append(end[is_item])
        cur[a] = np.where(wrong, stops[a], end)
        active = cur < stops

    if rec_parts:
        rec = np.concatenate(rec_parts)
        i_start = np.concatenate(start_parts)
        i_end = np.concatenate(end_parts)
        order = np.lexsort((i_start, rec))
        rec, i_start, i_end = rec[order], i_start[order], i_end[order]
    else:
        rec = i_start = i_end = np.zeros(0, dtype=np.int64)

    items = _read_item_fields(data, rec, i_start, i_end)
    bad[items.pop("bad_records")] = True
    keep = ~bad[rec] & ~items["internal"]
    return Items(
        record=rec[keep],
        name_start=items["name_start"][keep],
        name_len=items["name_len"][keep],
        value_start=items["value_start"][keep],
        value_len=items["value_len"][keep],
        bad=np.flatnonzero(bad),
    )


def _read_item_fields(data, rec, i_start, i_end) -> dict:
    """Name and value ranges of each item. Most items are one name (a nested-key part or a key)
    and a value, both under 128 bytes: that shape is checked for all items at once; the others go
    field by field."""
    n = len(data)
    m = len(rec)
    out = {
        "name_start": i_start + 2, "name_len": np.zeros(m, dtype=np.int64),
        "value_start": np.zeros(m, dtype=np.int64), "value_len": np.zeros(m, dtype=np.int64),
        "internal": np.zeros(m, dtype=bool),
    }
    if m == 0:
        out["bad_records"] = np.zeros(0, dtype=np.int64)
        return out
    name_len = data[np.minimum(i_start + 1, n - 1)].astype(np.int64)
    tag_at = np.minimum(i_start + 2 + name_len, n - 2)
    value_len = data[np.minimum(tag_at + 2, n - 1)].astype(np.int64)
    first_tag = data[i_start]
    simple = (((first_tag == _PART_TAG) | (first_tag == _KEY_TAG)) & (name_len < 0x80)
              & (data[tag_at] == _VALUE_TAG[0]) & (data[tag_at + 1] == _VALUE_TAG[1])
              & (value_len < 0x80) & (tag_at + 3 + value_len == i_end))
    out["name_len"] = np.where(simple, name_len, 0)
    out["value_start"] = np.where(simple, tag_at + 3, 0)
    out["value_len"] = np.where(simple, value_len, 0)
    other = np.flatnonzero(~simple)
    bad_records = np.zeros(0, dtype=np.int64)
    if len(other):
        general = _read_item_fields_general(data, rec[other], i_start[other], i_end[other])
        for key in ("name_start", "name_len", "value_start", "value_len", "internal"):
            out[key][other] = general[key]
        bad_records = general["bad_records"]
    out["bad_records"] = bad_records
    return out


def _read_item_fields_general(data, rec, i_start, i_end) -> dict:
    m = len(rec)
    parts = np.zeros(m, dtype=np.int64)
    keys = np.zeros(m, dtype=np.int64)
    values = np.zeros(m, dtype=np.int64)
    name_start = np.zeros(m, dtype=np.int64)
    name_len = np.zeros(m, dtype=np.int64)
    value_start = np.zeros(m, dtype=np.int64)
    value_len = np.zeros(m, dtype=np.int64)
    broken = np.zeros(m, dtype=bool)
    cur = i_start.copy()
    idx = np.arange(m)
    active = cur < i_end
    while active.any():
        a = idx[active]
        pos = cur[a]
        t0 = data[pos].astype(np.int64)
        t1 = data[np.minimum(pos + 1, len(data) - 1)].astype(np.int64)
        is_value = (t0 == _VALUE_TAG[0]) & (t1 == _VALUE_TAG[1])
        is_part = t0 == _PART_TAG
        is_key = t0 == _KEY_TAG
        tag_w = np.where(is_value, 2, 1)
        length, w, ok = varint(data, pos + tag_w, 4)
        body = pos + tag_w + w
        end = body + length
        good = ok & (end <= i_end[a]) & (is_value | is_part | is_key)
        broken[a[~good]] = True
        first_name = good & (is_part | is_key) & (parts[a] + keys[a] == 0)
        name_start[a[first_name]] = body[first_name]
        name_len[a[first_name]] = length[first_name]
        parts[a[good & is_part]] += 1
        keys[a[good & is_key]] += 1
        value_start[a[good & is_value]] = body[good & is_value]
        value_len[a[good & is_value]] = length[good & is_value]
        values[a[good & is_value]] += 1
        cur[a] = np.where(good, end, i_end[a])
        active = cur < i_end
    simple = (parts + keys == 1)
    first_byte = data[np.minimum(name_start, len(data) - 1)]
    internal = ~simple & (parts + keys > 1) & (name_len > 0) & (first_byte == _UNDERSCORE)
    broken |= (values != 1) | ((parts + keys) == 0) | (~simple & ~internal)
    return {
        "name_start": name_start, "name_len": name_len,
        "value_start": value_start, "value_len": value_len,
        "internal": internal & ~broken,
        "bad_records": np.unique(rec[broken]),
    }


# Arrow string views address their data as (buffer index, int32 offset): the file is exposed as
# 1 GiB windows that overlap by one block, so every string of a record held in one chunk (at most
# a block long) lies inside the window its first byte falls in.
WINDOW = 1 << 30
_WINDOW_OVERLAP = 32 * 1024
_INLINE = 12  # Arrow keeps strings of up to 12 bytes inside the view itself


# Row k: 1 for the first k of 12 inline bytes, 0 after.
_KEEP = (np.arange(_INLINE)[None, :] < np.arange(_INLINE + 1)[:, None]).astype(np.uint8)


def _first_bytes(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The 12 bytes from each start (zeros past the end of the data), as an (n, 12) array.

    A strided view presents the data as overlapping 12-byte rows, one per offset, so the
    gather is one row copy per string."""
    limit = len(data) - _INLINE
    out = np.zeros((len(starts), _INLINE), dtype=np.uint8)
    inside = starts <= limit
    if limit >= 0:
        rows = np.lib.stride_tricks.as_strided(data, shape=(limit + 1, _INLINE), strides=(1, 1),
                                               writeable=False)
        out[inside] = rows[starts[inside]]
    for i in np.flatnonzero(~inside).tolist():
        tail = data[starts[i]:]
        out[i, :len(tail)] = tail
    return out


def buffer_windows(buf) -> list[pa.Buffer]:
    """The file's bytes as the data buffers of string views (zero copy)."""
    whole = pa.py_buffer(buf)
    return [whole.slice(lo, min(len(whole) - lo, WINDOW + _WINDOW_OVERLAP))
            for lo in range(0, max(len(whole), 1), WINDOW)]


def gather_strings(data: np.ndarray, windows: list[pa.Buffer], starts: np.ndarray,
                   lengths: np.ndarray) -> pa.Array:
    """An Arrow string_view array of the byte ranges (start, length) of the file, pointing into
    the file's own bytes (nothing copied but the short strings Arrow keeps inline); UTF-8 checked.

    Arrow's view layout (16 bytes each): int32 length, then either the data itself (length <= 12)
    or its first 4 bytes, an int32 buffer index and an int32 offset into that buffer."""
    n = len(starts)
    views = np.zeros((n, 16), dtype=np.uint8)
    words = views.view(np.int32)  # (n, 4): length, prefix, buffer index, offset
    words[:, 0] = lengths
    if n:
        head = _first_bytes(data, starts)
        # Inline data must be zero after the string's end (Arrow compares short views bytewise).
        head *= _KEEP[np.minimum(lengths, _INLINE)]
        # Short strings keep all 12 bytes; long ones their first 4, then where the rest is.
        views[:, 4:16] = head
        long_ = np.flatnonzero(lengths > _INLINE)
        words[long_, 2] = starts[long_] // WINDOW
        words[long_, 3] = starts[long_] % WINDOW
    arr = pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), *windows])
    arr.validate(full=True)
    return arr
