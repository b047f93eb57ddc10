"""W&B runs on a server: `wandb://entity/project/run_id`, read through wandb's public API.

`wandb.Api(overrides={"base_url": ...}).run(path).scan_history()` pages through the history
(wandb's core service asks the server for pages of `page_size` steps). The server is the one in
$WANDB_BASE_URL, or given, else W&B's cloud.

Before wandb is involved the server is probed with one short HTTP request, because `wandb.Api`
against a dead or wrong address waits out its own timeout and then reports "invalid credentials",
which sends people looking in the wrong place. The probe reports the real cause in one line
(connection refused, name not resolved, timed out, an HTTP error status) within
`ApiConfig.probe_timeout_s`.

Rules are those of W&B history (see run_file): names starting with `_` are W&B's own, `_step` is
the step, `_timestamp` the wall time, non-numeric values are left out and counted, steps only grow.
A run whose state is `running` is imported as live; `follow` polls it for new steps.

What the server answers is checked as a file is, since a broken or hostile server can answer
anything: a `_step` that is not a whole number from 0 to 2**63 - 1, an integer no float holds,
a row nested deeper than MAX_NESTING, a run record of the wrong shape each end in one line
naming the run (and the step). A server that keeps failing is given up on after
`ApiConfig.retries` retries (wandb's own default retries a failing server for days). Two changes
happen inside wandb's own reader, before gapwatch sees a row, and cannot be told apart from what
was logged: a number beyond a float arrives as Infinity (W&B's spelling of a logged inf), and a
step beyond 2**63 arrives wrapped to a negative one (refused as such).
"""

from __future__ import annotations

import math
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from monitor.errors import GapwatchError
from monitor.schema import MAX_STEP

from ..formats import Format
from ..generic_rows import MAX_NESTING
from ..imported_run import ImportedRun, scalars_frame
from ..input_checks import cut, shown, unreachable
from .step_metric import LoggedItems, StepDeclaration, declared_step, from_config

DEFAULT_BASE_URL = "https://api.wandb.ai"
_URL = re.compile(r"^wandb://(?P<entity>[^/\s]+)/(?P<project>[^/\s]+)/(?P<run>[^/\s]+)/?$")
# Run states after which no more history will come.
DONE_STATES = ("finished", "crashed", "failed", "killed")
SUMMARY_TEXT_MAX = 200


@dataclass
class ApiConfig:
    """How the W&B server is reached."""

    base_url: str | None = None  # None: $WANDB_BASE_URL, else W&B's cloud
    api_key: str | None = None  # None: $WANDB_API_KEY or wandb's own login
    page_size: int = 1000  # history rows per page (wandb's own default)
    probe_timeout_s: float = 5.0  # the reachability probe; a live server answers in well under 1 s
    timeout_s: int = 30  # wandb.Api's HTTP timeout once the server is known to answer
    retries: int = 3  # retries of a failing request before the import gives up
    retry_wait_max_s: float = 10.0  # the longest wait between two of them


def parse_url(url: str) -> tuple[str, str, str]:
    m = _URL.match(url.strip())
    if not m:
        raise GapwatchError(f"{url}: expected wandb://entity/project/run_id")
    return m.group("entity"), m.group("project"), m.group("run")


