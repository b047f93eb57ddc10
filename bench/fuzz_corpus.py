"""A fixed-seed corpus of broken and hostile importer inputs, made at run time (nothing is stored).

Two sources of cases:
* the real files of `../shared/data/wild` (.wandb runs, a TensorBoard event file, lm-eval results,
  a W&B CSV export), cut short, with bytes flipped and stretches zeroed;
* small generated logs (JSONL, CSV, lm-eval JSON, a W&B CSV export) whose values are known, each
  written clean and in other encodings, then corrupted the same ways, plus hand-made hostile
  variants: wrong types, numbers no float holds, steps beyond 64 bits, huge names, deep nesting.

Each case knows what the input holds (`Oracle`), so an import that succeeds can be checked for a
silent change: a value, step or name the input never had, or (for files whose records carry
checksums) fewer rows than the input holds with nothing said.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SEED = 20261204
WILD = Path(__file__).resolve().parents[2] / "shared" / "data" / "wild"
if not WILD.is_dir():
    WILD = Path("/work/shared/data/wild")
BLOCK = 32 * 1024


@dataclass
class Oracle:
    """What an input holds, to judge an import that succeeded.

    numbers: every number written in the input (a stored value must be one of them);
    steps: every run of digits in a text input (a stored step must be one of them);
    names: text the input holds (every part of a stored metric name must occur in it), or None
    when names are mapped by a profile and not checked;
    exact: the (step, key, value) rows a clean import must store, when known;
    rows: the rows a clean import of the undamaged original stores, for formats whose records
    carry checksums (fewer rows must come with a note).
    """

    numbers: set[float] = field(default_factory=set)
    names: str | None = None
    exact: set[tuple[int, str, float]] | None = None
    rows: int | None = None
    values: set[float] | None = None  # checksummed formats: the original's stored values
    steps: set[int] | None = None  # text: every whole number written (`"7"`, `revision=step1000`)


@dataclass
class Case:
    name: str
    filename: str
    data: bytes
    oracle: Oracle
    args: tuple[str, ...] = ()


# --- what text inputs hold -------------------------------------------------------------------------
def numbers_in_json(value, out: set[float]) -> None:
    """Add every number a parsed JSON document holds (booleans as 0 and 1) to `out`."""
    if isinstance(value, bool):
        out.add(float(value))
    elif isinstance(value, (int, float)):
        try:
            out.add(float(value))
        except OverflowError:
            pass
    elif isinstance(value, dict):
        for v in value.values():
            numbers_in_json(v, out)
    elif isinstance(value, list):
        for v in value:
            numbers_in_json(v, out)


def _float_literal(text: str) -> float | None:
    """A number as written; None for one that overflows a float (`1e309` holds no infinity)."""
    value = float(text)
    return None if math.isinf(value) and text.strip().lower().lstrip("+-") not in ("inf", "infinity") \
        else value


def text_oracle(data: bytes, fmt: str) -> Oracle:
    """Every number the text could be read to hold, by the loosest reading of its format."""
    text = data.decode("utf-8-sig", "replace")
    numbers: set[float] = set()
    if fmt == "json":
        chunks = [text]
    elif fmt == "jsonl":
        chunks = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    else:
        chunks = []
        for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
            for cell in line.replace("\t", ",").split(","):
                cell = cell.strip().strip('"').strip()
                if cell.lower() in ("true", "false"):
                    numbers.add(1.0 if cell.lower() == "true" else 0.0)
                    continue
                try:
                    value = _float_literal(cell)
                except ValueError:
                    continue
                if value is not None:
                    numbers.add(value)
    for chunk in chunks:
        try:
            numbers_in_json(json.loads(chunk, parse_float=_float_literal), numbers)
        except (ValueError, RecursionError):
            pass
    # Whole numbers as written (not the digits of a decimal): in a field, a string or a name.
    steps = {int(d) for d in re.findall(r"(?<![\d.eE])\d{1,19}(?![\d.eE])", text)}
    return Oracle(numbers=numbers, names=None if fmt == "json" else text, steps=steps)


# --- generated logs ----------------------------------------------------------------------------------
METRICS = ("train/loss", "train/grad_norm", "optim/lr")


def _log_rows(rng: random.Random, steps: int = 40) -> list[tuple[int, dict[str, float]]]:
    rows, step = [], 0
    for _ in range(steps):
        step += rng.choice((1, 1, 2, 10))
        rows.append((step, {m: round(rng.uniform(0.01, 5.0), rng.randint(1, 9)) for m in METRICS
                            if rng.random() > 0.1}))
    return rows


def _exact(rows) -> set[tuple[int, str, float]]:
    return {(s, k, v) for s, vals in rows for k, v in vals.items()}


def generated(rng: random.Random) -> list[Case]:
    rows = _log_rows(rng)
    jsonl = "".join(json.dumps({"step": s, **v}) + "\n" for s, v in rows).encode()
    csv = ("step," + ",".join(METRICS) + "\n" + "".join(
        f"{s}," + ",".join(repr(v[m]) if m in v else "" for m in METRICS) + "\n" for s, v in rows)).encode()
    wandb_csv = csv.replace(b"step,", b"_step,", 1)
    lm_eval = json.dumps({"results": {"hellaswag": {"acc,none": 0.5123, "acc_stderr,none": 0.0049,
                                                    "acc_norm,none": 0.6871}},
                          "n-samples": {"hellaswag": {"effective": 10042}},
                          "config": {"model_args": "pretrained=x,revision=step1000"}}).encode()
    exact_lm = {(1000, "eval/downstream/hellaswag/acc", 0.5123),
                (1000, "eval/downstream/hellaswag/acc/stderr", 0.0049),
                (1000, "eval/downstream/hellaswag/acc_norm", 0.6871),
                (1000, "eval/downstream/hellaswag/acc/n", 10042.0),
                (1000, "eval/downstream/hellaswag/acc_norm/n", 10042.0)}
    bases = [("log.jsonl", jsonl, "jsonl", _exact(rows)), ("log.csv", csv, "csv", _exact(rows)),
             ("export.csv", wandb_csv, "csv", _exact(rows)), ("results.json", lm_eval, "json", exact_lm)]
    cases = []
    for filename, data, fmt, exact in bases:
        clean = text_oracle(data, fmt)
        clean.exact = exact
        cases.append(Case(f"{filename} clean", filename, data, clean))
        crlf = data.replace(b"\n", b"\r\n")
        cases.append(Case(f"{filename} CRLF", filename, crlf, Oracle(clean.numbers, clean.names, exact,
                                                                    steps=clean.steps)))
        for name, variant in _encodings(data):
            cases.append(Case(f"{filename} {name}", filename, variant, text_oracle(variant, fmt)))
        for name, variant in corruptions(rng, data, tries=4):
            cases.append(Case(f"{filename} {name}", filename, variant, text_oracle(variant, fmt)))
    for filename, fmt, name, data in hostile_texts():
        cases.append(Case(f"{filename} {name}", filename, data, text_oracle(data, fmt)))
    for name, (data, values) in hostile_wandb().items():
        cases.append(Case(f"run-hostile.wandb {name}", "run-hostile.wandb", data,
                          Oracle(values=values, rows=2)))
    return cases


_STEPS = {"5000-digit step": "9" * 5000, "step 2**64": str(2**64)}


def hostile_wandb() -> dict[str, tuple[bytes, set[float]]]:
    """Two-step .wandb logs whose second value is written as the name says, with the values each
    holds (a value no float holds, holds none)."""
    from wandb.proto import wandb_internal_pb2 as wpb

    from bench.wandb_log_writer import encode_log

    out = {}
    for name, text, values in [("1e309", "1e309", {1.5}), ("400 digits", "9" * 400, {1.5}),
                               ("Infinity", "Infinity", {1.5, math.inf}), ("true", "true", {1.5, 1.0}),
                               ("5000-digit step", "2.5", {1.5, 2.5}), ("step 2**64", "2.5", {1.5, 2.5})]:
        records = []
        for num, (step, value) in enumerate([("0", "1.5"), (_STEPS.get(name, "1"), text)],
                                            start=1):
            rec = wpb.Record(num=num)
            rec.history.item.add(key="_step", value_json=step)
            rec.history.item.add(key="train/loss", value_json=value)
            records.append(rec.SerializeToString())
        out[name] = (encode_log(records), values)
    return out


def _encodings(data: bytes) -> Iterator[tuple[str, bytes]]:
    text = data.decode()
    yield "UTF-16", text.encode("utf-16")
    yield "UTF-8 with BOM", b"\xef\xbb\xbf" + data
    yield "latin-1 name", data.replace(b"train/loss", "train/lössé".encode("latin-1"), 1)
    yield "no final newline", data.rstrip(b"\n")
    yield "a NUL byte", data[: len(data) // 2] + b"\x00" + data[len(data) // 2:]


def hostile_texts() -> Iterator[tuple[str, str, str, bytes]]:
    """(filename, oracle format, name, bytes) of hand-made hostile inputs."""
    big = "9" * 400
    lm = {"results": {"hellaswag": {"acc,none": 0.5}}, "config": {"model_args": "revision=step10"}}
    for name, text in [
        ("null line", "null\n"), ("null lines", "null\nnull\nnull\n"), ("a list line", "[1, 2]\n"),
        ("nested 100k", '{"a":' * 100_000 + "1" + "}" * 100_000 + "\n"),
        ("lists 100k", "[" * 100_000 + "]" * 100_000 + "\n"),
        ("nested 40", '{"step": 1, ' + '"a": {' * 40 + '"b": 1' + "}" * 41 + "\n"),
        ("1e309", '{"step": 1, "train/loss": 1e309}\n'), ("400 digits", f'{{"step": 1, "train/loss": {big}}}\n'),
        ("5000-digit step", f'{{"step": {"9" * 5000}, "train/loss": 1}}\n'),
        ("step 2**64", f'{{"step": {2**64}, "train/loss": 1}}\n'), ("step -1", '{"step": -1, "train/loss": 1}\n'),
        ("step 1.5", '{"step": 1.5, "train/loss": 1}\n'), ("step true", '{"step": true, "train/loss": 1}\n'),
        ("step text", '{"step": "7", "train/loss": 1}\n'), ("text values", '{"step": 1, "train/loss": "abc"}\n'),
        ("bool values", '{"step": 1, "train/loss": true}\n'), ("list values", '{"step": 1, "train/loss": [1]}\n'),
        ("NaN and Infinity", '{"step": 1, "train/loss": NaN, "train/grad_norm": Infinity}\n'),
        ("repeated name", '{"step": 1, "train/loss": 1, "train/loss": 2}\n'),
        ("100k-char name", json.dumps({"step": 1, "m/" + "x" * 100_000: 1.0}) + "\n"),
        ("5 MB text name", json.dumps({"step": 1, "x" * 5_000_000: "text"}) + "\n"),
        ("empty", ""), ("blank lines", "\n\n\n"), ("steps going back", '{"step": 5, "a/b": 1}\n{"step": 2, "a/b": 2}\n'),
        ("W&B rows on iter", '{"_step": 0, "iter": 10, "train/loss": 1}\n{"_step": 1, "a/b": 2}\n'),
        ("W&B rows, iter 2**64", f'{{"_step": 0, "iter": {2**64}, "train/loss": 1}}\n'),
        ("W&B rows, iter 1.5", '{"_step": 0, "iter": 1.5, "train/loss": 1}\n'),
        ("W&B rows, iter back", '{"_step": 0, "iter": 10, "a/b": 1}\n{"_step": 1, "iter": 5, "a/b": 2}\n'),
    ]:
        yield "hostile.jsonl", "jsonl", name, text.encode()
    for name, text in [
        ("header only", "step,train/loss\n"), ("empty cells", "step,train/loss\n1,\n2,\n"),
        ("step true", "step,train/loss\ntrue,1.0\n"), ("repeated column", "step,train/loss,train/loss\n1,1,2\n"),
        ("1e309", "step,train/loss\n1,1e309\n"), ("400 digits", f"step,train/loss\n1,{big}\n"),
        ("inf literal", "step,train/loss\n1,inf\n2,-Infinity\n"), ("step 2**64", f"step,train/loss\n{2**64},1\n"),
        ("text cell", "step,train/loss\n1,abc\n"), ("extra cells", "step,train/loss\n1,2,3\n"),
        ("short row", "step,train/loss,train/lr\n1\n"), ("quoted newline", 'step,train/loss\n1,"1\n2"\n'),
        ("unclosed quote", 'step,train/loss\n1,"1.0\n'), ("semicolons", "step;train/loss\n1;2\n"),
        ("random bytes", bytes(random.Random(SEED).randrange(256) for _ in range(4096)).decode("latin-1")),
        ("100k columns", "step," + ",".join(f"m/c{i}" for i in range(100_000)) + "\n1," + ",".join("1" * 100_000) + "\n"),
        ("5 MB name", "step," + "m" * 5_000_000 + "\n1,abc\n"),
    ]:
        data = text.encode("latin-1") if name == "random bytes" else text.encode()
        yield "hostile.csv", "csv", name, data
    for name, text in [
        ("header only", "Step,r - train/loss,r - train/loss__MIN,r - train/loss__MAX\n"),
        ("empty cells", "Step,r - train/loss\n1,\n2,\n"), ("step 2**64", f"_step,train/loss\n{2**64},1\n"),
        ("step 2**53+1", "_step,train/loss\n9007199254740993,1\n"), ("1e309", "_step,train/loss\n1,1e309\n"),
        ("repeated column", "_step,train/loss,train/loss\n1,1,2\n"), ("steps going back", "_step,a/b\n5,1\n2,2\n"),
        ("tokens without batch", "throughput/total_tokens,train/loss\n1024,1\n"),
        ("negative step", "_step,train/loss\n-1,1\n"),
        ("band without its metric", "Step,r - train/loss__MIN\n1,0.5\n"),
        ("band of text", "Step,r - train/loss,r - train/loss__MIN\n1,0.5,abc\n"),
        ("band 1e309", "Step,r - train/loss,r - train/loss__MAX\n1,0.5,1e309\n"),
    ]:
        yield "hostile_export.csv", "csv", name, text.encode()
    for name, doc in [
        ("400 digits", json.dumps(lm).replace("0.5", big)), ("revision step 2**70", json.dumps(
            {**lm, "config": {"model_args": f"revision=step{2**70}"}})),
        ("5000-digit revision", json.dumps({**lm, "config": {"model_args": "revision=step" + "9" * 5000}})),
        ("lists 50k", "[" * 50_000 + "]" * 50_000), ("objects 50k", '{"a":' * 50_000 + "1" + "}" * 50_000),
        ("results a list", json.dumps({**lm, "results": [1]})), ("config a string", json.dumps({**lm, "config": "x"})),
        ("task a number", json.dumps({**lm, "results": {"hellaswag": 5}})),
        ("NaN value", json.dumps(lm).replace("0.5", "NaN")), ("no revision", json.dumps({**lm, "config": {}})),
        ("huge task name", json.dumps({**lm, "results": {"t" * 1_000_000: {"acc,none": 0.5}}})),
        ("repeated name", json.dumps(lm).replace('"acc,none": 0.5', '"acc,none": 0.5, "acc,none": 0.7')),
    ]:
        yield "hostile.json", "json", name, doc.encode()


# --- corruptions -----------------------------------------------------------------------------------
def corruptions(rng: random.Random, data: bytes, tries: int) -> Iterator[tuple[str, bytes]]:
    """Cut short, flipped bits, zeroed stretches: each at positions drawn from `rng`."""
    n = len(data)
    if n < 2:
        return
    for _ in range(tries):
        at = rng.randrange(1, n)
        yield f"cut at {at}", data[:at]
    for _ in range(tries):
        at = rng.randrange(n)
        bit = 1 << rng.randrange(8)
        yield f"bit {bit} flipped at {at}", data[:at] + bytes([data[at] ^ bit]) + data[at + 1:]
    spots = sorted(rng.sample(range(n), min(8, n)))
    flipped = bytearray(data)
    for at in spots:
        flipped[at] = rng.randrange(256)
    yield "8 random bytes", bytes(flipped)
    at = rng.randrange(n)
    yield f"64 bytes zeroed at {at}", data[:at] + bytes(min(64, n - at)) + data[at + 64:]
    if n > 2 * BLOCK:
        block = rng.randrange(1, n // BLOCK)
        yield f"block {block} zeroed", data[:block * BLOCK] + bytes(BLOCK) + data[(block + 1) * BLOCK:]


# --- the real files -------------------------------------------------------------------------------------
@dataclass
class RealFile:
    path: Path
    fmt: str  # the oracle's reading: binary (checksummed records), json, csv
    args: tuple[str, ...] = ()


def real_files() -> list[RealFile]:
    found = [RealFile(p, "binary") for p in sorted(WILD.glob("wandb/*/wandb/run-*/run-*.wandb"))]
    found += [RealFile(p, "binary") for p in sorted(WILD.glob("tensorboard/**/events.out.tfevents*"))]
    found += [RealFile(p, "json", ("--step", "1000")) for p in sorted(WILD.glob("lm_eval/**/*.json"))]
    found += [RealFile(p, "csv") for p in sorted(WILD.glob("wandb_csv/**/*.csv"))]
    return found


def real(rng: random.Random, originals: dict[Path, Oracle], tries: int = 4) -> list[Case]:
    """Corruptions of each real file; `originals` holds what a clean import of a checksummed file
    stores (its rows and values), from `import_original`."""
    cases = []
    for item in real_files():
        data = item.path.read_bytes()
        for name, variant in [("clean", data), *corruptions(rng, data, tries)]:
            if item.fmt == "binary":
                oracle = originals[item.path]
            else:
                oracle = text_oracle(variant, item.fmt)
                oracle.names = None  # mapped by a profile from names a person chose
                oracle.steps |= {int(a) for a in item.args if a.isdigit()}
            cases.append(Case(f"{item.path.parent.name}/{item.path.name} {name}", item.path.name, variant,
                              oracle, item.args))
    return cases


def corpus(originals: dict[Path, Oracle]) -> list[Case]:
    rng = random.Random(SEED)
    return generated(rng) + real(rng, originals)

