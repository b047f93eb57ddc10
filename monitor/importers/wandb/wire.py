"""A vectorised reader for the two record shapes that make up almost all of a `.wandb` file.

Why not just the protobuf library: it builds a Python object per record and per item, and at about
3 records and 20 items per logged step that costs more than reading a 1.4M-step reference run in a
few seconds allows (bench/bench_importers.py; the budget is in bench/RESULTS.md, design
measurements). The protobuf runtime stays the reference:
everything this module does not positively recognise goes to wandb's own `Record` class
(`records`), and the tests check both give the same rows on files the real wandb wrote.

What is recognised, exactly as the protobuf wire format (and wandb 0.31) lays it out:

    Record        = [num: field 1 varint] then history (field 2) or summary (field 3) as the
                    record's last field
    HistoryRecord = item (field 1)* [step (field 2)]
    SummaryRecord = update (field 1)*
    item          = nested_key (field 2)+ or key (field 1), then value_json (field 16)

Records are decoded a batch at a time, one field position at a time across every record of the
batch (numpy arrays of cursors), so the Python loop runs once per field position, not once per
record; history and summary records share the walk, since their items have one layout. The walk
reads two bytes a field (tag and length); then, in file order, each item's first four bytes (tag,
length, name tag, name length) and the four at its value tag are read as words through unaligned
views of the file, so the usual item (a name and a value each under 128 bytes) is checked on
those two words. The names and values are gathered into Arrow string arrays from (offset,
length) pairs. An item whose name is one nested-key part or a plain key is kept under that name;
an item with several parts is kept only when its name starts with `_` (wandb's own keys, which
importers drop anyway); any other shape (nested dicts logged by the user, typed values, removals,
fields out of protobuf's order, varints longer than the data) marks the record `bad`, and the
caller decodes it with the protobuf library instead. Summary items named `_...` are left out:
the summary kept is the run's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

HISTORY_TAG = 0x12  # Record.history: field 2, wire type 2
SUMMARY_TAG = 0x1A  # Record.summary: field 3, wire type 2
_NUM_TAG = 0x08  # Record.num: field 1, varint
_ITEM_TAG = 0x0A  # HistoryRecord.item / SummaryRecord.update: field 1, wire type 2
_STEP_TAG = 0x12  # HistoryRecord.step: field 2, wire type 2
_KEY_TAG = 0x0A  # item.key: field 1
_PART_TAG = 0x12  # item.nested_key: field 2
_VALUE_TAG = (0x82, 0x01)  # item.value_json: field 16, wire type 2 (a two-byte tag)
_VALUE_WORD = _VALUE_TAG[1] << 8 | _VALUE_TAG[0]  # the tag as the low half of a word
_UNDERSCORE = ord("_")
_ONE_BYTE = 0x80  # a varint byte below this is the varint's last (lengths under 128: one byte)
# The fast path reads words up to this many bytes past a record's end (the words it reads at an
# item's second name part and value tag come from lengths of up to 255 read there: at most
# 4 + 255 + 2 + 255 bytes after the item's start, then 16 bytes of a string), so the records
# ending closer than this to the end of the data are left to the exact decoder.
TAIL_MARGIN = 1024
_CONTINUE_BITS = np.uint64(0x8080808080808080)


class FileBytes:
    """A file's bytes as numpy arrays: the bytes, and unaligned little-endian 2, 4 and 8-byte
    words starting at every offset (views, nothing copied); and as Arrow buffers for string
    views."""

    def __init__(self, buf) -> None:
        self.u8 = np.frombuffer(buf, dtype=np.uint8)
        self.size = len(self.u8)
        self.u16, self.u32, self.u64 = (_words(self.u8, width) for width in (2, 4, 8))
        self.windows = buffer_windows(buf)


def _words(data: np.ndarray, width: int) -> np.ndarray:
    return np.ndarray((max(len(data) - width + 1, 0),), dtype=f"<u{width}", buffer=data,
                      strides=(1,))


@dataclass
class Items:
    """The items of a set of records, in file order, as offsets into one byte buffer."""

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


def _varint_in_word(word: np.ndarray, max_bytes: int):
    """(value, width, ok) of varints held in the low bytes of 8-byte little-endian words; ok is
    False when a varint is longer than max_bytes (at most 8)."""
    word = word.astype(np.uint64, copy=False)
    limit = np.uint64((1 << (8 * max_bytes)) - 1)
    last = ~word & _CONTINUE_BITS & limit  # the high bit of each byte that ends a varint
    lowest = last & (~last + np.uint64(1))
    width = ((np.bitwise_count(lowest - np.uint64(1)) + 1) >> 3).astype(np.int64)
    kept = word & ((lowest << np.uint64(1)) - np.uint64(1))
    value = np.zeros(len(word), dtype=np.int64)
    for k in range(max_bytes):
        value |= ((kept >> np.uint64(8 * k)) & np.uint64(0x7F)).astype(np.int64) << (7 * k)
    return value, width, last != 0


def record_heads(fb: FileBytes, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tag, offset) of each record's record-type field, the first field after `num` in wandb's
    order: the tag is one byte, or 256 * second + first for two-byte tags; -1 when `num` is
    longer than 7 bytes. Records must end at least TAIL_MARGIN bytes before the data does."""
    word = fb.u64[starts]
    has_num = (word & np.uint64(0xFF)) == _NUM_TAG
    _, width, ok = _varint_in_word(word >> np.uint64(8), 7)
    field = np.where(has_num, starts + 1 + width, starts)
    two = fb.u16[field].astype(np.int64)
    tag = np.where(two & 0x80, two, two & 0xFF)
    return np.where(~has_num | ok, tag, -1), field


