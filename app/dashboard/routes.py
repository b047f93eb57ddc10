"""URLs of the dashboard: parsing them into a view, and building them for links.

`/` is the runs overview; `/run/<name>` a run against its reference, with optional query
parameters `ref` (any other run: this is how two runs are compared), `axis` (step|tokens),
`start`/`end` (a step range to highlight, which alert links use: `?start=<step>&end=<step>`),
`from`/`to` (the step range shown), `smooth` (the EMA weight), `y=all` (include the early
transient in the loss panels' y range), `series` (once per logged series picked to be drawn) and
`task` (once per downstream metric picked, instead of the first few in the report's order).
Every change of the view is written back into the URL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from urllib.parse import parse_qs, quote, unquote, urlencode

AXES = ("step", "tokens")
RUN_PREFIX = "/run/"


@dataclass(frozen=True)
class ViewSpec:
    """What the run page shows; kept in the page as a dict (dcc.Store) between callbacks, and in
    its URL, so a link opens exactly this view."""

    run: str
    reference: str | None = None
    axis: str = "step"
    start: int | None = None
    """With `end`: a step range to highlight (an alert's), shown with context around it."""
    end: int | None = None
    lo: int | None = None
    """With `hi`: the step range shown (a zoom), exactly; wins over start/end's context."""
    hi: int | None = None
    smoothing: float = 0.0
    """TensorBoard-style EMA weight of the train-loss lines, 0 (none) to MAX_SMOOTHING."""
    full_y: bool = False
    """Loss panels include the early transient in their y range (by default they start after it)."""
    series: tuple[str, ...] = ()
    """Logged series a person picked to see, run over reference, in the order picked."""
    tasks: tuple[str, ...] = ()
    """Downstream metrics picked for the evals panel, in the order picked (none: the first few)."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ViewSpec":
        fields = {f: d[f] for f in FIELDS if f in d}
        for listed in ("series", "tasks"):
            if listed in fields:
                fields[listed] = tuple(fields[listed] or ())  # a list, as the page keeps it in JSON
        return cls(**fields)

    def replace(self, **changes) -> "ViewSpec":
        return ViewSpec(**{**self.to_dict(), **changes})

    def search(self) -> str:
        """The query part of `href` ("?ref=...", or "" for the default view): what the page writes
        into its URL."""
        _, mark, query = self.href().partition("?")
        return mark + query

    def href(self) -> str:
        return run_href(self.run, reference=self.reference, axis=self.axis, start=self.start, end=self.end,
                        lo=self.lo, hi=self.hi, smoothing=self.smoothing, full_y=self.full_y, series=self.series,
                        tasks=self.tasks)


FIELDS = ("run", "reference", "axis", "start", "end", "lo", "hi", "smoothing", "full_y", "series", "tasks")
MAX_SMOOTHING = 0.999


def run_href(run: str, *, reference: str | None = None, axis: str | None = None,
             start: int | None = None, end: int | None = None, lo: int | None = None, hi: int | None = None,
             smoothing: float = 0.0, full_y: bool = False, series: tuple[str, ...] = (),
             tasks: tuple[str, ...] = ()) -> str:
    """A link to a run's page; the name is percent-encoded whole (a `/` or `?` in it stays a name).
    Defaults are left out, so a plain link stays `/run/<name>`."""
    query = {k: v for k, v in (
        ("ref", reference), ("axis", axis if axis != "step" else None), ("start", start), ("end", end),
        ("from", lo), ("to", hi), ("smooth", f"{smoothing:g}" if smoothing else None),
        ("y", "all" if full_y else None), ("series", list(series) or None), ("task", list(tasks) or None),
    ) if v is not None}
    path = RUN_PREFIX + quote(run, safe="")
    return f"{path}?{urlencode(query, doseq=True)}" if query else path


def parse_run_path(pathname: str | None, search: str | None) -> ViewSpec | None:
    """The view a `/run/<name>?...` URL asks for; None for any other path. Values that do not
    parse are ignored (the default view), ranges are put in order."""
    if not pathname or not pathname.startswith(RUN_PREFIX) or len(pathname) == len(RUN_PREFIX):
        return None
    run = unquote(pathname[len(RUN_PREFIX):])
    # Blank values kept: `ref=` is "no reference", unlike no `ref` at all ("the run's own").
    query = parse_qs((search or "").lstrip("?"), keep_blank_values=True)

    def one(name: str) -> str | None:
        values = query.get(name)
        return values[0] if values else None

    axis = one("axis") if one("axis") in AXES else "step"
    start, end = _ordered(_int(one("start")), _int(one("end")))
    lo, hi = _ordered(_int(one("from")), _int(one("to")))
    if lo is None or hi is None:
        lo = hi = None
    def listed(name: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for v in query.get(name, []) if v))

    return ViewSpec(run=run, reference=one("ref"), axis=axis, start=start, end=end, lo=lo, hi=hi,
                    smoothing=_smoothing(one("smooth")), full_y=one("y") == "all", series=listed("series"),
                    tasks=listed("task"))


def _ordered(a: int | None, b: int | None) -> tuple[int | None, int | None]:
    return (b, a) if a is not None and b is not None and a > b else (a, b)


def _smoothing(value: str | None) -> float:
    try:
        weight = float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
    return min(max(weight, 0.0), MAX_SMOOTHING) if weight == weight else 0.0


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