def resolve_base_url(config: ApiConfig) -> str:
    return (config.base_url or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


def probe(base_url: str, timeout_s: float) -> None:
    """Raise a one-line GapwatchError unless the server answers HTTP at all."""
    request = urllib.request.Request(f"{base_url}/graphql", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):
            return
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise GapwatchError(
                f"W&B server {base_url} answered HTTP {exc.code} ({exc.reason}): it is up but "
                "failing"
            ) from None
        return  # 4xx: it speaks HTTP; wandb will say what it wants
    except urllib.error.URLError as exc:
        raise GapwatchError(f"W&B server {base_url} is unreachable: {unreachable(exc.reason, timeout_s)}") from None
    except TimeoutError as exc:
        raise GapwatchError(f"W&B server {base_url} is unreachable: {unreachable(exc, timeout_s)}") from None
    except (ConnectionError, OSError) as exc:
        raise GapwatchError(f"W&B server {base_url} is unreachable: {exc}") from None


@dataclass
class WandbApiReader:
    """One run on a W&B server; `read` returns the steps logged since the last read."""

    url: str
    config: ApiConfig = field(default_factory=ApiConfig)
    last_step: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    state: str | None = None
    run_name: str | None = None
    run_config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    step_declarations: list[StepDeclaration] = field(default_factory=list)  # see step_metric.py
    _api: object = None

    @property
    def finished(self) -> bool:
        return self.state in DONE_STATES

    def read(self, progress=None):
        """(steps, keys as str, values, wall times) of the rows after self.last_step."""
        run = self._run()
        try:
            self.state = str(run.state) if run.state is not None else None
            self.run_name = str(run.name or run.id)
            self.run_config = {str(k): v for k, v in dict(run.config).items()
                               if not str(k).startswith("_")}
            self.step_declarations = from_config(dict(run.rawconfig).get("_wandb"))
            self.summary = _public_summary(run.summary_metrics)
            last = run.lastHistoryStep
        except Exception as exc:  # a run record of the wrong shape, as wandb parsed it
            raise GapwatchError(f"{self.url}: the server's record of the run is malformed: "
                                f"{_one_line(exc)}") from None
        if isinstance(last, bool) or not isinstance(last, int):
            raise GapwatchError(f"{self.url}: the server gives the run's last step as "
                                f"{shown(last)}, not a whole number")
        start = 0 if self.last_step is None else self.last_step + 1
        steps, keys, values, walls = [], [], [], []
        total = max(0, min(last, MAX_STEP) + 1 - start)
        try:
            for n, row in enumerate(run.scan_history(page_size=self.config.page_size,
                                                     min_step=start, use_cache=False), 1):
                self._row(row, steps, keys, values, walls)
                if progress is not None and n % self.config.page_size == 0:
                    progress(n, total)
        except GapwatchError:
            raise
        except Exception as exc:  # wandb raises its own CommError/ApiError types
            raise GapwatchError(f"{self.url}: reading history failed: {_one_line(exc)}") from None
        if progress is not None:
            progress(total, total)
        return (np.asarray(steps, dtype=np.int64), keys, np.asarray(values, dtype=float),
                np.asarray(walls, dtype=float))

    def _row(self, row: dict, steps, keys, values, walls) -> None:
        if not isinstance(row, dict) or "_step" not in row:
            raise GapwatchError(f"{self.url}: a history row has no _step")
        step = row["_step"]
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
            after = f" after step {self.last_step}" if self.last_step is not None else ""
            raise GapwatchError(f"{self.url}: a history row{after} has _step {shown(step)}, "
                                f"not a whole number from 0 to {MAX_STEP}")
        if self.last_step is not None and step <= self.last_step:
            raise GapwatchError(
                f"{self.url}: step {step} after step {self.last_step}: W&B steps only grow"
            )
        self.last_step = step
        wall = _float(row.get("_timestamp"))
        wall = wall if wall is not None and math.isfinite(wall) else math.nan
        for name, value in _flatten(row, self.url, step):
            if name.startswith("_"):
                continue
            number = _scalar(value)
            if number is _UNFIT:
                raise GapwatchError(f"{self.url}: step {step}: {shown(name)}: the number "
                                    f"{shown(value)} does not fit a 64-bit float")
            if number is None:
                if value is not None:
                    self.skipped[name] = self.skipped.get(name, 0) + 1
                continue
            steps.append(step)
            keys.append(name)
            values.append(number)
            walls.append(wall)

    def _run(self):
        entity, project, run_id = parse_url(self.url)
        if self._api is None:
            base = resolve_base_url(self.config)
            probe(base, self.config.probe_timeout_s)
            self._api = _make_api(base, self.config)
        # wandb.Api caches run objects; a follower needs the run's current state each time.
        self._api.flush()
        try:
            return self._api.run(f"{entity}/{project}/{run_id}")
        except Exception as exc:
            text = _one_line(exc)
            if "not found" in text.lower() or "could not find" in text.lower():
                raise GapwatchError(f"{self.url}: no such run on the server") from None
            raise GapwatchError(f"{self.url}: the server's answer for the run could not be "
                                f"read: {text}") from None

    def notes(self) -> list[str]:
        notes = []
        if self.skipped:
            listed = ", ".join(f"{cut(k)} ({n})" for k, n in sorted(self.skipped.items())[:6])
            notes.append(f"{self.url}: left out values that are not numbers: {listed}")
        if not self.finished:
            notes.append(f"{self.url}: the run is {cut(self.state or 'in an unknown state')}: "
                         "imported what the server has so far")
        return notes


def _make_api(base: str, config: ApiConfig):
    import wandb

    try:
        # The history scan runs in wandb's service, whose retry policy comes from the process's
        # wandb settings: a bounded one, so that a failing server ends the import.
        wandb.setup(settings=wandb.Settings(
            x_graphql_retry_max=config.retries,
            x_graphql_retry_wait_max_seconds=config.retry_wait_max_s,
            x_graphql_timeout_seconds=config.timeout_s))
        return wandb.Api(overrides={"base_url": base}, api_key=config.api_key,
                         timeout=config.timeout_s)
    except Exception as exc:
        raise GapwatchError(f"W&B server {base}: {_one_line(exc)}") from None


def parse_wandb_api(url: str, config: ApiConfig | None = None, progress=None) -> ImportedRun:
    reader = WandbApiReader(url, config or ApiConfig())
    steps, keys, values, walls = reader.read(progress=progress)
    return to_imported(reader, steps, keys, values, walls)


def to_imported(reader: WandbApiReader, steps, keys, values, walls) -> ImportedRun:
    codes, names = pd.factorize(pd.Series(keys, dtype=object))
    step_key, step_notes = declared_step(reader.step_declarations,
                                         LoggedItems([str(n) for n in names], steps, codes, values))
    return ImportedRun(
        name_hint=reader.run_name or parse_url(reader.url)[2],
        scalars=scalars_frame(steps, keys, values, wall_time=walls),
        config=dict(reader.run_config),
        summary=dict(reader.summary),
        source=reader.url,
        notes=reader.notes() + step_notes,
        live=not reader.finished,
        step_key=step_key,
    )


def _flatten(row: dict, url: str, step: int, prefix: str = "", depth: int = 0):
    if depth > MAX_NESTING:
        raise GapwatchError(f"{url}: step {step}: a value nested more than {MAX_NESTING} levels "
                            "deep")
    for name, value in row.items():
        if isinstance(value, dict) and "_type" not in value:
            yield from _flatten(value, url, step, f"{prefix}{name}.", depth + 1)
        else:
            yield f"{prefix}{name}", value


# _scalar's answer for an integer too large for a float.
_UNFIT = object()


def _float(value) -> float | None:
    """A JSON number as a float; None for anything else or an integer no float holds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _scalar(value):
    """A history value as a float, None when it is not a number, _UNFIT when no float holds it."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        number = _float(value)
        return _UNFIT if number is None else number
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value)
    return None


def _public_summary(summary) -> dict:
    out = {}
    for name, value in dict(summary or {}).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (int, float, bool)) or (
                isinstance(value, str) and len(value) <= SUMMARY_TEXT_MAX):
            out[name] = value
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]



FORMAT = Format("wandb-api", lambda source, options: parse_wandb_api(
    str(source), options.api_config, progress=options.progress), url_scheme="wandb://", steps="rows")

__all__ = ["FORMAT", "ApiConfig", "WandbApiReader", "parse_wandb_api", "parse_url", "probe"]
