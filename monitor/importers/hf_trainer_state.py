"""The Hugging Face Trainer's `trainer_state.json`: the run's whole log history, saved in every
checkpoint folder (`checkpoint-N/`) and, after `trainer.save_state()`, in the output folder. It is
often all that is left of a fine-tuning or pre-training run (a model repository on the Hub ships
it beside the weights).

`log_history` is a list of the dicts the Trainer logged, each with its global `step`: training
entries (`loss`, `learning_rate`, `grad_norm`, `epoch`, `num_input_tokens_seen`), evaluations
(`eval_loss`, `eval_<set>_loss` for a dict of eval datasets, and their timings) and the summary
`train()` ends with (`train_loss`, `train_runtime`, ...). Source names are those the Trainer's own
W&B and TensorBoard callbacks write for them (`eval_x` -> `eval/x`, `test_x` -> `test/x`, anything
else -> `train/x`), so the `hf` profile reads this file exactly as it reads a W&B run of the same
Trainer.

Rules:
* An entry without an integer `step` is left out, and counted in a note; so is a value that is not
  a number (a string, a list), once per name.
* Entries are read in file order under the restart rule of logged_rows.py (a Trainer resumed from
  an earlier checkpoint carries that checkpoint's history on, so a saved state seldom has one).
* The state's own settings (`train_batch_size`, `max_steps`, `logging_steps`, `eval_steps`,
  `num_train_epochs`, ...) fill `config`, and the model's `config.json` saved beside it (its
  architecture: `hidden_size`, `num_hidden_layers`, ...) fills `config["model"]`, so two runs'
  settings diff shows a different model too. An unreadable `config.json` is a note and costs only
  that. `training_args.bin` is a pickle and is never read.
* A checkpoint folder holding `trainer_state.json` is read through it; an output folder of
  `checkpoint-N` folders through its latest checkpoint's, whose history holds every earlier one's.
"""

from __future__ import annotations

import re
from pathlib import Path

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from .formats import Format, Probe
from .imported_run import ImportedRun
from .input_checks import RepeatedName, UnfitNumber, loads
from .logged_rows import LoggedRows

STATE_FILE = "trainer_state.json"
MODEL_CONFIG_FILE = "config.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)")


def recognize(probe: Probe) -> bool:
    if probe.is_dir:
        return state_file(probe.path) is not None
    return probe.suffix == ".json" and '"log_history"' in probe.head


def state_file(folder: Path) -> Path | None:
    """The folder's own trainer_state.json, else its latest checkpoint's, else None."""
    if (folder / STATE_FILE).is_file():
        return folder / STATE_FILE
    numbered = [(int(m.group(1)), p) for p in folder.glob(f"checkpoint-*/{STATE_FILE}")
                if (m := _CHECKPOINT.fullmatch(p.parent.name))]
    return max(numbered)[1] if numbered else None


def source_name(name: str) -> str:
    """The name the Trainer's W&B and TensorBoard callbacks log a `log_history` key under."""
    for prefix in ("eval", "test"):
        if name.startswith(f"{prefix}_"):
            return f"{prefix}/{name[len(prefix) + 1:]}"
    return f"train/{name}"


def parse_trainer_state(source: str | Path) -> ImportedRun:
    source = Path(source)
    path = state_file(source) if source.is_dir() else source
    if path is None:
        raise GapwatchError(f"{source}: no {STATE_FILE} in the folder or its checkpoint-N folders")
    try:
        state = loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GapwatchError(f"{path}: cannot read: {exc.strerror}") from None
    except UnfitNumber as exc:
        raise GapwatchError(f"{path}: {exc.describe()}") from None
    except RepeatedName as exc:
        raise GapwatchError(f"{path}: {exc.msg}") from None
    except RecursionError:
        raise GapwatchError(f"{path}: JSON nested too deep to be a Trainer state") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GapwatchError(f"{path}: not a readable JSON document ({exc})") from None
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise GapwatchError(f"{path}: no log_history list: not a Hugging Face Trainer state")
    rows, notes = LoggedRows(), []
    no_step, left_out = 0, {}
    for number, entry in enumerate(history, start=1):
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            no_step += 1
            continue
        rows.at_step(number, step)
        for name, value in entry.items():
            if name == "step":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                left_out.setdefault(name, f"{path}: {name!r} is not a number ({type(value).__name__}, "
                                    f"log_history entry {number}): left out")
                continue
            rows.add(step, source_name(name), float(value))
    if no_step:
        notes.append(f"{path}: {no_step} log_history entries without a step in 0..{MAX_STEP}: left out")
    notes.extend(left_out.values())
    if source.is_dir() and path.parent != source:
        notes.append(f"{source}: read the latest checkpoint's state, {path.relative_to(source)}")
    if not len(rows):
        raise GapwatchError(f"{path}: log_history holds no numbers at a step: nothing to import")
    config = {k: v for k, v in state.items()
              if k != "log_history" and (v is None or isinstance(v, (str, int, float, bool)))}
    model = _model_config(path.parent / MODEL_CONFIG_FILE, notes)
    if model:
        config["model"] = model
    return ImportedRun(name_hint=_run_name(path), scalars=rows.scalars(),
                       events=rows.events, source=str(path), notes=notes, config=config)


def _model_config(path: Path, notes: list[str]) -> dict:
    """The settings of the model's config.json (numbers, text, flags, lists of them), {} without
    one; one that cannot be read is said in `notes`."""
    if not path.is_file():
        return {}
    try:
        found = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # bad JSON, text or numbers are ValueErrors
        notes.append(f"{path}: the model's settings cannot be read ({type(exc).__name__}): left out")
        return {}
    if not isinstance(found, dict):
        notes.append(f"{path}: not a JSON object: the model's settings are left out")
        return {}
    # `_name_or_path` and the like are transformers' bookkeeping (where it was loaded from), not settings.
    return {k: v for k, v in found.items() if not str(k).startswith("_") and _setting_value(v)}


def _setting_value(value) -> bool:
    plain = (str, int, float, bool)
    return value is None or isinstance(value, plain) or (
        isinstance(value, list) and all(isinstance(x, plain) for x in value))


def _run_name(path: Path) -> str:
    """The Trainer's output folder's name: the run's, where checkpoint-N is one save of it."""
    folder = path.parent
    return folder.parent.name if _CHECKPOINT.fullmatch(folder.name) and folder.parent.name else folder.name


FORMAT = Format("hf-trainer-state", lambda source, options: parse_trainer_state(source), recognize, profile="hf")
