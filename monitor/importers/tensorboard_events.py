"""TensorBoard event files (`events.out.tfevents.*`), as MaxText and many trainers write them.

Records are read with TensorBoard's own record reader (the one its event loader uses when
TensorFlow is absent) and its `data_compat` migration, which turns old `simple_value` scalars into
the scalar plugin's tensors, so both the TF1/PyTorch and the TF2/Flax ways of writing a scalar are
read the same. Non-scalar summaries (histograms, images, text) are left out and counted. The
hparams plugin's session start (torch's `add_hparams`, Lightning's and Keras's hyperparameters) is
the run's config; Lightning's hparams.yaml beside the event file, nested as it was saved, wins.
T5X's gin config (its `config` text summary, or `config.gin` in the folder imported) is read into
the settings too, and says which T5X profile reads the run (t5x_gin.py).

Rules:
* A path to a folder reads every event file under it, oldest (by file name, which starts with the
  creation time; a process's files of one second by their count, as a number) first. Files in different subfolders are different TensorBoard runs: their tags
  are prefixed with the subfolder (`eval/` + `loss`), as TensorBoard shows them.
* A folder holds one training launch when its event folders nest in one (torch's `add_scalars`
  writes `loss_train/` inside the run's folder) or are its data splits: a folder named for one
  belongs to its parent, with the parent's other event folders (`train/` and `validation/`, as
  Keras writes them; fairseq's `train_inner/`, `train/`, `valid/`; T5X's `train/` beside
  `training_eval/<task>/`). metaseq's reruns (`tb/`, then `tbA/`, each with its splits) are then
  launches like any other. Sibling folders written at the same time (from
  when each's first file was created to its last record, more than a minute in common) are one
  job's writers, one run with each folder's tags under its name, unless each began at the same
  step with the same tags (a sweep's runs, run side by side). Sibling launch folders
  (`runs/<date>_<host>/`, Lightning's `version_N/`) written one after another are one run resumed
  from its checkpoints when, in the order they were started (the time an event file's name begins
  with), each later one begins above the step the first began at; its tags are read as one run's,
  under the restart rule below. Launches that each begin where the first did
  (a sweep, a run started again from scratch) are separate runs, and importing their parent is
  refused with their names: one run is imported from its own folder. A launch folder with no
  scalar (a job that died before its first log) is left out, with a note.
* Keras's callback numbers its series by epoch, by batch and by optimizer step, in `train/` and
  `validation/`: they are placed on optimizer steps before anything else (keras_steps.py).
* Where a launch began and whether a tag went back leave out the metrics an hparams record
  declares: Lightning logs its `hp_metric` placeholder at step 0 in every launch.
* Files are read in the order they were written, so a process that resumed in the run's own
  folder is one restart however many subfolders it wrote to. The subfolder torch's `add_hparams`
  names by the time of the call prefixes nothing.
* A tag logged at a step lower than its previous one, or at the same step in a later file, is a
  restart (TensorBoard's own rule for resumed runs): a new attempt starts, its values win, and a
  `restart` event records it. The same tag twice at one step of one file (Lightning logs `epoch`
  with each of a step's training and validation logs) is one value logged again: the later wins.
* A damaged record (checksum) is an error naming the file and record. A file that stops inside a
  record was cut short (its writer was killed): its complete records are imported, the run is
  marked crashed and a note says how many bytes were left unread.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import numpy as np

from monitor.errors import GapwatchError
from monitor.schema import EventKind

from .formats import Format
from .hparams_file import read_hparams
from . import keras_steps, t5x_gin
from .imported_run import ImportedRun, resumed_launches, scalars_frame
from .input_checks import setting

HPARAMS_PREFIX = "_hparams_"  # the tags of the hparams plugin's records
ARGV_TAG = "sys.argv"  # fairseq's and metaseq's command line, written as a text summary
_MARKER = "tfevents"


def is_event_file(path: Path) -> bool:
    return path.is_file() and _MARKER in path.name


def event_files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_file():
        return [p]
    files = sorted((f for f in p.rglob("*") if is_event_file(f)),
                   key=lambda f: (str(f.parent), f.name))
    if not files:
        raise GapwatchError(f"{path}: no TensorBoard event files (events.out.tfevents.*)")
    return files


# Subfolder names that split one run's logs by data split (Keras' TensorBoard callback; fairseq's
# train_inner/, train/ and valid/).
SPLIT_FOLDERS = {"train", "train_inner", "training", "validation", "valid", "val", "eval", "test"}


def training_runs(folders: set[Path]) -> list[Path]:
    """The folders of the training launches among event folders: a folder nested in another event
    folder belongs to it, and one under a folder named for a data split belongs to that split
    folder's parent (Keras' train/ and validation/, fairseq's train_inner/, train/ and valid/, T5X's
    train/ beside training_eval/<task>/, which then belongs to it too). A launch's folders are
    written at once, so one that begins at a later step (its first evaluation) is no resumed
    launch."""
    tops = sorted(f for f in folders if not any(o in f.parents for o in folders))
    if len(tops) < 2:
        return tops
    floor = Path(*os.path.commonprefix([t.parts for t in tops]))
    launches = set()
    for top in tops:
        splits = [a for a in (top, *top.parents) if floor in a.parents and a.name.lower() in SPLIT_FOLDERS]
        launches.add(splits[-1].parent if splits else top)
    return sorted(t for t in launches if not any(o in t.parents for o in launches))


def parse_tensorboard(path: str | Path) -> ImportedRun:
    root = Path(path)
    files = event_files(root)
    folders = {f.parent for f in files}
    launches = training_runs(folders) if root.is_dir() else [root.parent]
    launch_of = {f: next(t for t in launches if t == f.parent or t in f.parent.parents) for f in files}
    notes = []
    if len(launches) > 1:
        starts = {t: _launch_start(sorted((f for f in files if launch_of[f] == t), key=_written_order))
                  for t in launches}
        empty = [t for t in launches if starts[t] is None]
        if empty and len(empty) < len(launches):
            notes.append(f"{path}: left out {len(empty)} launch folder(s) with no scalars (stopped before the "
                         f"first was logged): " + ", ".join(t.relative_to(root).as_posix() for t in empty))
            launches = [t for t in launches if starts[t] is not None]
            files = [f for f in files if launch_of[f] in launches]
        launches = sorted(launches, key=lambda t: _created(next(f for f in files if launch_of[f] == t)))
        alike = len({starts[t] for t in launches}) == 1  # a sweep's runs, run side by side
        if len(launches) > 1 and not alike and _written_at_once([[f for f in files if launch_of[f] == t]
                                                                  for t in launches]):
            # Folders one job wrote side by side (a train and an eval writer): one run, each
            # folder's tags under its name, whatever step each began at.
            whole = Path(*os.path.commonprefix([t.parts for t in launches]))
            notes.append(f"{path}: {', '.join(t.relative_to(root).as_posix() for t in launches)} were written at "
                         "the same time: one run, each folder's series under its name")
            launches, empty = [whole], []
            launch_of = dict.fromkeys(files, whole)
        if len(launches) > 1 and not empty and not resumed_launches([starts[t][0] for t in launches]):
            listed = ", ".join(t.relative_to(root).as_posix() for t in launches[:10])
            raise GapwatchError(f"{path}: a TensorBoard folder of {len(launches)} training runs "
                                f"({listed}{' ...' if len(launches) > 10 else ''}): import one run from its "
                                f"own folder, such as {launches[0]}")
    # In the order they were written, launch by launch: a process that resumed in the same folder
    # wrote a file in each of its subfolders (torch's add_scalars), after all of the earlier one's.
    files = sorted(files, key=lambda f: (launches.index(launch_of[f]), *_written_order(f)))
    steps, keys, values, attempts, walls, events = [], [], [], [], [], []
    last_step: dict[str, int] = {}
    attempt = 1
    last_file: dict[str, Path] = {}
    skipped: dict[str, int] = {}
    settings: dict[str, object] = {}
    declared: set[str] = set()  # an hparams record's metrics: a resumed launch logs them again at step 0
    placed = _keras_placed(files, launches, launch_of, settings, declared, notes)
    for file in files:
        prefix = _prefix(file.parent, launch_of[file]) if len(folders) > 1 and root.is_dir() else ""
        cut: list[str] = []
        for step, tag, scalar, wall in placed[file] if file in placed else _scalars(file, cut, settings, declared):
            restarts = tag not in declared
            tag = prefix + tag
            if scalar is None:
                skipped[tag] = skipped.get(tag, 0) + 1
                continue
            previous = last_step.get(tag)
            if restarts and previous is not None and (step < previous or (step == previous and last_file[tag] != file)):
                attempt += 1
                last_step.clear()
                events.append({
                    "step": step, "kind": EventKind.RESTART.value, "attempt": attempt,
                    "payload": {"reason": f"{tag} went back from step {previous} to {step}", "file": file.name},
                })
            last_step[tag] = step
            last_file[tag] = file
            steps.append(step)
            keys.append(tag)
            values.append(scalar)
            attempts.append(attempt)
            walls.append(wall)
        notes.extend(cut)
    if not steps:
        raise GapwatchError(f"{path}: no scalar summaries in the TensorBoard event files")
    if root.is_dir() and (root / t5x_gin.GIN_FILE).is_file():
        try:
            settings.update(t5x_gin.gin_settings((root / t5x_gin.GIN_FILE).read_text(errors="replace")))
        except OSError as exc:
            notes.append(f"{root / t5x_gin.GIN_FILE}: cannot read: {exc.strerror}")
    gin = t5x_gin.profile_for(settings)  # None unless a gin config was read
    t5x = t5x_gin.is_t5x(last_file)  # every scalar tag read
    hint = gin if t5x else None
    if settings:  # the hparams plugin's records, fairseq's command line and a gin config were read as the run's settings
        skipped = {k: n for k, n in skipped.items()
                   if k.split("/")[-2:-1] != [HPARAMS_PREFIX] and ARGV_TAG not in k.split("/")
                   and not (gin and t5x_gin.GIN_TAG in k.split("/"))}
    if t5x and hint is None:
        notes.append(t5x_gin.unknown_note(str(path)))
    if skipped:
        listed = ", ".join(f"{k} ({n})" for k, n in sorted(skipped.items())[:6])
        notes.append(f"{path}: left out summaries that are not scalars: {listed}")
    if len(launches) > 1:
        notes.append(f"{path}: {len(launches)} launches of one run, each resumed where an earlier one had got to: "
                     + ", ".join(t.relative_to(root).as_posix() for t in launches))
    hparams, unread = read_hparams(launches[0])  # Lightning's, beside its event file
    notes += [unread] if unread else []
    return ImportedRun(
        name_hint=launches[0].name if root.is_dir() else root.parent.name or root.stem,
        config=hparams or settings,
        profile=hint,
        scalars=scalars_frame(steps, keys, values, attempts, wall_time=walls),
        events=events,
        source=str(root),
        notes=notes,
        crashed=any("crashed:" in n for n in notes),
    )


def _keras_placed(files, launches, launch_of, settings, declared, notes) -> dict[Path, list]:
    """The records of each launch Keras's TensorBoard callback wrote, on optimizer steps
    (keras_steps.py), read ahead since placing one file's needs its launch's others. A launch of
    train/ and validation/ folders that another writer wrote is read again as it streams, so that
    only Keras's (small) logs are held whole."""
    placed = {}
    for launch in launches:
        mine = [f for f in files if launch_of[f] == launch]
        if not all(f.parent.parent == launch and f.parent.name in keras_steps.SPLITS for f in mine):
            continue
        cut: list[str] = []
        read = {f: list(_scalars(f, cut, settings, declared)) for f in mine}
        if keras_steps.is_keras(read, declared):
            read, said = keras_steps.place(read, str(launch))
            placed.update(read)
            notes.extend([*cut, said])
    return placed


