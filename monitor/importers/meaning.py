"""What a source's series mean, from their names and from how often they were logged.

A profile's rules say what the names of a known trainer mean. For the names no rule explains, the
data adds evidence the name alone cannot give: a loss logged at (nearly) every step the run logs
anything is a training loss; one logged every N steps beside a denser series is an evaluation; a
name with `val`, `valid`, `validation`, `eval`, `test` or `heldout` in it is a held-out set. Each
mapping says what it rests on, and one that rests on the name alone is called a guess.

`Cadence` is measured on the run's step axis (the trainer's step, see `step_axis`); `mapping_rows`
is the table `gapwatch import` prints (source key, gapwatch metric, cadence, count, reason).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from monitor import schema

from .input_checks import cut
from .profiles import Profile, Rule, resolve_profile

HELDOUT_WORDS = ("val", "valid", "validation", "eval", "test", "heldout")
TRAIN_WORDS = ("train", "training", "lm", "total")
TOKEN_KEYS = ("train/num_input_tokens_seen", "tokens", "train/tokens_seen")
# Words that say where or when a series was logged, not what it is ("optim/learning_rate",
# "train/lr", Keras' "epoch_learning_rate").
PLACE_WORDS = ("train", "training", "trainer", "optim", "optimizer", "perf", "runtime", "timers",
               "throughput", "elapsed", "epoch")
LR_WORDS = (("lr",), ("learning", "rate"))
GRAD_NORM_WORDS = (("grad", "norm"), ("gradient", "norm"))
# The words a rate of tokens per second ends with ("tokens_per_second", "train/tok/s", "tps"); one
# that names a device or rank ("tokens_per_sec_per_gpu") is one device's share of the run's rate.
TOKEN_RATE_ENDINGS = (("tokens", "per", "second"), ("tokens", "per", "sec"), ("tokens", "per", "s"),
                      ("tokens", "s"), ("tok", "s"), ("tps",))
PART_WORDS = ("device", "gpu", "rank", "worker")
# The time one step took, in the words trainers write it ("iteration_time", "time_per_step",
# "elapsed time per iteration (ms)"), and the unit a last word gives it (seconds when none does).
# A cumulative clock ("train_time_ms", "elapsed_time") is no step time.
STEP_TIME_WORDS = (("step", "time"), ("iteration", "time"), ("iter", "time"), ("batch", "time"),
                   ("time", "per", "step"), ("time", "per", "iteration"), ("time", "per", "iter"))
TIME_UNITS = {"ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0}
# A series logged at no more than this many times the densest series' interval is "dense".
DENSE_FACTOR = 2.0


@dataclass(frozen=True)
class Cadence:
    """How a series was logged: `count` values at `steps` distinct steps, typically `every`
    steps apart (the median gap; 0 for a series logged once)."""

    count: int
    steps: int
    every: float
    first: int
    last: int

    def describe(self) -> str:
        if self.steps <= 1:
            return "once"
        if self.every <= 1:
            return "every step"
        return f"every {self.every:g} steps"


def cadences(scalars: pd.DataFrame) -> dict[str, Cadence]:
    """Each key's cadence in a long scalars frame (one attempt's rewound steps count again)."""
    out = {}
    for key, steps in scalars.groupby("key", observed=True, sort=False)["step"]:
        s = np.unique(steps.to_numpy())
        every = float(np.median(np.diff(s))) if len(s) > 1 else 0.0
        out[str(key)] = Cadence(len(steps), len(s), every, int(s[0]), int(s[-1]))
    return out


@dataclass(frozen=True)
class ChunkCadence:
    """One chunk's share of its series' cadences: the names in the order they first appear, and
    for each its rows, distinct steps, first and last step in the chunk. Computed where the chunk
    is read (the reading thread of an import), added up by a CadenceTally."""

    names: list[str]
    count: list[int]
    distinct: list[int]
    first: list[int]
    last: list[int]

    @classmethod
    def of(cls, scalars: pd.DataFrame) -> "ChunkCadence":
        codes, names = pd.factorize(scalars["key"])
        steps = scalars["step"].to_numpy()
        if not len(steps):
            return cls([], [], [], [], [])
        order = np.lexsort((steps, codes))  # by key, then step: a key's first row is its lowest step
        codes, steps = codes[order], steps[order]
        first = np.r_[True, codes[1:] != codes[:-1]]
        last = np.r_[first[1:], True]
        new_step = first | np.r_[True, steps[1:] != steps[:-1]]
        return cls([str(n) for n in names], np.bincount(codes, minlength=len(names)).tolist(),
                   np.bincount(codes[new_step], minlength=len(names)).tolist(),
                   steps[first].tolist(), steps[last].tolist())  # codes run 0..n-1 in order


class CadenceTally:
    """Cadences of a log read chunk by chunk, in memory that does not grow with the log; a
    chunk holds whole steps, so distinct steps add up, and `every` is the mean gap."""

    def __init__(self) -> None:
        self._stats: dict[str, list[int]] = {}  # key -> [count, steps, first, last]

    def add(self, part: ChunkCadence) -> None:
        for key, count, distinct, low, high in zip(part.names, part.count, part.distinct, part.first, part.last):
            have = self._stats.setdefault(key, [0, 0, low, high])
            have[0] += count
            have[1] += distinct
            have[2], have[3] = min(have[2], low), max(have[3], high)

    def cadences(self) -> dict[str, Cadence]:
        return {k: Cadence(n, s, (hi - lo) / (s - 1) if s > 1 else 0.0, lo, hi)
                for k, (n, s, lo, hi) in self._stats.items()}


def densest(cadence: dict[str, Cadence]) -> float:
    """The run's own logging interval: that of the series logged at the most steps (the smallest
    among them), 0 when none is logged twice. Not the smallest interval of any series: one logged
    at two neighbouring steps (a metric at steps 0 and 1 only) would make every other series
    look sparse."""
    logged = [c for c in cadence.values() if c.steps > 1]
    if not logged:
        return 0.0
    most = max(c.steps for c in logged)
    return min(c.every for c in logged if c.steps == most)


def is_dense(c: Cadence, finest: float) -> bool:
    return c.steps > 1 and c.every <= max(finest, 1.0) * DENSE_FACTOR


def words(name: str) -> list[str]:
    return [w for w in re.split(r"[/_\-. ]+", name.lower()) if w]


def infer(name: str, cadence: dict[str, Cadence]) -> tuple[str, str] | None:
    """(gapwatch key, the evidence) for a name no profile rule explains, or None."""
    c = cadence.get(name)
    finest = densest(cadence)
    dense = c is not None and is_dense(c, finest)
    sparser_exists = any(is_dense(o, finest) for o in cadence.values()) and not dense
    if name in TOKEN_KEYS:
        return schema.TRAIN_TOKENS, "name: a cumulative token count"
    w = words(name)
    core = tuple(x for x in w if x not in PLACE_WORDS)
    if core in LR_WORDS:
        return schema.OPTIM_LR, "guess from the name alone"
    if core in GRAD_NORM_WORDS:
        return schema.TRAIN_GRAD_NORM, "guess from the name alone"
    if re.fullmatch(r"lr-[A-Za-z][\w.]*", name):
        return schema.OPTIM_LR, "name: Lightning's lr-<optimizer>"
    rate = _token_rate(w)
    if rate is not None:
        return rate
    if step_time_scale(name) is not None:
        return schema.PERF_STEP_TIME_S, "name: the time a step took"
    held = [x for x in w if x in HELDOUT_WORDS]
    twin = loss_twin(name)
    if twin == "step" and not held:
        return schema.TRAIN_LOSS, "name: a training loss logged at each step, beside its mean over an epoch"
    if twin == "epoch" and held:
        dataset = "_".join(x for x in w if x not in HELDOUT_WORDS and x not in ("loss", "epoch")) or held[0]
        return schema.heldout_key(dataset), "name: the mean over the held-out set"
    if twin == "epoch":
        if any(loss_twin(o) == "step" and not set(words(o)) & set(HELDOUT_WORDS) for o in cadence):
            return None  # a training loss's mean over an epoch beside its per-step values: its own name
        return schema.TRAIN_LOSS, "name: a training loss's mean over each epoch, the only one logged"
    # The loss named first is as common ("Loss/train", "Loss/test" in torch's TensorBoard docs).
    if "loss" not in w or "loss" not in (w[0], w[-1]):
        return None
    rest = [x for x in w if x not in HELDOUT_WORDS and x != "loss"]
    if held:
        dataset = "_".join(rest) or held[0]
        evidence = (f"name ({held[0]}) and cadence ({c.describe()} beside a denser series)"
                    if sparser_exists else f"guess from the name ({held[0]}) alone")
        return schema.heldout_key(dataset), evidence
    if rest and not set(rest) <= set(TRAIN_WORDS):
        return None
    if sparser_exists:
        if c.steps <= 1:
            return None  # logged once: a summary (the Hugging Face Trainer's mean over the run), no evaluation
        # A training-split loss measured at evaluation time only, beside a per-step series.
        return schema.heldout_key("train"), f"name and cadence ({c.describe()}, not every step)"
    if dense and c.steps > 2:
        return schema.TRAIN_LOSS, f"name and cadence ({c.describe()})"
    return schema.TRAIN_LOSS, "guess from the name alone"


def _token_rate(w: list[str]) -> tuple[str, str] | None:
    """The run's tokens per second, or one device's, for a name that says so."""
    rate = list(w)
    while rate and rate[-1] in PART_WORDS:  # "tokens_per_sec_per_gpu", "tokens/s/device"
        rate.pop()
        if rate and rate[-1] == "per":
            rate.pop()
    if not any(tuple(rate[-len(end):]) == end for end in TOKEN_RATE_ENDINGS):
        return None
    if set(w) & set(PART_WORDS):
        return schema.PERF_DEVICE_TOKENS_PER_S, "name: tokens per second of one device"
    return schema.PERF_TOKENS_PER_S, "name: tokens per second"


def step_time_scale(name: str) -> float | None:
    """Seconds per unit of a series named as the time one step took, else None."""
    w = re.findall(r"[a-z]+", name.lower())
    scale = TIME_UNITS.get(w[-1], None) if w else None
    if scale is not None:
        w = w[:-1]
    core = tuple(x for x in w if x not in PLACE_WORDS)
    return (scale or 1.0) if core in STEP_TIME_WORDS else None


def lightning_twin(name: str) -> str | None:
    """"step" or "epoch" for a loss that Lightning logged per step and per epoch
    (`self.log(name, on_step=True, on_epoch=True)` stores name_step and name_epoch), else None."""
    w = words(name)
    return w[-1] if len(w) >= 2 and w[-2] == "loss" and w[-1] in ("step", "epoch") else None


def loss_twin(name: str) -> str | None:
    """"step" or "epoch" for a loss logged per step or as its mean over each epoch, as Lightning
    names them (lightning_twin) or Keras' TensorBoard callback does (`batch_loss` with
    `update_freq="batch"`, `epoch_loss` in its train/ and validation/ folders), else None."""
    w = words(name)
    if len(w) >= 2 and w[-1] == "loss" and w[-2] in ("batch", "epoch"):
        return "step" if w[-2] == "batch" else "epoch"
    return lightning_twin(name)


def _validation_batches(name: str) -> bool:
    """A held-out loss's per-step twin: Lightning logs it per validation batch, numbered by
    validation batch, not by training step, so it has no place on the run's step axis."""
    return lightning_twin(name) == "step" and any(x in HELDOUT_WORDS for x in words(name))


