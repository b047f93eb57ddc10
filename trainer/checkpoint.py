"""Checkpoints with Orbax: model, optimizer, step, coverage counts, data-loader state, tokenizer.

One checkpoint is one Orbax step folder with five items:
- `params`: the model parameters (a pytree with Hugging Face names, trainer/model.py);
- `train`: optimizer state, step counter and the per-record coverage counts;
- `data`: every data host's Grain iterator state (JSON), gathered from all processes;
- `meta`: the model config, run settings and the step, as JSON;
- `tokenizer`: the tokenizer's JSON, so a checkpoint alone is enough to evaluate the model.

Saves are asynchronous (`CheckpointManager(enable_async_checkpointing=True)`): training waits only
for the device-to-host copy, the files are written in the background, and a step folder appears
under its final name only when complete, so a process killed mid-save leaves the previous
checkpoint as the latest. The training state holds no random key: no operation of the step is
random (no dropout, as OLMo 2/3 train), and the initial key is derived from the run's seed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from monitor.errors import GapwatchError
from trainer.model import ModelConfig, Params, param_shapes, unflatten
from trainer.tokenizer import Tokenizer

ITEMS = ("params", "train", "data", "meta", "tokenizer")
MAX_TO_KEEP = 3  # the latest few are enough to resume; older ones only cost disk


def manager(directory: Path, *, read_only: bool = False) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=MAX_TO_KEEP,
        enable_async_checkpointing=not read_only,
        create=not read_only,
        read_only=read_only,
    )
    return ocp.CheckpointManager(Path(directory).absolute(), options=options, item_names=ITEMS)


def save(mngr: ocp.CheckpointManager, step: int, state: dict, loader_states: dict[str, str],
         meta: dict, tokenizer: Tokenizer) -> None:
    """Start an asynchronous save of everything needed to resume at `step`."""
    train = {k: state[k] for k in ("opt_state", "step", "coverage")}
    mngr.save(
        step,
        args=ocp.args.Composite(
            params=ocp.args.StandardSave(state["params"]),
            train=ocp.args.StandardSave(train),
            data=ocp.args.JsonSave(gather_loader_states(loader_states)),
            meta=ocp.args.JsonSave(meta),
            tokenizer=ocp.args.JsonSave(json.loads(tokenizer.to_json())),
        ),
        force=True,
    )


def restore_host_side(mngr: ocp.CheckpointManager, step: int) -> tuple[dict, dict[str, str], Tokenizer]:
    """meta, every host's loader state and the tokenizer: what is needed before building the model."""
    got = mngr.restore(step, args=ocp.args.Composite(
        data=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore(), tokenizer=ocp.args.JsonRestore()))
    return got["meta"], got["data"], Tokenizer.from_json(json.dumps(got["tokenizer"]))


def restore_state(mngr: ocp.CheckpointManager, step: int, target: dict) -> dict:
    """The train state, placed like `target` (its shapes, dtypes and shardings)."""
    abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, target)
    train_target = {k: abstract[k] for k in ("opt_state", "step", "coverage")}
    got = mngr.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract["params"]),
        train=ocp.args.StandardRestore(train_target),
    ))
    return {"params": got["params"], **got["train"]}


def gather_loader_states(local: dict[str, str]) -> dict[str, str]:
    """Every process's host states in one dict (Orbax writes JSON items from process 0 only)."""
    if jax.process_count() == 1:
        return dict(local)
    from jax.experimental import multihost_utils

    payload = np.frombuffer(json.dumps(local).encode(), dtype=np.uint8)
    lengths = multihost_utils.process_allgather(np.array([len(payload)], np.int32))
    padded = np.zeros(int(np.max(lengths)), np.uint8)
    padded[: len(payload)] = payload
    everyone = multihost_utils.process_allgather(padded)
    merged: dict[str, str] = {}
    for row, n in zip(np.asarray(everyone), np.asarray(lengths).ravel()):
        merged.update(json.loads(bytes(row[:n]).decode()))
    return merged


def data_position(loader_states: dict[str, str]) -> int:
    """Global data cursor stored in a checkpoint: sampler slots passed, summed over all hosts."""
    return sum(int(json.loads(s)["last_seen_indices"]["0"]) + 1 for s in loader_states.values())


def model_config_from_meta(meta: dict) -> ModelConfig:
    fields = dict(meta["model"])
    fields["layer_types"] = tuple(fields.get("layer_types", ()))
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    return ModelConfig(**{k: v for k, v in fields.items() if k in known})


# --- for evaluation and the CLI -------------------------------------------------------------------
@dataclasses.dataclass
class LoadedModel:
    params: Params
    """float32 parameters on the default device."""
    config: ModelConfig
    tokenizer: Tokenizer
    step: int
    meta: dict


def resolve(path: str | Path) -> tuple[Path, int | None]:
    """A checkpoint path is a run's checkpoint folder (latest step used) or one step folder in it."""
    path = Path(path).expanduser()
    if not path.exists():
        raise GapwatchError(f"checkpoint {path} does not exist")
    if path.name.isdigit() and (path / "meta").exists():
        return path.parent, int(path.name)
    if (path / "checkpoints").is_dir():  # a run directory
        path = path / "checkpoints"
    return path, None


def load_for_eval(path: str | Path) -> LoadedModel:
    """params + config + tokenizer from a checkpoint, for `gapwatch eval --checkpoint PATH`."""
    directory, step = resolve(path)
    mngr = manager(directory, read_only=True)
    try:
        step = mngr.latest_step() if step is None else step
        if step is None:
            raise GapwatchError(f"checkpoint folder {directory} holds no finished checkpoint")
        got = mngr.restore(step, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore(), tokenizer=ocp.args.JsonRestore()))
        meta = got["meta"]
        config = model_config_from_meta(meta)
        device = jax.devices()[0]
        sharding = jax.sharding.SingleDeviceSharding(device)
        abstract = unflatten({name: jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)
                              for name, shape in param_shapes(config).items()})
        params = mngr.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract)))["params"]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise GapwatchError(f"checkpoint {path} cannot be read: {str(exc).splitlines()[0]}") from None
    finally:
        mngr.close()
    tokenizer = Tokenizer.from_json(json.dumps(got["tokenizer"]))
    return LoadedModel(params=params, config=config, tokenizer=tokenizer, step=step, meta=meta)
