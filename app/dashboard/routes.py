"""URLs of the dashboard: parsing them into a view, and building them for links.

`/` is the runs overview; `/run/<name>` a run against its reference, with optional query
parameters `ref` (any other run: this is how two runs are compared), `axis` (step|tokens),
and `start`/`end` (a step range, which alert links use: `/run/<name>?start=<step>&end=<step>`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from urllib.parse import parse_qs, quote, unquote, urlencode

AXES = ("step", "tokens")
RUN_PREFIX = "/run/"


@dataclass(frozen=True)
class ViewSpec:
    """What the run page shows; kept in the page as a dict (dcc.Store) between callbacks."""

    run: str
    reference: str | None = None
    axis: str = "step"
    start: int | None = None
    end: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ViewSpec":
        return cls(**{k: d.get(k) for k in ("run", "reference", "axis", "start", "end")})


def run_href(run: str, *, reference: str | None = None, axis: str | None = None,
             start: int | None = None, end: int | None = None) -> str:
    """A link to a run's page; the name is percent-encoded whole (a `/` or `?` in it stays a name)."""
    query = {k: v for k, v in (("ref", reference), ("axis", axis if axis != "step" else None),
                               ("start", start), ("end", end)) if v is not None}
    path = RUN_PREFIX + quote(run, safe="")
    return f"{path}?{urlencode(query)}" if query else path


def parse_run_path(pathname: str | None, search: str | None) -> ViewSpec | None:
    """The view a `/run/<name>?...` URL asks for; None for any other path."""
    if not pathname or not pathname.startswith(RUN_PREFIX) or len(pathname) == len(RUN_PREFIX):
        return None
    run = unquote(pathname[len(RUN_PREFIX):])
    # Blank values kept: `ref=` is "no reference", unlike no `ref` at all ("the run's own").
    query = parse_qs((search or "").lstrip("?"), keep_blank_values=True)

    def one(name: str) -> str | None:
        values = query.get(name)
        return values[0] if values else None

    axis = one("axis") if one("axis") in AXES else "step"
    start, end = _int(one("start")), _int(one("end"))
    if start is not None and end is not None and start > end:
        start, end = end, start
    return ViewSpec(run=run, reference=one("ref"), axis=axis, start=start, end=end)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
