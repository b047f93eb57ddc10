"""The names and records every part of gapwatch agrees on.

Metric keys are declared here once, as `namespace/name` in lower snake case with units in the name
where they would otherwise be ambiguous. Importers map other trainers' conventions onto these keys;
detectors, the dashboard and the report only ever see these.
"""

from __future__ import annotations

import bisect
import enum
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from monitor.jsonutil import readable

# --- training ---------------------------------------------------------------------------------
TRAIN_LOSS = "train/loss"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_TOKENS = "train/tokens"  # cumulative tokens consumed up to and including this step
OPTIM_LR = "optim/lr"

# --- performance ------------------------------------------------------------------------------
PERF_STEP_TIME_S = "perf/step_time_s"
PERF_TOKENS_PER_S = "perf/tokens_per_s"
PERF_DEVICE_TOKENS_PER_S = "perf/device_tokens_per_s"  # one device's (GPU's, rank's) share of it
PERF_MFU = "perf/mfu"  # a fraction in [0, 1], not a percentage
# Quantities that cannot be negative: a negative value of one in another trainer's log is its mark
# for "not measured yet" (nanoGPT logs MFU as -100% before its first estimate), and is not imported.
NON_NEGATIVE_KEYS = (PERF_STEP_TIME_S, PERF_TOKENS_PER_S, PERF_DEVICE_TOKENS_PER_S, PERF_MFU)

# Wall time of a row whose source logged no time (a W&B CSV export, most CSV and JSONL logs): the
# store's column needs a number, and the moment of the import would read as when the run logged it.
UNKNOWN_WALL_TIME = 0.0

# --- the host ---------------------------------------------------------------------------------
# The host's 1-minute load average (os.getloadavg) divided by its CPU count: above 1, more tasks
# wanted a CPU than there were CPUs, so slow steps may be the machine's, not the run's.
SYS_LOAD_PER_CPU = "sys/load_per_cpu"

# --- data loader ------------------------------------------------------------------------------
DATA_CURSOR = "data/cursor"  # records consumed so far, summed over every data host
DATA_EPOCH = "data/epoch"
DATA_UNIQUE_FRACTION = "data/unique_fraction"  # share of the corpus seen at least once
DATA_SEEN_ONCE_FRACTION = "data/seen_once_fraction"
DATA_SEEN_2PLUS_FRACTION = "data/seen_2plus_fraction"
DATA_EXPECTED_UNIQUE_FRACTION = "data/expected_unique_fraction"  # what the sampling plan promises
# Share of this step's batch made of records the run had read before (0 all through a clean epoch).
DATA_BATCH_REREAD_FRACTION = "data/batch_reread_fraction"
# Within this step's batch: mean loss of the records read for the first time minus that of the
# records read before, measured on the same parameters, so seed noise cannot reach it; positive when
# the model remembers what it saw. 0 where the batch holds only one kind (then nothing is measured:
# read it together with DATA_BATCH_REREAD_FRACTION).
TRAIN_REREAD_LOSS_GAP = "train/reread_loss_gap"

# --- logit parity between two scoring functions ------------------------------------------------
PARITY_KL_MEAN = "parity/kl_mean"
PARITY_TOP1 = "parity/top1"

# --- what detectors judge that no trainer logs ---------------------------------------------------
# Held-out minus train loss at a checkpoint (the memorization_trend detector's metric).
HELDOUT_TRAIN_GAP = "eval/heldout/gap"

# --- detector outputs that are series rather than intervals ------------------------------------
SPIKE_SCORE_LOSS = "detect/spike_score/train_loss"
SPIKE_SCORE_GRAD_NORM = "detect/spike_score/grad_norm"

CORE_KEYS = (
    TRAIN_LOSS,
    TRAIN_GRAD_NORM,
    TRAIN_TOKENS,
    OPTIM_LR,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    PERF_MFU,
    SYS_LOAD_PER_CPU,
    DATA_CURSOR,
    DATA_EPOCH,
    DATA_UNIQUE_FRACTION,
    DATA_SEEN_ONCE_FRACTION,
    DATA_SEEN_2PLUS_FRACTION,
    DATA_EXPECTED_UNIQUE_FRACTION,
    DATA_BATCH_REREAD_FRACTION,
    TRAIN_REREAD_LOSS_GAP,
)