def with_evidence(profile: Profile, names, cadence: dict[str, Cadence]) -> tuple[Profile, dict]:
    """The profile with a rule for each name its rules leave unexplained and the evidence
    explains (tried after its own rules, so a user's rule always wins), and name -> evidence."""
    taken = {profile.map_name(n)[0] for n in names if profile.map_name(n)[2]}
    extra, evidence = [], {}
    batches = [str(n) for n in names if not profile.map_name(n)[2] and _validation_batches(str(n))]
    for name in batches:
        extra.append(Rule(re.escape(name), None))
        evidence[name] = "dropped: one validation batch's loss, at Lightning's count of validation batches"
    # Its own count would pass for the densest series and make the training loss look sparse.
    cadence = {k: c for k, c in cadence.items() if k not in batches}
    for name in names:
        if str(name) in batches:
            continue
        if str(name).startswith("_") or profile.map_name(name)[2]:
            continue
        hit = infer(str(name), cadence)
        if hit is None or hit[0] in taken:
            continue
        taken.add(hit[0])
        scale = step_time_scale(str(name)) if hit[0] == schema.PERF_STEP_TIME_S else 1.0
        extra.append(Rule(re.escape(str(name)), hit[0], scale))
        evidence[str(name)] = hit[1]
    if not extra:
        return profile, evidence
    return Profile(profile.name, profile.description, profile.rules + tuple(extra),
                   profile.step_key), evidence


