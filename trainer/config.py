"""The whole training configuration as one typed dataclass, its presets, and YAML/TOML loading."""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.errors import GapwatchError
from trainer import corpus
from trainer.data import DataConfig
from trainer.faults import FaultConfig
from trainer.model import ModelConfig, preset
from trainer.optim import OptimConfig
from trainer.packing import CorpusSpec


@dataclass(frozen=True)
class EvalConfig:
    """In-loop evaluation through evals/ (each eval is a host-device sync, so it is periodic)."""

    heldout_every: int = 0
    """Steps between held-out loss evaluations of the corpus's held-out split (0: never)."""
    heldout_max_tokens: int = 16_384
    """Held-out tokens scored per evaluation (whole documents, in a fixed order)."""
    heldout_batch_size: int = 8
    """Windows per call of the model during held-out evaluation."""
    downstream_every: int = 0
    """Steps between downstream evals through lm-eval (0: never)."""
    downstream_tasks: tuple[str, ...] = ("arc_easy", "piqa")
    """lm-eval tasks (evals.task_suite.TASKS) run at each downstream evaluation."""
    downstream_limit: int | None = 50
    """Documents per task (the same seeded subset each time); None for all."""
    downstream_data_dir: str | None = None
    """Eval data folder (default: what `gapwatch evals fetch-data` filled)."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides what a run computes, plus how it checkpoints and reports."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Model shape and numerics."""
    data: DataConfig = field(default_factory=DataConfig)
    """Corpus, batching and data hosts."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer and learning-rate schedule."""
    evals: EvalConfig = field(default_factory=EvalConfig)
    """Held-out and downstream evaluation."""
    fault: FaultConfig = field(default_factory=FaultConfig)
    """Fault to inject (none by default)."""
    steps: int = 200
    """Optimizer steps of the whole run (the schedule's length)."""
    seed: int = 0
    """Seeds the data order, and the initial parameters unless init_seed is set."""
    init_seed: int | None = None
    """Seeds the initial parameters apart from the data order (OLMo keeps the two apart too)."""
    checkpoint_every: int = 50
    """Steps between asynchronous checkpoints (the last step is always saved)."""
    gc_every: int = 100
    """Steps between explicit gc.collect(1) calls, with automatic GC off (OLMo 2 does this)."""
    max_in_flight: int = 2
    """Steps dispatched ahead of the device before the loop waits for the oldest to finish."""
    kill_at_step: int | None = None
    """SIGKILL the run's first process after this step, once the checkpoints it started are written
    (a real crash, for resume tests and demos)."""
    preflight: bool = True
    """Check a matmul against NumPy before training, as OLMo's cluster does before each job."""
    peak_flops: float | None = None
    """Peak FLOP/s for MFU; None: the data-sheet table or, on CPU, a measurement (trainer/flops.py)."""

    @property
    def parameter_seed(self) -> int:
        return self.seed if self.init_seed is None else self.init_seed

    @property
    def tokens_per_step(self) -> int:
        return self.data.global_batch_size * self.model.max_seq_len

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, TrainConfig] = {
    # Unit tests and quick checks: a model of 0.2M parameters on 0.1 MB of standard library text,
    # read by 8 data hosts.
    "tiny": TrainConfig(
        model=preset("tiny"),
        data=DataConfig(corpus=CorpusSpec(max_train_chars=100_000, max_heldout_chars=20_000),
                        global_batch_size=8, data_hosts=8),
        optim=OptimConfig(lr=1e-2, warmup_steps=10),
        steps=100,
        checkpoint_every=25,
    ),
    # The demo's runs: 16 data hosts played by one process (the shape of the real bug), on the
    # standard library's docstrings (prose: a record's loss varies far less than code's, so a
    # remembered record stands out); ~3,600 records of 33 tokens, so that a clean run of
    # 200 steps x 16 records reads ~88% of one epoch while a double-sharded one samples with
    # replacement. Small batches: each record weighs more in its step, so one reading is remembered.
    # The parameters' seed is fixed: a rerun with another --seed changes only the data order.
    "demo": TrainConfig(
        model=preset("demo"),
        data=DataConfig(corpus=CorpusSpec(sources=(corpus.STDLIB_DOCSTRINGS,), max_train_chars=300_000,
                                          max_heldout_chars=100_000),
                        global_batch_size=16, data_hosts=16),
        optim=OptimConfig(lr=5e-3, warmup_steps=20),
        evals=EvalConfig(heldout_every=25, heldout_max_tokens=16_384),
        steps=200,
        checkpoint_every=50,
        init_seed=0,
    ),
}


def load(spec: str) -> TrainConfig:
    """A preset name or a YAML/TOML file whose keys mirror TrainConfig (model may be a preset name)."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise GapwatchError(f"config {spec!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        text = path.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise GapwatchError(f"config {path}: cannot parse ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise GapwatchError(f"config {path}: expected a mapping at the top level")
    base = PRESETS[raw.pop("preset")] if raw.get("preset") in PRESETS else TrainConfig()
    if isinstance(raw.get("model"), str):
        raw["model"] = dataclasses.asdict(preset(raw["model"]))
    return merge(base, raw, where=str(path))


def merge(base: Any, changes: dict[str, Any], where: str) -> Any:
    """A copy of dataclass `base` with `changes` (nested dicts for nested dataclasses) applied."""
    hints = typing.get_type_hints(type(base))
    updates = {}
    for key, value in changes.items():
        if key not in hints:
            raise GapwatchError(f"config {where}: unknown setting {key!r} in {type(base).__name__}")
        current = getattr(base, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            updates[key] = merge(current, value, f"{where}:{key}")
        else:
            updates[key] = _coerce(value, hints[key], f"{where}:{key}")
    try:
        return dataclasses.replace(base, **updates)
    except (TypeError, ValueError) as exc:
        raise GapwatchError(f"config {where}: {exc}") from None


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Lists become tuples where the field is a tuple; numbers are checked against the field type."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and isinstance(value, (list, tuple)):
        return tuple(value)
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, str, bool) and not isinstance(value, hint):
        raise GapwatchError(f"config {where}: expected {hint.__name__}, got {value!r}")
    return value