HELDOUT_PREFIX = "eval/heldout/"
DOWNSTREAM_PREFIX = "eval/downstream/"
HELDOUT_STATS = ("loss", "bpb", "stderr", "n")


def heldout_key(dataset: str, stat: str = "loss") -> str:
    """`eval/heldout/<set>/<stat>`; stat is loss, bpb, stderr (of the loss) or n (sequences)."""
    if stat not in HELDOUT_STATS:
        raise ValueError(f"held-out stat must be one of {HELDOUT_STATS}, not {stat!r}")
    return f"{HELDOUT_PREFIX}{slug(dataset)}/{stat}"


def downstream_key(task: str, metric: str, stat: str | None = None) -> str:
    """`eval/downstream/<task>/<metric>`, or with stat `stderr` or `n` appended."""
    if stat not in (None, "stderr", "n"):
        raise ValueError(f"downstream stat must be stderr or n, not {stat!r}")
    key = f"{DOWNSTREAM_PREFIX}{slug(task)}/{slug(metric)}"
    return f"{key}/{stat}" if stat else key


# The band around a sampled series (a W&B chart export's min and max of the points it merged):
# `band/min/<key>` and `band/max/<key>`, outside every namespace a detector reads.
BAND_PREFIX = "band/"
BAND_SIDES = ("min", "max")


def band_key(key: str, side: str) -> str:
    """`band/<side>/<key>`: the low (min) or high (max) edge of the band around `key`."""
    if side not in BAND_SIDES:
        raise ValueError(f"band side must be min or max, not {side!r}")
    return f"{BAND_PREFIX}{side}/{key}"


# Steps are stored as 64-bit integers: the largest a store keeps.
MAX_STEP = 2**63 - 1

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*(/[a-z0-9_.\-]+)+$")
_SLUG_BAD = re.compile(r"[^a-z0-9_.\-]+")


def slug(part: str) -> str:
    """Lower snake case for one path part of a key: `CE loss` -> `ce_loss`."""
    cleaned = _SLUG_BAD.sub("_", part.strip().lower()).strip("_")
    if not cleaned:
        raise ValueError(f"{part!r} has no characters usable in a metric key")
    return cleaned


def is_valid_key(key: str) -> bool:
    return bool(_KEY_RE.match(key)) and len(key) <= 200


# --- events -------------------------------------------------------------------------------------
class EventKind(str, enum.Enum):
    RUN_START = "run_start"  # payload: config, git_sha, versions
    CHECKPOINT = "checkpoint"  # payload: path, step
    RESUME = "resume"  # payload: restored_step, restored_data_position, global_batch_size
    RESTART = "restart"  # a supervisor started the process again; payload: reason, exit_code
    EVAL = "eval"  # payload: eval (heldout|downstream|parity) and the set or task names
    PREFLIGHT = "preflight"  # payload: ok, max_abs_error
    GC = "gc"  # payload: generation, duration_s


# --- run descriptions -----------------------------------------------------------------------------
class RunStatus(str, enum.Enum):
    RUNNING = "running"
    FINISHED = "finished"
    CRASHED = "crashed"
    IMPORTED = "imported"


@dataclass(frozen=True)
class MetricRows:
    """Metric rows of one write as parallel arrays, each key a code into `names`: what the logging
    client hands `Store.write_metrics` as it holds them, with no frame built between (the store
    checks keys and steps as it checks a frame's)."""

    steps: np.ndarray
    """int64."""
    codes: np.ndarray
    """Each row's key, as an index into `names`."""
    names: list[str]
    values: np.ndarray
    """float64; NaN and +/-Inf are values like any other."""
    wall_times: np.ndarray
    """Unix seconds, float64."""
    attempts: np.ndarray
    """int64: the attempt (process of a resumed run) that logged each row."""


class SeriesMark(NamedTuple):
    """A series' high-water mark, kept by the store with every write (and measured on a run held
    in memory the same way): what the watch service and the incident tracker know of its progress."""

    first_step: int
    last_step: int
    rows: int


@dataclass(frozen=True)
class Alignment:
    """How `monitor.judging.align` put a pair of runs on one axis; both aligned runs carry it."""

    axis: str
    """"step" or "tokens"."""
    reason: str
    """Why that axis, in words."""
    run: str
    reference: str
    metrics: dict[str, dict[str, Any]]
    """Per metric key: the points aligned and the method ("exact", "interp ...")."""
    reference_only: tuple[str, ...] = ()
    """The keys the reference logs and the run does not: left out of the comparison, named so that
    a detector can say why a series went unjudged (a held-out set of another name)."""