def pick_profile(named: Profile | None, names, cadence: dict[str, Cadence], *,
                 prefer: str | None = None, user_file=None) -> tuple[Profile, dict]:
    """(profile, name -> evidence) for a source's names: the profile named, taken at its word,
    else the one detection finds (names and contradicting data weighed) with a rule added for
    each name the evidence explains (`with_evidence`)."""
    chosen = resolve_profile(named, names, prefer=prefer, user_file=user_file,
                             against=lambda p: contradictions(p, names, cadence))
    if named:
        return chosen, {}
    return with_evidence(chosen, names, cadence)


def contradictions(profile: Profile, names, cadence: dict[str, Cadence]) -> int:
    """How many of the profile's rules the data contradicts: a per-step series called held out
    though its name says nothing of it, or a sparse series beside a denser one called the
    training loss."""
    finest = densest(cadence)
    has_dense = any(is_dense(c, finest) for c in cadence.values())
    bad = 0
    for name in names:
        key, _, matched = profile.map_name(name)
        c = cadence.get(str(name))
        if not matched or key is None or c is None:
            continue
        dense = is_dense(c, finest)
        named_heldout = any(x in HELDOUT_WORDS for x in words(str(name)))
        if key.startswith("eval/heldout/") and dense and not named_heldout and has_dense and (
                any(not is_dense(o, finest) for o in cadence.values())):
            bad += 1
        elif key == schema.TRAIN_LOSS and not dense and has_dense:
            bad += 1
    return bad


