"""Lightning's hparams.yaml: the hyperparameters its loggers write beside the metrics.

TensorBoardLogger and CSVLogger save what `save_hyperparameters()` recorded as `hparams.yaml` in the
run's version folder (`lightning_logs/version_0/`), next to the event file or `metrics.csv`. It is
the run's config, as a W&B run's config is, and the report compares it with the reference's.
Lightning writes values it cannot put in plain YAML with Python tags (`!!python/object:
argparse.Namespace`, `!!python/tuple`): they are read as the mappings, lists and scalars they hold,
never constructed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

FILE_NAME = "hparams.yaml"


class _PlainLoader(yaml.SafeLoader):
    """The safe loader, reading a tagged node as its plain contents."""


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_PlainLoader.add_multi_constructor("tag:yaml.org,2002:python/", _untagged)
_PlainLoader.add_multi_constructor("!", _untagged)


def read_hparams(folder: Path) -> tuple[dict[str, Any], str | None]:
    """(the hyperparameters in `folder`/hparams.yaml, {} when there is none; a note when the file is
    there but could not be read as a mapping)."""
    path = folder / FILE_NAME
    if not path.is_file():
        return {}, None
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_PlainLoader)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return {}, f"{path}: not read as the run's settings ({' '.join(str(exc).split())[:200]})"
    if doc is None:
        return {}, None
    if not isinstance(doc, dict):
        return {}, f"{path}: not read as the run's settings (a {type(doc).__name__}, not a mapping)"
    # Plain JSON values, as the store keeps a config (a YAML date becomes its text).
    return json.loads(json.dumps({str(k): v for k, v in doc.items()}, default=str)), None


__all__ = ["FILE_NAME", "read_hparams"]