@dataclass
class RunInfo:
    """What detectors need to know about a run beyond its series. Filled from the runs table."""

    name: str
    tokens_per_step: float | None = None
    global_batch_size: int | None = None  # records (sequences) per optimizer step, all hosts
    records_per_epoch: int | None = None  # records in one pass over the training split
    reference: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    """The run's own configuration (hyperparameters), as logged."""
    alignment: Alignment | None = None
    """Set on a run `align` put on its pair's axis."""
    pinned: dict[str, Any] = field(default_factory=dict)
    """Facts the incremental mode pinned from rows its tail no longer holds (each column's
    logging interval, a baseline so far), keyed by the detector's own names; empty when a whole
    run is judged."""


# Keys under which a run's config carries the numbers of RunInfo.
CONFIG_GLOBAL_BATCH_SIZE = "global_batch_size"
CONFIG_RECORDS_PER_EPOCH = "records_per_epoch"
CONFIG_TOKENS_PER_STEP = "tokens_per_step"
# True when a replayed step must reproduce its loss bit for bit (the resume detector then treats
# any difference as a fault rather than numerical noise).
CONFIG_DETERMINISTIC = "deterministic"


# A column logged at fewer than one step in 1/SPARSE_SHARE of a long frame's steps (held-out sets
# every 1,000 steps, downstream tasks every few thousand) is kept sparse (Sparse[float64], NaN
# filled): it costs its logged values, not 8 bytes a step, so a run's frame grows with its dense
# metrics and not with the number of evals it logs. Frames shorter than SPARSE_MIN_STEPS (the
# watch service's batches, small runs) stay dense: there is nothing to save.
SPARSE_SHARE = 1 / 8
SPARSE_MIN_STEPS = 4096


def keep_sparse(logged: int, steps: int) -> bool:
    """Whether a column with `logged` values in a frame of `steps` rows is kept sparse."""
    return steps >= SPARSE_MIN_STEPS and logged < SPARSE_SHARE * steps


def with_sparse_columns(frame: pd.DataFrame, sparse: dict[str, pd.arrays.SparseArray]) -> pd.DataFrame:
    """`frame` (dense columns, sorted) with the `sparse` columns inserted, every column in sorted
    order. Each insert adds a block and leaves the dense one in place, where building one frame
    from all the columns would copy it."""
    with warnings.catch_warnings():
        # One block per sparse column is what this is for, not the fragmentation pandas warns of.
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
        for key in sorted(sparse):
            frame.insert(bisect.bisect_left(list(frame.columns), key), key, sparse[key])
    frame.columns = pd.Index(list(frame.columns), dtype=str)
    return frame


