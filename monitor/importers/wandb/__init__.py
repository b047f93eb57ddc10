"""Reading W&B runs, as one thing: offline run files and folders (`run_file`: `.wandb`), a server's
public API (`api`: `wandb://entity/project/run_id`) and CSV exports (`csv_export`).

A `.wandb` file is read in layers: `log_format` (the LevelDB-style log of records) checks each block
with `crc`, `wire` decodes the two record shapes that make up almost all of a file at once, and
`records` decodes the rest exactly with wandb's own protobuf classes; `run_file` puts them together
into an imported run. Submodules are imported where used: the API reader loads wandb itself, and
`run_file` (with wandb's protobuf classes) loads only where a source may be a W&B run: its format,
`RUN_FILE`, is declared here.
"""

from __future__ import annotations

from ..formats import Format, Probe
from .log_format import FILE_HEADER


def _read_run(source, options):
    from .run_file import parse_wandb_run

    return parse_wandb_run(source, progress=options.progress)


def _is_run(probe: Probe) -> bool:
    if not probe.is_dir:
        return probe.head.startswith(FILE_HEADER[:4].decode())
    from .run_file import is_wandb_source

    return is_wandb_source(probe.path)


RUN_FILE = Format("wandb-file", _read_run, _is_run, steps="rows")
