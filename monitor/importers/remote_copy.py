"""Sources on object stores and other remote filesystems (`gs://`, `s3://`, `az://`, `hf://`, ...:
any filesystem fsspec knows whose package is installed, gcsfs for Google Cloud Storage, s3fs for
S3): what an import reads is copied into a local folder first, then read as a local source is.

JAX trainers on TPUs (T5X, MaxText, Levanter, Pax) write their TensorBoard folders into a bucket,
beside checkpoints of tens of gigabytes. So a folder's copy takes only files a reader reads:
TensorBoard's event files and the small logs and settings beside them (by their suffixes), never a
file under a checkpoint's folder (`checkpoint_1000/`, `checkpoints/`). A single file is copied as
it is. The copy is kept in the user's cache folder at the URL's own path (`gs://bucket/run` in
`remote-sources/gs/bucket/run`), which is the source the store records, and is brought up to date
file by file by size, so an import again, or `--follow`, fetches only what grew.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from monitor.errors import GapwatchError

# Schemes read elsewhere (wandb://, an MLflow server's pages) or not remote at all.
_NOT_REMOTE = {"http", "https", "wandb", "file", "local"}
_SCHEME = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")
# What a reader may read in a folder: metric logs, settings, TensorBoard's event files.
READ_SUFFIXES = {".jsonl", ".json", ".ndjson", ".csv", ".tsv", ".log", ".txt", ".yaml", ".yml", ".gin",
                 ".parquet", ".pq", ".wandb", ".db"}
_CHECKPOINT_PART = re.compile(r"checkpoints?(_\d+)?|ckpt.*", re.IGNORECASE)
CACHE_DIR_NAME = "remote-sources"


def is_remote(source) -> bool:
    """Whether `source` is a URL of a filesystem fsspec knows, other than the ones read elsewhere."""
    found = _SCHEME.match(str(source))
    if found is None or found["scheme"].lower() in _NOT_REMOTE:
        return False
    from fsspec.registry import known_implementations

    return found["scheme"].lower() in known_implementations


def _read(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if any(_CHECKPOINT_PART.fullmatch(p) for p in parts[:-1]):
        return False
    name = parts[-1]
    return "tfevents" in name or PurePosixPath(name).suffix.lower() in READ_SUFFIXES


def local_copy(url: str, cache: Path | None = None, said=None) -> Path:
    """The local copy of a remote file or folder (module rules), up to date; said(line): what it
    copies, once the files to read are known."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url)
    except ImportError as exc:  # fsspec names the package a scheme needs
        raise GapwatchError(f"{url}: {exc}") from None
    except ValueError as exc:
        raise GapwatchError(f"{url}: {exc}") from None
    scheme = _SCHEME.match(url)["scheme"].lower()
    parts = [p for p in PurePosixPath(url[len(scheme) + 3:]).parts if p not in ("/", "..", ".")]
    target = (cache or _cache()).joinpath(scheme, *parts)
    try:
        if not fs.exists(root):
            raise GapwatchError(f"{url}: no such file or folder")
        if not fs.isdir(root):
            files = {root: fs.size(root)}
            targets = {root: target}
        else:
            root = root.rstrip("/")
            found = fs.find(root, detail=True)
            files = {p: info.get("size") for p, info in found.items() if _read(p[len(root):])}
            if not files:
                raise GapwatchError(f"{url}: no file here that an import reads (TensorBoard event files, metric "
                                    "logs), checkpoints left aside")
            targets = {p: target.joinpath(*PurePosixPath(p[len(root):].lstrip("/")).parts) for p in files}
        stale = {p: size for p, size in files.items() if not targets[p].exists() or targets[p].stat().st_size != size}
        if said is not None:
            said(f"copying {len(stale)} of the {len(files)} file(s) an import reads of {url} (the rest are up to "
                 f"date; checkpoints left aside) into {target}")
        for path in sorted(stale):
            targets[path].parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(path, str(targets[path]))
    except GapwatchError:
        raise
    except (OSError, ValueError) as exc:
        raise GapwatchError(f"{url}: cannot copy it: {exc}") from None
    return target


def _cache() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("gapwatch")) / CACHE_DIR_NAME
