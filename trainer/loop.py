"""One training process: resume or start, train to the step budget, checkpoint, report.

The per-step body runs under `jax.transfer_guard("disallow")`: an implicit transfer on the training
thread (`float(loss)`, `np.asarray(x)`, a Python scalar sent to the device) raises on accelerators;
the batch goes to the devices by an explicit transfer. Metrics leave the device on the logging
threads (trainer/sinks.py). On CPU, where device memory is host memory and JAX guards no
device-to-host "transfer", tests/trainer check the same rule by probing every fetch. The loop keeps at most `max_in_flight` steps dispatched
ahead of the device by waiting for an older step to *finish* (`block_until_ready`, which moves no
data): the device always has the next step queued, and the loop's period is the device's step time.
Checkpoints and evaluations are the deliberate, periodic exceptions, outside the guard.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import importlib.metadata
import os
import platform
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
import platformdirs
from jax.sharding import NamedSharding, PartitionSpec

from monitor import schema
from monitor.client import Monitor, NullMonitor
from monitor.errors import GapwatchError
from monitor.schema import EventKind, RunStatus, file_name
from trainer import checkpoint, corpus, flops, optim, packing, preflight
from trainer.config import TrainConfig
from trainer.data import DataHosts
from trainer.distributed import data_parallel_mesh, local_data_hosts
from trainer.evaluation import InLoopEvals
from trainer.faults import Faults
from trainer.sinks import ProgressLineSink, HostSink, Sinks, WandbSink
from trainer.step import (DATA_AXIS, expected_unique_fraction, init_state, make_train_step,
                          state_sharding)

VERSIONED_PACKAGES = ("jax", "jaxlib", "optax", "grain", "orbax-checkpoint", "tokenizers", "numpy")


@dataclass
class RunOptions:
    """How a run reports and where it keeps its files (not part of what it computes)."""

    run: str
    """Run name in the store (and in W&B)."""
    store: str | None = None
    """Store URL; None: $GAPWATCH_STORE or the default SQLite file."""
    run_dir: Path | None = None
    """Checkpoints live in run_dir/checkpoints (default: per-user data dir / runs / <run>)."""
    monitor: bool = True
    """Log to the store (False: benchmarks measuring the cost of logging)."""
    wandb: str | None = None
    """'offline' or 'online' to log to W&B as well."""
    wandb_project: str | None = None
    """W&B project (default 'gapwatch')."""
    console_every: int | None = None
    """Steps between progress lines (None: about 20 lines a run; 0: silent)."""
    restart_exit_code: int | None = None
    """Set by the supervisor when this process replaces one that died with this exit code."""
    project: str | None = None
    """Project of the run in the store."""
    reference: str | None = None
    """Reference run name recorded with the run."""

    def checkpoint_dir(self) -> Path:
        base = self.run_dir or Path(platformdirs.user_data_dir("gapwatch")) / "runs" / file_name(self.run)
        return Path(base) / "checkpoints"


@dataclass
class TrainResult:
    first_step: int
    """First step this process trained (the step after the one it resumed from)."""
    last_step: int
    tokens_per_s: float
    """Mean throughput of this process's steady steps (not compiling, not after periodic work)."""
    checkpoint_dir: Path
    step_times: list[float] = dataclasses.field(default_factory=list)
    """Seconds of each steady step, in order (the trainer benchmark and the device check take
    their medians)."""


def train(config: TrainConfig, options: RunOptions) -> TrainResult:
    return _Trainer(config, options).run()