def read_items(fb: FileBytes, stops: np.ndarray, fields: np.ndarray, tags: np.ndarray) -> Items:
    """Items of records that are each a history (tag 0x12) or a summary (tag 0x1a) record, in file
    order; `fields` is where each record's type field starts (record_heads). Summary items named
    `_...` (W&B's own bookkeeping: `_runtime`, the mirror of `_step`) are left out."""
    # The message's length, in at most three bytes (a record over 2 MiB is decoded exactly).
    sub_len, width, ok = _varint_in_word(fb.u32[fields + 1], 3)
    sub_start = fields + 1 + width
    # The history/summary message must be the record's last field, so it ends where the record does.
    bad = ~ok | (sub_start + sub_len != stops)
    rec, pos = _walk(fb, sub_start, stops, tags, bad)
    items = _item_fields(fb, rec, pos)
    bad[items["bad_records"]] = True
    own = (items["name_len"] > 0) & (fb.u8[items["name_start"]] == _UNDERSCORE) & (
        tags[rec] == SUMMARY_TAG)
    keep = np.flatnonzero(~bad[rec] & ~items["internal"] & ~own)
    return Items(
        record=rec[keep],
        name_start=items["name_start"][keep],
        name_len=items["name_len"][keep],
        value_start=items["value_start"][keep],
        value_len=items["value_len"][keep],
        bad=np.flatnonzero(bad),
    )


def _walk(fb: FileBytes, cur: np.ndarray, stops: np.ndarray, tags: np.ndarray, bad: np.ndarray):
    """(record, start) of every item field of the messages [cur, stop), in file order; `bad` is
    set for records holding anything else. The walk goes field position by field position,
    carrying only the records still open, and reads two bytes a field (its tag and, for the usual
    item, its one-byte length)."""
    a = np.flatnonzero(~bad & (cur < stops))
    p, e = cur[a], stops[a]
    counts = np.zeros(len(cur), dtype=np.int64)
    found: list[tuple[np.ndarray, np.ndarray]] = []  # (records, item starts) at each position
    while len(a):
        # Two byte reads: cheaper than one unaligned two-byte word.
        length = fb.u8[p + 1]
        end = p + 2 + length
        plain = (fb.u8[p] == _ITEM_TAG) & (length < _ONE_BYTE)
        if plain.all():
            found.append((a, p))
            counts[a] += 1
        else:
            item = plain.copy()
            odd = np.flatnonzero(~plain)
            end[odd], item[odd] = _odd_fields(fb, a[odd], p[odd], e[odd], tags, bad)
            found.append((a[item], p[item]))
            counts[a[item]] += 1
        bad[a[end > e]] = True
        more = end < e
        a, p, e = a[more], end[more], e[more]
    # Items of one record come out at successive positions (a `step` field is only ever last),
    # so an item's rank in its record is the position it was found at.
    first = np.cumsum(counts) - counts
    pos = np.empty(int(counts.sum()), dtype=np.int64)
    for rank, (records, starts) in enumerate(found):
        pos[first[records] + rank] = starts
    return np.repeat(np.arange(len(cur)), counts), pos


