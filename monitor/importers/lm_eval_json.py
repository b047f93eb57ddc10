"""lm-evaluation-harness results JSON: one file per checkpoint, or a folder of them.

Both layouts the harness has written are read:
* 0.3 (Pythia's published evals): `results[task][metric]` and `results[task][metric + "_stderr"]`;
* 0.4: `results[task]["<metric>,<filter>"]` and `"<metric>_stderr,<filter>"`, with sample counts in
  `n-samples[task].effective`.

Hugging Face's lighteval writes the 0.3 layout with `config_general` for `config`, tasks named
`suite|task|few-shot` (`leaderboard|arc:challenge|25` becomes the task `leaderboard_arc_challenge_25`)
and an `all` entry averaging every task, which is left out: it is no task of its own.

Each value becomes `eval/downstream/<task>/<metric>` (a filter other than `none` is appended to the
metric: `exact_match_strict-match`), its standard error `.../stderr`, its sample count `.../n`.
The step comes from the `revision=` in `config.model_args`, as the harness records the checkpoint
it loaded, else from the checkpoint folder `pretrained=` names, unless the caller gives one. Either
is a checkpoint's name (see `_step_in_name`): Pythia's `step1000`, OLMo's `step20000-tokens84B`,
OLMo 2's `stage1-step928646-tokens3896B` (a later stage's, which counts from 0 again, asks for the
step), SmolLM2's `step-125000`; folders `checkpoint-N` of the Hugging Face Trainer,
`stepN-unsharded` of OLMo, `iter_N` of Megatron-LM, `global_stepN` of DeepSpeed. Values that are
not numbers (`N/A` standard errors) are left out. In a folder, two files that give different
values for the same step and metric are an error naming both.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from monitor import schema
from monitor.errors import GapwatchError
from monitor.schema import EventKind

from .formats import Format, Probe
from .imported_run import ImportedRun, scalars_frame
from .input_checks import RepeatedName, UnfitNumber, loads, shown

_REVISION = re.compile(r"(?:^|[,\s])revision=([^,\s]+)")
# A checkpoint folder in the path the model was loaded from: its last such part.
_PRETRAINED = re.compile(r"(?:^|[,\s])pretrained=([^,\s]+)")
# The parts of a checkpoint's name (split at "-") that hold its step: `step1000`, `global_step1000`,
# `iter_0001000`; or the word `step` or `checkpoint` with the step as the next part (`step-125000`,
# `checkpoint-2000`).
_STEP_PART = re.compile(r"(?:global_step|step|iter_)([0-9]+)")
_STEP_WORDS = ("step", "checkpoint")
_DIGITS = re.compile(r"[0-9]+")
_STAGE = re.compile(r"(?:^|[^a-z])stage([0-9]+)-")  # OLMo 2's training stage, the first part of its names
_STDERR_SUFFIX = "_stderr"
# Bookkeeping fields of a task's results, not metrics (lm-eval 0.4 writes them beside the metrics).
_NOT_METRICS = {"alias", "name", "sample_len", "sample_count"}


def sniff(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("results"), dict) and (
        "config" in doc or "versions" in doc or "configs" in doc or "config_general" in doc)


def recognize(probe: Probe) -> bool:
    """A folder with JSON files in it, or a .json file holding lm-eval results. A .json file
    that is not one JSON document is left to `jsonl`; one that is but holds no results is refused."""
    if probe.is_dir:
        return any(probe.path.rglob("*.json"))
    if probe.suffix != ".json":
        return False
    try:
        doc = json.loads(probe.path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    except RecursionError:
        raise GapwatchError(f"{probe.path}: JSON nested too deep to be lm-eval results") from None
    if sniff(doc):
        return True
    if isinstance(doc, dict) and doc and all(isinstance(v, (int, float)) for v in doc.values()) and (
            {"epoch", "train_loss", "eval_loss", "train_runtime"} & set(doc)):
        raise GapwatchError(f"{probe.path}: a Hugging Face Trainer's final results (all_results.json, "
                            "train_results.json): values at the end, no history; import the trainer_state.json "
                            "of the run's last checkpoint instead")
    raise GapwatchError(f"{probe.path}: a JSON file that is not lm-eval results")


def parse_lm_eval(path: str | Path, step: int | None = None) -> ImportedRun:
    """One results file, or every `*.json` results file under a folder."""
    path = Path(path)
    if step is not None and not 0 <= step <= schema.MAX_STEP:
        raise GapwatchError(f"{path}: step {step} is not a step a store keeps "
                            f"(0 to {schema.MAX_STEP})")
    # is_file: a named pipe among the results would block the import.
    files = sorted(f for f in path.rglob("*.json") if f.is_file()) if path.is_dir() else [path]
    docs = []
    for file in files:
        doc = _load(file)
        if path.is_dir() and not sniff(doc):
            continue
        if not sniff(doc):
            raise GapwatchError(f"{file}: not an lm-eval results file (no 'results' and 'config')")
        _check_shape(file, doc)
        docs.append((file, doc))
    if not docs and files:
        # A folder is taken for lm-eval's when it holds JSON files and nothing else recognized it.
        raise GapwatchError(f"{path}: no lm-eval results files among its {len(files)} JSON file(s), and no other "
                            "format gapwatch reads recognizes the folder (a W&B run folder, a TensorBoard log "
                            "folder, MLflow's mlruns/, a Lightning CSVLogger folder, a lingua dump, a fairseq2 "
                            "metrics/ folder...); import the log file itself, or see docs/importing.md")
    if not docs:
        raise GapwatchError(f"{path}: no lm-eval results files")
    seen: dict[tuple[int, str], tuple[float, Path]] = {}
    steps, keys, values, events = [], [], [], []
    for file, doc in docs:
        at = step if step is not None else _step_of(file, doc)
        tasks = []
        for key, value in _metrics(file, doc):
            prior = seen.get((at, key))
            if prior is not None:
                if not _same(prior[0], value):
                    raise GapwatchError(
                        f"{file}: {key} at step {at} is {value!r}, but {prior[1]} gives "
                        f"{prior[0]!r} for the same step"
                    )
                continue
            seen[(at, key)] = (value, file)
            steps.append(at)
            keys.append(key)
            values.append(value)
            tasks.append(key.split("/")[2])
        events.append({"step": at, "kind": EventKind.EVAL.value,
                       "payload": {"kind": "downstream", "tasks": sorted(set(tasks)),
                                   "file": file.name}})
    if not steps:
        raise GapwatchError(f"{path}: the lm-eval results hold no numeric metric (empty 'results')")
    order = sorted(range(len(steps)), key=lambda i: steps[i])
    config = _shared_config([doc.get("config") or {} for _, doc in docs])
    return ImportedRun(
        name_hint=_model_name([doc for _, doc in docs]) or (path.stem if path.is_file() else path.name),
        scalars=scalars_frame([steps[i] for i in order], [keys[i] for i in order],
                              [values[i] for i in order]),
        config={"lm_eval": _plain(config)},
        summary={"versions": docs[0][1].get("versions", {})},
        events=sorted(events, key=lambda e: e["step"]),
        source=str(path),
    )


def _shared_config(configs: list[dict]) -> dict:
    """The settings every file records alike, as the run's: what differs between the files of one
    folder belongs to a checkpoint, not to the run (`model_args`' revision is the checkpoint
    evaluated; a batch size may change between eval jobs). `model_args` is compared argument by
    argument, so its model and dtype stay when only the revision moves."""
    first, *rest = configs
    out = {}
    for key, value in first.items():
        if key == "model_args" and isinstance(value, str):
            others = [set(_split_args(c.get(key))) for c in rest]
            out[key] = ",".join(arg for arg in _split_args(value) if all(arg in o for o in others))
        elif all(key in c and c[key] == value for c in rest):
            out[key] = value
    return out


def _split_args(model_args) -> list[str]:
    return [a.strip() for a in model_args.split(",") if a.strip()] if isinstance(model_args, str) else []


def _load(file: Path):
    try:
        return loads(file.read_text())
    except UnfitNumber as exc:
        raise GapwatchError(f"{file}: {exc.describe()}") from None
    except RecursionError:
        raise GapwatchError(f"{file}: JSON nested too deep to be lm-eval results") from None
    except OSError as exc:
        raise GapwatchError(f"{file}: cannot read: {exc.strerror}") from None
    except RepeatedName as exc:
        raise GapwatchError(f"{file}: {exc.msg}") from None
    except json.JSONDecodeError as exc:
        raise GapwatchError(f"{file}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise GapwatchError(f"{file}: not a text file") from None


def _check_shape(file: Path, doc: dict) -> None:
    """The fields the parser reads are mappings where lm-eval writes mappings: one line if not."""
    if not doc["results"]:
        raise GapwatchError(f"{file}: the lm-eval 'results' are empty: nothing to import")
    config = doc.get("config")
    if config is not None and not isinstance(config, dict):
        raise GapwatchError(f"{file}: 'config' is a {type(config).__name__}, not a mapping")
    n_samples = doc.get("n-samples")
    if n_samples is not None and not isinstance(n_samples, dict):
        raise GapwatchError(f"{file}: 'n-samples' is a {type(n_samples).__name__}, not a mapping")
    for task, counts in (n_samples or {}).items():
        if counts is not None and not isinstance(counts, dict):
            raise GapwatchError(f"{file}: 'n-samples'[{shown(task)}] is a {type(counts).__name__}, not a mapping")


def _model_args(doc: dict) -> str:
    args = (doc.get("config") or {}).get("model_args", "")
    if isinstance(args, dict):
        args = ",".join(f"{k}={v}" for k, v in args.items())
    return str(args)


def _model_name(docs: list[dict]) -> str | None:
    """The model every file evaluated, by its hub id (`model_name`, else the `pretrained=` of
    model_args: `EleutherAI/pythia-160m`); None when the files name different ones, or a local
    path (a checkpoint folder is a step, not a run), or none."""
    names = set()
    for doc in docs:
        name = doc.get("model_name")
        if not isinstance(name, str) or not name:
            m = _PRETRAINED.search(_model_args(doc))
            name = m.group(1) if m else None
        hub_id = (name is not None and not name.startswith(("/", ".", "~")) and name.count("/") <= 1
                  and not any(_step_in_name(part) for part in name.split("/")))
        names.add(name if hub_id else None)
    return names.pop() if len(names) == 1 else None


def _step_in_name(name: str) -> str | None:
    """The digits of the step a checkpoint's name gives, or None. Of the name's parts (split at
    "-"), exactly one may give a step; the others are labels (`stage1`, `ingredient2`,
    `tokens3896B`, `unsharded`, `2BT`), so a token count or a model size (`7B`) is never taken for
    it, and a name with two steps in it (`step5-step6`) names no checkpoint."""
    parts = name.split("-")
    found = []
    for i, part in enumerate(parts):
        if m := _STEP_PART.fullmatch(part):
            found.append(m.group(1))
        elif part in _STEP_WORDS and i + 1 < len(parts) and _DIGITS.fullmatch(parts[i + 1]):
            found.append(parts[i + 1])
    return found[0] if len(found) == 1 else None


def _step_of(file: Path, doc: dict) -> int:
    args = _model_args(doc)
    m = _REVISION.search(args)
    revision = m.group(1) if m else None
    digits = _step_in_name(revision) if revision else None
    named = f"revision {shown(revision)}"
    if digits is None:
        folder = _checkpoint_folder(args)
        if folder is None:
            raise GapwatchError(
                f"{file}: no step in config.model_args' revision, nor a checkpoint folder in its path "
                f"({shown(args)}): give the step (--step)"
            )
        digits, named = _step_in_name(folder), f"checkpoint folder {shown(folder)}"
    stage = _STAGE.search(named)
    if stage is not None and int(stage.group(1)) > 1:
        # OLMo 2 counts the steps of each stage after the first from 0 again: step 11931 of stage 2
        # is no step of the run's own axis.
        raise GapwatchError(f"{file}: {named} is a checkpoint of stage {stage.group(1)}, whose steps count from 0 "
                            f"again: give the step on the run's axis (--step)")
    digits = digits.lstrip("0") or "0"  # zero-padded names (`step-001000-2BT`)
    if len(digits) > len(str(schema.MAX_STEP)) or int(digits) > schema.MAX_STEP:
        raise GapwatchError(f"{file}: the step of {named} is beyond the "
                            f"largest step a store keeps ({schema.MAX_STEP})")
    return int(digits)


def _checkpoint_folder(args: str) -> str | None:
    """The last folder in `pretrained=`'s path that names a checkpoint (out/checkpoint-2000)."""
    m = _PRETRAINED.search(args)
    parts = re.split(r"[/\\]", m.group(1)) if m else []
    named = [part for part in parts if _step_in_name(part)]
    return named[-1] if named else None