def _created(file: Path) -> float:
    """When an event file was created: the seconds since the epoch its name starts with
    (events.out.tfevents.<seconds>.<host>...), else its modification time."""
    try:
        return float(file.name.split(_MARKER + ".", 1)[1].split(".")[0])
    except (IndexError, ValueError):
        return file.stat().st_mtime


def _written_at_once(launches: list[list[Path]]) -> bool:
    """Whether launch folders (each's event files) were written at the same time: the times from
    when two began (their first file's creation) to their last record overlap. A resumed launch
    begins after the one it resumed stopped."""
    spans = []
    for files in launches:
        ends = [w for w in map(_last_wall, files) if w is not None]
        if ends:
            spans.append((min(map(_created, files)), max(ends)))
    return any(min(a[1], b[1]) - max(a[0], b[0]) > _CLOCK_SLACK_S
               for i, a in enumerate(spans) for b in spans[i + 1:])


# Event file names carry whole seconds, and a resumed job's clock may differ a little from the
# one before it (another host).
_CLOCK_SLACK_S = 60.0


def _last_wall(file: Path) -> float | None:
    """The wall time of an event file's last complete record, found by skipping from record to
    record by their lengths (none is decoded but the last): None for a file without one."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    last = None
    try:
        with open(file, "rb") as fh:
            size = file.stat().st_size
            at = 0
            while at + 12 <= size:
                fh.seek(at)
                length = int.from_bytes(fh.read(8), "little")
                end = at + 12 + length + 4
                if end > size:
                    break
                last = (at + 12, length)
                at = end
            if last is None:
                return None
            fh.seek(last[0])
            return event_pb2.Event.FromString(fh.read(last[1])).wall_time
    except (OSError, DecodeError):
        return None


def _written_order(file: Path) -> tuple:
    """Event files in the order they were written: by the second their name starts with, then by
    the rest of the name with its numbers compared as numbers (a process's writers count on in it:
    its 10th file made in one second comes after its 9th)."""
    parts = re.split(r"(\d+)", file.name)
    return (_created(file), str(file.parent), [int(p) if p.isdigit() else p for p in parts])


def _prefix(folder: Path, launch: Path) -> str:
    """The prefix of the tags of an event file in `folder`: its path in its launch's own folder,
    however deep, as TensorBoard names that run. Leaves out the folder torch's `add_hparams`
    writes its metrics to, named by the time it was called (`str(time.time())`), which would make
    every run's keys its own."""
    parts = [p for p in folder.relative_to(launch).parts if not re.fullmatch(r"\d+\.\d+", p)]
    return "".join(p + "/" for p in parts)


