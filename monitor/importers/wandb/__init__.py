"""Reading W&B runs, as one thing: offline run files and folders (`run_file`: `.wandb`), a server's
public API (`api`: `wandb://entity/project/run_id`) and CSV exports (`csv_export`).

A `.wandb` file is read in layers: `log_format` (the LevelDB-style log of records) checks each block
with `crc`, `wire` decodes the two record shapes that make up almost all of a file at once, and
`records` decodes the rest exactly with wandb's own protobuf classes; `run_file` puts them together
into an imported run. Submodules are imported where used: the API reader loads wandb itself.
"""