def _metrics(file: Path, doc: dict):
    """(key, value) of every numeric metric, standard error and sample count in one file."""
    n_samples = doc.get("n-samples") or {}
    for task, metrics in doc["results"].items():
        if task == "all" and "config_general" in doc:  # lighteval's mean over its tasks
            continue
        if not isinstance(metrics, dict):
            raise GapwatchError(f"{file}: results[{shown(task)}] is not a mapping")
        for name, value in metrics.items():
            if name in _NOT_METRICS or not _is_number(value):
                continue
            metric, _, flt = name.partition(",")
            stat = None
            if metric.endswith(_STDERR_SUFFIX):
                metric, stat = metric[: -len(_STDERR_SUFFIX)], "stderr"
            if flt and flt != "none":
                metric = f"{metric}_{flt}"
            try:
                key = schema.downstream_key(task, metric, stat)
            except ValueError as exc:
                raise GapwatchError(f"{file}: results[{shown(task)}][{shown(name)}]: {exc}") from None
            yield key, float(value)
        n = (n_samples.get(task) or {}).get("effective") if isinstance(n_samples, dict) else None
        if not _is_number(n):
            n = metrics.get("sample_len")
        if _is_number(n):
            for metric in _base_metrics(metrics):
                yield schema.downstream_key(task, metric, "n"), float(n)


def _base_metrics(metrics: dict) -> list[str]:
    out = []
    for name, value in metrics.items():
        metric, _, flt = name.partition(",")
        if name in _NOT_METRICS or metric.endswith(_STDERR_SUFFIX) or not _is_number(value):
            continue
        out.append(f"{metric}_{flt}" if flt and flt != "none" else metric)
    return out


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _plain(value):
    """JSON-safe copy (lm-eval configs may hold values json cannot write)."""
    return json.loads(json.dumps(value, default=str))


FORMAT = Format("lm-eval-json", lambda source, options: parse_lm_eval(source, step=options.step),
                recognize, profile="gapwatch")