def mapping_rows(names, key_map: dict[str, str], profile: Profile, evidence: dict[str, str],
                 cadence: dict[str, Cadence], step_key: str | None = None,
                 step_reason: str = "the trainer's step") -> list[dict]:
    """One row per source name: source, key (None: dropped), cadence, count, reason."""
    rows = []
    if step_key:
        c = cadence.get(step_key)
        rows.append({"source": step_key, "key": "(step axis)",
                     "cadence": c.describe() if c else "", "count": c.count if c else None,
                     "reason": step_reason})
    for name in names:
        name = str(name)
        if name.startswith("_") or name == step_key:
            continue
        c = cadence.get(name)
        key = key_map.get(name)
        matched = profile.map_name(name)[2]
        if name in evidence:
            reason = evidence[name]
        elif key is None:
            reason = f"dropped by profile {profile.name}"
        elif matched:
            reason = f"profile {profile.name}"
        else:
            reason = "kept under its own name"
        rows.append({"source": name, "key": key, "cadence": c.describe() if c else "",
                     "count": c.count if c else None, "reason": reason})
    return rows


def format_table(rows: list[dict], limit: int | None = None) -> str:
    """The mapping as aligned text columns; limit: at most that many rows, then a count of the
    rest."""
    head = ("source key", "gapwatch metric", "cadence", "count", "why")
    shown = rows if limit is None else rows[:limit]
    # A source name is printed cut short: a file may name a metric with megabytes of text.
    body = [(cut(str(r["source"])), r["key"] or "(dropped)", r["cadence"],
             "" if r["count"] is None else f"{r['count']:,}", r["reason"]) for r in shown]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip()
             for line in (head, *body)]
    if len(rows) > len(shown):
        lines.append(f"... {len(rows) - len(shown)} more (--dry-run lists them all)")
    return "\n".join(lines)


__all__ = ["Cadence", "CadenceTally", "cadences", "infer", "with_evidence", "pick_profile",
           "contradictions", "mapping_rows",
           "format_table", "HELDOUT_WORDS", "TOKEN_KEYS"]