def _launch_start(files: list[Path]) -> tuple[int, frozenset[str]] | None:
    """The step a launch began at, and the tags it logged there: the first step at which it
    logged a scalar other than the metrics an hparams record declares (Lightning's
    TensorBoardLogger logs an `hp_metric` placeholder at step 0 in every launch, a resumed one too,
    and declares it in the records that follow it at that step). None for a launch with no
    scalars."""
    declared: set[str] = set()
    at, tags = None, []  # the step being read, and the tags of the scalars logged at it
    for file in files:
        for step, tag, value, _ in _scalars(file, [], declared=declared):
            if value is None:
                continue
            if step != at:
                if set(tags) - declared:
                    return at, frozenset(tags) - declared
                at, tags = step, []
            tags.append(tag)
    return (at, frozenset(tags) - declared) if set(tags) - declared else None


def _scalars(file: Path, cut: list[str], settings: dict | None = None, declared: set[str] | None = None):
    """(step, tag, value or None for a summary that is not a scalar, wall time) of every summary
    value in one event file, in file order; the hyperparameters of an hparams session start are
    added to `settings`, and the metric tags its experiment declares to `declared`."""
    from tensorboard import data_compat
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    for number, raw in enumerate(_records(file, cut), start=1):
        try:
            event = event_pb2.Event.FromString(raw)
        except Exception:
            raise GapwatchError(f"{file}: record {number}: not a TensorBoard event") from None
        if not event.HasField("summary"):
            continue
        event = data_compat.migrate_event(event)
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "hparams":
                data = _hparams_data(value.metadata.plugin_data.content)
                if settings is not None:
                    settings.update(_session_hparams(data))
                if declared is not None and data is not None and data.WhichOneof("data") == "experiment":
                    declared.update(m.name.tag for m in data.experiment.metric_infos)
            elif settings is not None and value.tag.split("/")[0] == ARGV_TAG:
                settings.update(_argv_settings(value, tensor_util))
            elif settings is not None and value.tag.split("/")[0] == t5x_gin.GIN_TAG and (
                    value.metadata.plugin_data.plugin_name == "text"):
                settings.update(t5x_gin.gin_settings(_text(value, tensor_util)))
            yield int(event.step), value.tag, _scalar(value, tensor_util), event.wall_time