def _odd_fields(fb: FileBytes, rec, p, e, tags, bad):
    """(end, is an item) of fields that are not an item with a one-byte length: an item with a
    longer length, a history record's `step` (its last field, in protobuf's field order), or a
    shape the exact decoder takes (its record marked bad, its walk ended)."""
    tag = fb.u8[p]
    length, width, ok = varint(fb.u8, p + 1, 4)
    end = p + 1 + width + length
    item = ok & (tag == _ITEM_TAG)
    step = ok & (tag == _STEP_TAG) & (tags[rec] == HISTORY_TAG) & (end == e)
    wrong = ~item & ~step
    bad[rec[wrong]] = True
    return np.where(wrong, e, end), item


def _item_fields(fb: FileBytes, rec, pos) -> dict:
    """Name and value ranges of the items starting at `pos`. Most items are a one-byte tag and
    length, one name (a nested-key part or a key) and a value, each under 128 bytes: that shape
    is checked on two words, the item's first four bytes and the four at its value tag. W&B's own
    two-part names (`_wandb.runtime`) are recognised the same way, with one word more; the others
    go field by field."""
    head = fb.u32[pos]
    name_len = head >> 24
    value_at = pos + 4 + name_len
    at_value = fb.u32[value_at]
    value_len = (at_value >> 16) & 0xFF
    name_tag = head & 0xFF0000
    # The value ends where the item does: its name field (2 + name_len bytes) and value field
    # (3 + value_len bytes) fill the item's one-byte length.
    simple = (((head & 0x800080FF) == _ITEM_TAG)
              & ((name_tag == _PART_TAG << 16) | (name_tag == _KEY_TAG << 16))
              & ((at_value & 0x80FFFF) == _VALUE_WORD)
              & (name_len + value_len + 5 == ((head >> 8) & 0xFF)))
    out = {
        "name_start": pos + 4, "name_len": name_len.astype(np.int64),
        "value_start": value_at + 3, "value_len": value_len.astype(np.int64),
        "internal": np.zeros(len(rec), dtype=bool), "bad_records": np.zeros(0, dtype=np.int64),
    }
    if simple.all():
        return out
    other = np.flatnonzero(~simple)
    o_pos, o_head = pos[other], head[other]
    # The item's body starts after its tag and length (one byte, or a longer varint).
    length, width, _ = varint(fb.u8, o_pos + 1, 4)
    o_body = o_pos + 1 + width
    o_end = o_body + length
    # Two nested-key parts, the first starting with `_`, then a value: W&B's own, dropped.
    second_at = o_pos + 4 + name_len[other]
    second = fb.u32[second_at]
    value_at = second_at + 2 + ((second >> 8) & 0xFF)
    at_value = fb.u32[value_at]
    own = (((o_head & 0x80FF80FF) == (_PART_TAG << 16 | _ITEM_TAG))
           & ((second & 0x80FF) == _PART_TAG)
           & ((at_value & 0x80FFFF) == _VALUE_WORD)
           & (value_at + 3 + ((at_value >> 16) & 0xFF) == o_end)
           & (fb.u8[o_pos + 4] == _UNDERSCORE))
    out["internal"][other[own]] = True
    other, o_body, o_end = other[~own], o_body[~own], o_end[~own]
    general = _item_fields_general(fb.u8, rec[other], o_body, o_end)
    for key in ("name_start", "name_len", "value_start", "value_len", "internal"):
        out[key][other] = general[key]
    out["bad_records"] = general["bad_records"]
    return out


