"""A W&B run folder that keeps its history as JSON Lines instead of a `.wandb` file.

wandb before 0.10 wrote each run to `wandb/run-<date>_<time>-<id>/` (`dryrun-...` offline):
`wandb-history.jsonl` (one object a `wandb.log`, with `_step`, `_runtime`, `_timestamp`),
`config.yaml` (each setting as `{desc, value}`) and `wandb-summary.json` (the final values) side by
side; tools that write W&B-shaped folders put the same files in the run folder's `files/`. Such a
folder, its `wandb/` folder or the project folder holding that, is read as the run: the history as
W&B history in JSON Lines is read (its rows on the trainer's step where a step key is logged:
`step_axis`), the config's values as its settings, the summary as its final values. A folder of
several runs is refused with their folders: each is imported from its own.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from monitor.errors import GapwatchError

from ..formats import Format, Probe
from ..generic_table import parse_jsonl
from ..imported_run import ImportedRun
from ..input_checks import yaml_mapping

HISTORY = "wandb-history.jsonl"
CONFIG, SUMMARY = "config.yaml", "wandb-summary.json"
# The run folders wandb makes: run-<date>_<time>-<id>, and offline dryrun- (before 0.10) or
# offline-run- (after).
_RUN_FOLDER = re.compile(r"(?:offline-run|run|dryrun)-\d{8}_\d{6}-(?P<id>.+)")


def _history(folder: Path) -> Path | None:
    for file in (folder / HISTORY, folder / "files" / HISTORY):
        if file.is_file():
            return file
    return None


def run_folders(path: Path) -> list[Path]:
    """The run folders a path names: itself when it holds a history, else those in it, or in its
    `wandb/` folder (the project folder's), that hold one."""
    if _history(path) is not None:
        return [path]
    base = path / "wandb" if (path / "wandb").is_dir() else path
    try:
        return sorted(f for f in base.iterdir() if f.is_dir() and not f.is_symlink() and _history(f) is not None)
    except OSError:
        return []


def recognize(probe: Probe) -> bool:
    """A folder that is, or holds, a run folder with a `wandb-history.jsonl` (after the `.wandb`
    run files in the registry, so a folder with a `.wandb` file is read from that)."""
    return probe.is_dir and bool(run_folders(probe.path))


def parse_history_folder(path: str | Path, step_key: str | None = None) -> ImportedRun:
    given = Path(path)
    folders = run_folders(given)
    if len(folders) != 1:
        listed = ", ".join(str(f) for f in folders[:6])
        raise GapwatchError(f"{path}: holds {len(folders)} W&B runs ({listed}): import one run from its own folder")
    folder = folders[0]
    history = _history(folder)
    run = parse_jsonl(history, step_key=step_key)
    files = history.parent
    run.config = _config(files / CONFIG, run.notes)
    run.summary = _summary(files / SUMMARY, run.notes)
    run.source = str(folder)
    found = _RUN_FOLDER.fullmatch(folder.name)
    run.name_hint = found["id"] if found else folder.name
    return run


def _config(file: Path, notes: list[str]) -> dict:
    """The settings of W&B's config.yaml (`name: {desc: ..., value: ...}`), W&B's own (`_wandb`,
    `wandb_version`) left out; {} without one, with a note where it cannot be read."""
    doc = yaml_mapping(file, notes)
    return {str(k): v["value"] for k, v in doc.items()
            if not str(k).startswith("_") and isinstance(v, dict) and "value" in v}


def _summary(file: Path, notes: list[str]) -> dict:
    if not file.is_file():
        return {}
    try:
        doc = json.loads(file.read_text(errors="replace"))
    except (ValueError, RecursionError):
        notes.append(f"{file}: not JSON: the run's final values are not read")
        return {}
    return {str(k): v for k, v in doc.items() if not str(k).startswith("_")} if isinstance(doc, dict) else {}


FORMAT = Format("wandb-history-folder", lambda source, options: parse_history_folder(source, options.step_key),
                recognize, steps="rows")