def _text(value, tensor_util) -> str:
    """The text of a text summary; "" for one that holds none."""
    try:
        text = tensor_util.make_ndarray(value.tensor).reshape(-1)[0]
    except (IndexError, KeyError, TypeError, ValueError):
        return ""
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)


def _argv_settings(value, tensor_util) -> dict[str, object]:
    """The `--name value` options (`--flag` alone: true) of the command line fairseq and metaseq
    write as a text summary, as the run's settings; {} for a summary that holds no text."""
    try:
        words = shlex.split(_text(value, tensor_util))
    except ValueError:
        return {}
    out: dict[str, object] = {}
    for word, after in zip(words, [*words[1:], None]):
        if word.startswith("--") and len(word) > 2:
            name, eq, given = word[2:].partition("=")
            plain = given if eq else (after if after is not None and not after.startswith("--") else "true")
            out[name.replace("-", "_")] = setting(plain) if plain != "true" else True
    return out


def _scalar(value, tensor_util) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.metadata.plugin_data.plugin_name != "scalars" or not value.HasField("tensor"):
        return None
    if value.tensor.dtype == _DT_BFLOAT16:
        return _bfloat16(value.tensor)
    try:
        array = tensor_util.make_ndarray(value.tensor)
    except (KeyError, TypeError, ValueError):  # a type numpy cannot hold: left out, like a non-scalar
        return None
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()).item())