def _item_fields_general(data, rec, i_start, i_end) -> dict:
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
        t1 = data.take(pos + 1, mode="clip").astype(np.int64)
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
    first_byte = data.take(name_start, mode="clip")
    # Several nested-key parts starting with `_` are wandb's own; a key beside nested-key parts
    # (protobuf would name the item by the parts) goes to the exact decoder.
    internal = (keys == 0) & (parts > 1) & (name_len > 0) & (first_byte == _UNDERSCORE)
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
_WINDOW_BITS = 30
WINDOW = 1 << _WINDOW_BITS
_WINDOW_OVERLAP = 32 * 1024
_INLINE = 12  # Arrow keeps strings of up to 12 bytes inside the view itself
# Masks keeping the first k of the 12 inline bytes: of the 4 in a view's first word (in its high
# half, above the length) and of the 8 in its second word.
_KEEP_FIRST4 = np.array([(1 << (8 * min(k, 4))) - 1 for k in range(_INLINE + 1)],
                        dtype=np.uint64) << np.uint64(32) | np.uint64(0xFFFFFFFF)
_KEEP_NEXT8 = np.array([(1 << (8 * max(k - 4, 0))) - 1 for k in range(_INLINE + 1)],
                       dtype=np.uint64)


def buffer_windows(buf) -> list[pa.Buffer]:
    """The file's bytes as the data buffers of string views (zero copy)."""
    whole = pa.py_buffer(buf)
    return [whole.slice(lo, min(len(whole) - lo, WINDOW + _WINDOW_OVERLAP))
            for lo in range(0, max(len(whole), 1), WINDOW)]


def gather_strings(fb: FileBytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow string_view array of the byte ranges (start, length) of the file, pointing into
    the file's own bytes (nothing copied but the short strings Arrow keeps inline). Not checked
    as UTF-8 here: callers check what they turn into text.

    Arrow's view layout (16 bytes each, two little-endian words here): the int32 length, then
    either the data itself (length <= 12, zeros after it) or its first 4 bytes, an int32 buffer
    index and an int32 offset into that buffer. The data's first 12 bytes are read as one 8-byte
    and one 4-byte word per string."""
    n = len(starts)
    views = np.empty((n, 2), dtype=np.uint64)
    lengths = lengths.astype(np.int64, copy=False)
    inside = starts <= fb.size - _INLINE
    at = starts if inside.all() else np.where(inside, starts, 0)
    head = fb.u64[at]
    keep = np.minimum(lengths, _INLINE)
    views[:, 0] = (lengths.astype(np.uint64) | (head << np.uint64(32))) & _KEEP_FIRST4[keep]
    long_ = lengths > _INLINE
    short = ((head >> np.uint64(32)) | (fb.u32[at + 8].astype(np.uint64) << np.uint64(32))
             ) & _KEEP_NEXT8[keep]
    where = (starts >> _WINDOW_BITS).astype(np.uint64) | (
        (starts & (WINDOW - 1)).astype(np.uint64) << np.uint64(32))
    views[:, 1] = np.where(long_, where, short)
    # Strings in the last 12 bytes of the file (at most 12 bytes long), built one by one.
    for i in np.flatnonzero(~inside).tolist():
        views[i] = _short_view(fb.u8[starts[i]:starts[i] + lengths[i]])
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), *fb.windows])


def _short_view(text: np.ndarray) -> np.ndarray:
    raw = np.zeros(16, dtype=np.uint8)
    raw[:4] = np.array([len(text)], dtype="<i4").view(np.uint8)
    raw[4:4 + len(text)] = text
    return raw.view("<u8")