def non_nan_cells(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Positions and values of a frame column's cells that are not NaN; a sparse column's from its
    stored values, without writing out a value for every step of the run."""
    if isinstance(column.dtype, pd.SparseDtype):
        array = column.array
        at = array.sp_index.to_int_index().indices.astype(np.int64)
        values = np.asarray(array.sp_values, dtype=float)
        if np.isnan(array.fill_value):
            keep = ~np.isnan(values)
            return (at, values) if keep.all() else (at[keep], values[keep])
    values = column.to_numpy(dtype=float)
    at = np.flatnonzero(~np.isnan(values))
    return at, values[at]


@dataclass
class RunData:
    """One run as detectors and the report see it, at full resolution.

    scalars:  wide frame, index `step` (int64, ascending, unique), one float column per metric key,
              the latest attempt of each step; NaN where a metric was not logged at that step (and
              also where the run logged NaN: `nonfinite_steps` tells the two apart). A rarely
              logged metric's column may be Sparse[float64] (keep_sparse): the same values, and
              `.to_numpy(dtype=float)` gives the dense column.
    events:   columns step, kind, attempt, payload (dict), sorted by step.
    repeats:  long frame of steps logged by more than one attempt: columns key, step, attempt, value.
    logged_nonfinite: long frame (key, step, value) of the values the run itself logged as NaN/Inf.
    """

    info: RunInfo
    scalars: pd.DataFrame
    events: pd.DataFrame = field(default_factory=lambda: empty_events())
    repeats: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"key": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
             "attempt": pd.Series(dtype="int64"), "value": pd.Series(dtype=float)}
        )
    )
    logged_nonfinite: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"key": pd.Series(dtype=str), "step": pd.Series(dtype="int64"),
             "value": pd.Series(dtype=float)}
        )
    )

    @property
    def name(self) -> str:
        return self.info.name

    def series(self, key: str) -> pd.Series:
        """One metric with its unlogged steps dropped (logged NaN/Inf kept as such)."""
        if key not in self.scalars.columns:
            return pd.Series(dtype=float, name=key, index=pd.Index([], dtype="int64", name="step"))
        col = self.scalars[key]
        if isinstance(col.dtype, pd.SparseDtype):
            return self._sparse_series(key, col)
        logged = col.notna()
        if len(self.logged_nonfinite):
            nf = self.logged_nonfinite[self.logged_nonfinite["key"] == key]
            logged |= col.index.isin(nf["step"])
        # A metric logged at every step is the column itself (copy-on-write keeps it apart from
        # the frame), not a 1.4M-value copy per call.
        return col if logged.all() else col[logged]

    def values_at(self, key: str, steps) -> np.ndarray:
        """`key`'s values at `steps` (NaN where it logged none), as `scalars[key].reindex(steps)`
        gives them, without writing out every step of a sparse column."""
        return self.series(key).reindex(steps).to_numpy(dtype=float)

    def _sparse_series(self, key: str, col: pd.Series) -> pd.Series:
        """series() of a sparse column, from its stored values: masking it as a dense column would
        cost a pass over every step of the run per call."""
        array = col.array
        at = array.sp_index.to_int_index().indices.astype(np.int64)
        values = np.asarray(array.sp_values, dtype=float)
        nf = self.logged_nonfinite
        if len(nf) and (nf["key"] == key).any():
            # NaN is the column's fill: a logged NaN is not among the stored values.
            nan_at = self.scalars.index.get_indexer(nf.loc[nf["key"] == key, "step"].to_numpy())
            every = np.union1d(at, nan_at[nan_at >= 0])
            filled = np.full(len(every), np.nan)
            filled[np.searchsorted(every, at)] = values
            at, values = every, filled
        return pd.Series(values, index=self.scalars.index[at], name=key)


def file_name(run: str) -> str:
    """A run name as one file or folder name: anything but letters, digits, `-`, `_` and `.`
    becomes `_`, at most 100 characters, never empty (the spool and the trainer's run folder)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run)[:100] or "run"


# The columns of a long frame of metric values (one row per run, key and step) and their dtypes.
LONG_DTYPES = {"run": str, "key": str, "step": "int64", "attempt": "int64", "value": float}


def empty_long(*columns: str) -> pd.DataFrame:
    """A typed empty long frame with these columns (default key, step, value), in this order."""
    return pd.DataFrame({c: pd.Series(dtype=LONG_DTYPES[c]) for c in (columns or ("key", "step", "value"))})


def empty_events() -> pd.DataFrame:
    return pd.DataFrame(
        {"step": pd.Series(dtype="int64"), "kind": pd.Series(dtype=str),
         "attempt": pd.Series(dtype="int64"), "payload": pd.Series(dtype=object)}
    )


# --- detections -------------------------------------------------------------------------------------
class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return {"info": 0, "warning": 1, "critical": 2}[self.value]


@dataclass
class Detection:
    """An interval in which one detector saw one metric misbehave, with the numbers behind it."""

    run: str
    detector: str
    metric: str
    start_step: int
    end_step: int
    peak_step: int
    score: float
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    attempt: int | None = None
    known_step: int | None = None
    """The step at which the finding first held: the end of the unit (window, checkpoint, block)
    that made it persistent. A watcher judging the run as it grows learns of it there, and a whole-run
    pass takes its findings in this order to reach the same incidents (None: `end_step`)."""

    @property
    def known_at(self) -> int:
        return int(self.end_step if self.known_step is None else self.known_step)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        d["evidence"] = readable(self.evidence)
        d["score"] = readable(self.score)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Detection":
        d = dict(d)
        d["severity"] = Severity(d["severity"])
        return cls(**d)


class Story(str, enum.Enum):
    """The underlying problem a detection tells of. Detections of one story on one run that touch
    are one incident (monitor/alerting/incidents.py); each detector declares its story."""

    MEMORIZATION = "memorization"
    """Train loss gained on something held-out loss did not: repeated data."""
    DIVERGENCE = "divergence"
    """The run's losses or evals moved away from the reference's, or its evals regressed."""
    INSTABILITY = "instability"
    """Loss or grad-norm spikes, NaN/Inf, grad-norm growth."""
    DATA = "data"
    """The data loader's position and coverage, resume consistency."""
    THROUGHPUT = "throughput"
    """Stalls and slow steps."""


class Section(str, enum.Enum):
    """Where a detector's findings are shown: the report's table or figure and the dashboard's panel
    of that name list them. Each detector declares its sections."""

    TRAIN = "train"
    """The train-loss comparison with the reference (the report's train table, the delta panel)."""
    HELDOUT = "heldout"
    """Held-out losses against the reference."""
    DOWNSTREAM = "downstream"
    """Downstream evals."""
    GRAD_NORM = "grad_norm"
    """The grad-norm chart (spikes drawn on it)."""
    THROUGHPUT = "throughput"
    """Step time, tokens a second and MFU (stalls drawn on them)."""
    DATA = "data"
    """The data loader's position and coverage."""
    RESUME = "resume"
    """Resume consistency."""


class Drawing(str, enum.Enum):
    """A picture of a detector's own statistic that the report and the dashboard draw, and what the
    detector that declares it provides for it (one detector per drawing)."""

    DELTA_BAND = "delta_band"
    """The threshold around run - reference on the train chart: `window_width(interval)` (steps
    per window for a metric logged every `interval` steps) and `band(stderr, level, slope)`."""
    SPIKE_SCORES = "spike_scores"
    """Spike scores of each run: `score_keys` ({metric: score series key}), `score_series(run)`,
    `score_window` and `definition` (the rule's name)."""
    GOODPUT = "goodput"
    """Ideal over actual step time: `step_verdicts(run, times, finished=True)` with an `ideal`
    and a `time` column."""
    HELDOUT_BAND = "heldout_band"
    """The threshold around run - reference of held-out loss at the run's checkpoints:
    `checkpoint_deltas(run, reference)`, a frame (step, delta, band) of the checkpoints judged."""


@dataclass(frozen=True)
class VerdictRole:
    """How a detector's finding names the report's one-sentence verdict. Findings overturn "tied"
    in order of `precedence` (lower first): a run that went NaN, read its data wrongly or resumed
    wrongly makes every other difference a consequence; memorization, which combines train and
    held-out, comes before either of them alone. `{direction}` in `kind` and `headline` is filled
    with "above" or "below" from the finding's evidence."""

    precedence: int
    kind: str
    headline: str


class CleanRule(str, enum.Enum):
    """What shows that a detector's condition is gone, so that an incident may resolve."""

    JUDGED_STEPS = "judged_steps"
    """Every logged step the detector reads is a test of its own (a spike, a NaN, a slow step): a
    step judged and not flagged passed it, so steps judged past the last flagged one are clean."""
    CLEAN_VERDICTS = "clean_verdicts"
    """A window or checkpoint that is not flagged may be inconclusive: only the detector's own clean
    verdicts (`Clean`, an equivalence test that passed) end its incidents."""


@dataclass
class Clean:
    """A unit (window, checkpoint) in which a detector judged `metric` and found its condition gone,
    by a test with the power stated in `evidence` (the band the effect was shown to lie within).
    `reference` names the run this unit shows `run` alike to (an equivalence test against it);
    None for a verdict of the run alone or a one-sided one (not worse, perhaps much better)."""

    run: str
    detector: str
    metric: str
    start_step: int
    end_step: int
    evidence: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": readable(self.evidence)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Clean":
        return cls(**d)


@dataclass(frozen=True)
class NotJudged:
    """A detector's answer when it could not judge (part of) a run: silence would read as "clean".

    metric is None when the whole detector could not judge the run (no reference, say); `needs`
    says what would let it judge, where that is known ("60 more logged steps").
    """

    detector: str
    reason: str
    metric: str | None = None
    needs: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NotJudged":
        return cls(**d)

    def describe(self, subject: str | None = None) -> str:
        """One line: what was not judged (`subject`, the detector's words for what it judges, or
        else its name), on which metric, why, and what would let it judge."""
        what = subject or self.detector
        what = f"{what} ({self.metric})" if self.metric else what
        return f"{what}: not judged, {self.reason}" + (f" (needs {self.needs})" if self.needs else "")