class _Trainer:
    def __init__(self, config: TrainConfig, options: RunOptions) -> None:
        self.config = config
        self.options = options
        self.faults = Faults(config.fault)
        self.primary = jax.process_index() == 0

    # --- set-up ----------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg, opts = self.config, self.options
        enable_compilation_cache()
        model = cfg.model
        mesh = data_parallel_mesh()
        global_batch = cfg.data.global_batch_size
        if global_batch % mesh.size:
            raise GapwatchError(f"global_batch_size {global_batch} does not split over {mesh.size} devices")
        mngr = checkpoint.manager(opts.checkpoint_dir())
        try:
            return self._run(mngr, mesh, model, global_batch)
        finally:
            mngr.close()

    def _run(self, mngr, mesh, model, global_batch) -> TrainResult:
        cfg, opts = self.config, self.options
        latest = mngr.latest_step()
        tokenizer = loader_states = None
        if latest is not None:
            meta, loader_states, tokenizer = checkpoint.restore_host_side(mngr, latest)
            self._check_compatible(meta)
        say = print if self.primary and opts.console_every != 0 else (lambda _msg: None)
        packed = packing.build(cfg.data.corpus, model.max_seq_len, model.vocab_size, tokenizer=tokenizer,
                               cache_dir=Path(cfg.data.cache_dir) if cfg.data.cache_dir else None, say=say)
        hosts = DataHosts(packed.train, packed.key, cfg.data, cfg.seed, local_data_hosts(cfg.data.data_hosts),
                          loader_shard_options=self.faults.loader_shard_options,
                          before_read=self.faults.before_read)
        records = hosts.records_per_epoch

        direction = optim.direction(cfg.optim)
        base_lr = optim.schedule(cfg.optim, cfg.steps)
        lr_fn = lambda step: base_lr(step) * self.faults.lr_scale(step)  # noqa: E731
        shapes = jax.eval_shape(lambda: init_state(model, direction, records, cfg.parameter_seed))
        shardings = state_sharding(mesh, shapes)
        state = jax.jit(lambda: init_state(model, direction, records, cfg.parameter_seed), out_shardings=shardings)()
        step_fn = make_train_step(model, direction, lr_fn, records, mesh, shapes)

        start = 0
        if latest is not None:
            state = checkpoint.restore_state(mngr, latest, state)
            hosts.restore(loader_states)
            start = self.faults.restored_step(latest)
            if start != latest:
                offset = start - latest
                state = jax.jit(lambda s: {**s, "step": s["step"] + offset}, out_shardings=shardings,
                                donate_argnums=0)(state)

        sinks = self._sinks(records, global_batch, mesh)
        try:
            self._announce(sinks, latest, start, loader_states, global_batch, records, packed.key)
            if start >= cfg.steps:
                say(f"run {opts.run} already reached step {start} of {cfg.steps}")
                sinks.close(status=RunStatus.FINISHED)
                return TrainResult(start, start, float("nan"), opts.checkpoint_dir())
            evals = InLoopEvals(cfg.evals, model, packed.tokenizer, _heldout_name(cfg), packed.heldout)
            # Only a run's very first process crashes on purpose, so a restart can get past it.
            first_process = latest is None and opts.restart_exit_code is None
            result = self._loop(state, step_fn, hosts, sinks, mngr, mesh, evals, packed,
                                start, records, first_process)
        except BaseException:
            sinks.close(status=RunStatus.CRASHED)
            raise
        sinks.close(status=RunStatus.FINISHED)
        return result

    def _check_compatible(self, meta: dict) -> None:
        cfg = self.config
        saved_model = checkpoint.model_config_from_meta(meta)
        problems = []
        if saved_model != cfg.model:
            problems.append("model config differs")
        for key, now in (("global_batch_size", cfg.data.global_batch_size),
                         ("data_hosts", cfg.data.data_hosts), ("seed", cfg.seed),
                         ("init_seed", cfg.parameter_seed)):
            if meta.get(key) != now:
                problems.append(f"{key} was {meta.get(key)}, now {now}")
        if problems:
            raise GapwatchError(f"checkpoint at step {meta.get('step')} in {self.options.checkpoint_dir()} "
                                f"belongs to another run: {'; '.join(problems)}")

    def _sinks(self, records: int, global_batch: int, mesh) -> Sinks:
        cfg, opts = self.config, self.options
        run_config = {
            **cfg.to_dict(),
            schema.CONFIG_GLOBAL_BATCH_SIZE: global_batch,
            schema.CONFIG_RECORDS_PER_EPOCH: records,
            schema.CONFIG_TOKENS_PER_STEP: cfg.tokens_per_step,
            "devices": mesh.size,
            "processes": jax.process_count(),
            # XLA on CPU reproduces a step bit for bit (tests/trainer/test_resume.py); on GPU and
            # TPU some reductions are not deterministic unless asked to be.
            schema.CONFIG_DETERMINISTIC: jax.default_backend() == "cpu",
        }
        if not self.primary:  # every process computes the same metrics; the first one reports
            return Sinks(NullMonitor(), [])
        monitor = (Monitor(opts.run, opts.store, config=run_config, project=opts.project,
                           reference=opts.reference, tokens_per_step=cfg.tokens_per_step)
                   if opts.monitor else NullMonitor())
        host_sinks: list[HostSink] = []
        if opts.wandb:
            host_sinks.append(WandbSink(opts.run, opts.wandb, run_config, opts.wandb_project,
                                        str(opts.checkpoint_dir().parent)))
        every = opts.console_every if opts.console_every is not None else max(cfg.steps // 20, 1)
        if every:
            host_sinks.append(ProgressLineSink(cfg.steps, every))
        return Sinks(monitor, host_sinks)

    def _announce(self, sinks: Sinks, latest, start, loader_states, global_batch, records, corpus_key) -> None:
        cfg, opts = self.config, self.options
        if opts.restart_exit_code is not None:
            sinks.event(EventKind.RESTART, start, reason="process died", exit_code=opts.restart_exit_code)
        if latest is None:
            sinks.event(EventKind.RUN_START, 0, config=cfg.to_dict(), git_sha=_git_sha(),
                        versions=_versions(), corpus=corpus_key, devices=jax.device_count(),
                        processes=jax.process_count())
        else:
            sinks.event(EventKind.RESUME, start, restored_step=start, checkpoint_step=latest,
                        restored_data_position=checkpoint.data_position(loader_states),
                        global_batch_size=global_batch, records_per_epoch=records,
                        devices=jax.device_count())
        if cfg.preflight:
            check = preflight.check_matmul()
            sinks.event(EventKind.PREFLIGHT, start, ok=check.ok, max_abs_error=check.max_abs_error,
                        device=check.device)
            if not check.ok:
                raise GapwatchError(f"preflight: a matmul on {check.device} is off by "
                                    f"{check.max_abs_error:.2e} (relative); this device is unhealthy")

    # --- the loop --------------------------------------------------------------------------------
    def _loop(self, state, step_fn, hosts: DataHosts, sinks: Sinks, mngr, mesh, evals: InLoopEvals,
              packed, start: int, records: int, first_process: bool) -> TrainResult:
        cfg = self.config
        global_batch = cfg.data.global_batch_size
        batch_sharding = NamedSharding(mesh, PartitionSpec(DATA_AXIS))
        global_shapes = {"tokens": (global_batch, cfg.model.max_seq_len + 1),
                         "record": (global_batch,), "position": (global_batch,)}
        flops_per_step = flops.flops_per_token(cfg.model, cfg.model.max_seq_len) * cfg.tokens_per_step
        peak = cfg.peak_flops or flops.peak_flops(jax.devices(), jax.process_count())
        poison_rows = 0 in hosts.host_ids  # the nan fault corrupts host 0's batch only
        in_flight: collections.deque = collections.deque()
        times: list[float] = []
        previous = time.perf_counter()
        # The loop's period is the step time only once the dispatch queue is full: not during a
        # process's first steps (compilation) nor right after periodic work that drained it.
        steady_after = start + cfg.max_in_flight + 1
        gc.disable()  # collections happen at gc_every steps only, never in the middle of a step
        try:
            for step in range(start + 1, cfg.steps + 1):
                with jax.transfer_guard("disallow"):
                    batch = hosts.next_batch(step)
                    if poison_rows:
                        self.faults.poison(step, batch["tokens"], cfg.model.vocab_size)
                    with jax.transfer_guard_host_to_device("allow"):  # the one intended transfer
                        device_batch = {k: jax.make_array_from_process_local_data(
                            batch_sharding, v, global_shapes[k]) for k, v in batch.items()}
                    state, metrics = step_fn(state, device_batch)
                    in_flight.append(metrics[schema.TRAIN_LOSS])
                    if len(in_flight) > cfg.max_in_flight:
                        in_flight.popleft().block_until_ready()  # waits for completion, moves no data
                    now = time.perf_counter()
                    host_metrics = {
                        schema.TRAIN_TOKENS: float(step * cfg.tokens_per_step),
                        schema.DATA_EXPECTED_UNIQUE_FRACTION: expected_unique_fraction(
                            step, global_batch, records),
                        # A read of /proc/loadavg: lets a slow step be told from a busy host.
                        schema.SYS_LOAD_PER_CPU: os.getloadavg()[0] / (os.cpu_count() or 1),
                    }
                    if step > steady_after:
                        step_time = now - previous
                        times.append(step_time)
                        host_metrics[schema.PERF_STEP_TIME_S] = step_time
                        host_metrics[schema.PERF_TOKENS_PER_S] = cfg.tokens_per_step / step_time
                        if peak:
                            host_metrics[schema.PERF_MFU] = flops_per_step / step_time / peak
                    previous = now
                    sinks.log(step, {**metrics, **host_metrics})
                periodic = self._periodic(step, state, hosts, sinks, mngr, evals, packed, records)
                if periodic:
                    steady_after = step + cfg.max_in_flight + 1
                if cfg.kill_at_step == step and first_process:
                    # Checkpoints already being written are let finish, so that where the restart
                    # resumes does not depend on how fast the disk was; then a real crash: nothing
                    # else is flushed.
                    mngr.wait_until_finished()
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            gc.enable()
        mngr.wait_until_finished()
        jax.block_until_ready(state)
        mean = float(np.mean(times)) if times else float("nan")
        return TrainResult(start + 1, cfg.steps, cfg.tokens_per_step / mean, self.options.checkpoint_dir(),
                           times)

    def _periodic(self, step, state, hosts, sinks, mngr, evals, packed, records) -> bool:
        """Checkpoint, evals and GC at their steps; True when any of them ran."""
        cfg = self.config
        ran = False
        if cfg.gc_every and step % cfg.gc_every == 0:
            began = time.perf_counter()
            gc.collect(1)
            sinks.event(EventKind.GC, step, generation=1, duration_s=time.perf_counter() - began)
            ran = True
        if evals.due(step):
            evals.run(step, state["params"], sinks)
            ran = True
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            meta = {
                "step": step,
                "tokens": step * cfg.tokens_per_step,
                "model": dataclasses.asdict(cfg.model),
                "global_batch_size": cfg.data.global_batch_size,
                "data_hosts": cfg.data.data_hosts,
                "records_per_epoch": records,
                "seed": cfg.seed,
                "init_seed": cfg.parameter_seed,
                "corpus": packed.key,
                "config": cfg.to_dict(),
            }
            checkpoint.save(mngr, step, state, hosts.state(), meta, packed.tokenizer)
            sinks.event(EventKind.CHECKPOINT, step, path=str(self.options.checkpoint_dir() / str(step)))
            # A restart resumes from a checkpoint; the metrics up to it must not die with the
            # process, or the run's history would have a hole a resume can never fill.
            sinks.flush()
            ran = True
        return ran


def enable_compilation_cache() -> None:
    """Keep compiled steps on disk, so a restarted or resumed process skips recompilation.

    Leaves a cache directory already configured (JAX_COMPILATION_CACHE_DIR, or by the embedding
    program) alone; otherwise uses the per-user cache directory.
    """
    if not jax.config.jax_compilation_cache_dir:
        directory = Path(platformdirs.user_cache_dir("gapwatch")) / "jax-compilation"
        jax.config.update("jax_compilation_cache_dir", str(directory))


def _heldout_name(cfg: TrainConfig) -> str:
    """The held-out set is named after the corpus: 'stdlib', a file's stem, or a dataset name."""
    first = cfg.data.corpus.sources[0]
    if first.startswith(corpus.HF_PREFIX):
        return corpus.parse_hf_source(first)[0].rsplit("/", 1)[-1]
    return first if first == corpus.STDLIB else Path(first).name.split(".")[0] or "corpus"


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found