def _hparams_data(content: bytes):
    """An hparams plugin record (HParamsPluginData), or None for one that does not parse."""
    from google.protobuf.message import DecodeError
    from tensorboard.plugins.hparams import plugin_data_pb2

    try:
        return plugin_data_pb2.HParamsPluginData.FromString(content)
    except DecodeError:
        return None


def _session_hparams(data) -> dict[str, object]:
    """name -> value of the hyperparameters an hparams plugin record starts a session with ({} for
    its other records: the experiment's layout, the session's end)."""
    if data is None or data.WhichOneof("data") != "session_start_info":
        return {}
    out: dict[str, object] = {}
    for name, value in data.session_start_info.hparams.items():
        kind = value.WhichOneof("kind")
        plain = getattr(value, kind) if kind in ("number_value", "string_value", "bool_value") else None
        # The plugin keeps every number as a double: a layer count reads 2, not 2.0.
        out[name] = int(plain) if isinstance(plain, float) and plain.is_integer() else plain
    return out


_DT_BFLOAT16 = 14  # tensorflow's DataType enum


def _bfloat16(tensor) -> float | None:
    """A bfloat16 scalar (a JAX loss written as it was computed), which numpy has no type for: its
    16 bits, kept in half_val or tensor_content, are the high half of a float32."""
    bits = (np.frombuffer(tensor.tensor_content, dtype="<u2") if tensor.tensor_content
            else np.array(tensor.half_val, dtype=np.uint16))
    if bits.size != 1:
        return None
    return float((bits.astype(np.uint32) << 16).view(np.float32)[0])


def _records(file: Path, cut: list[str]):
    """Raw records of one event file; damage is an error, and a file that stops inside a record
    ends after its last complete one, with a note of the bytes left unread added to `cut`."""
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

    reader = PyRecordReader_New(str(file))
    number = 0
    consumed = 0  # bytes of the complete records (8 length, 4 + 4 checksums and the data)
    while True:
        number += 1
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return
        except errors.DataLossError as exc:
            # The reader says "truncated record" for a file that ends inside a record, its
            # checksum fields included; any other data loss is a checksum that does not match.
            message = str(exc.message if hasattr(exc, "message") else exc)
            if "truncated record" not in message:
                raise GapwatchError(
                    f"{file}: record {number}: checksum mismatch (the file is damaged)"
                ) from None
            unread = file.stat().st_size - consumed
            cut.append(f"{file}: crashed: the file stops inside record {number}; imported its "
                       f"{number - 1:,} complete records, {unread:,} bytes left unread")
            return
        record = reader.record()
        consumed += len(record) + 16
        yield record


FORMAT = Format("tensorboard", lambda source, options: parse_tensorboard(source),
                lambda probe: is_event_file(probe.path) or probe.is_dir and any(
                    is_event_file(f) for f in probe.path.rglob(f"*{_MARKER}*")), steps="asked")
