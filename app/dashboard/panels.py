"""The run page's figures, built from a ViewData with the plain figure functions of app.figures.

Every figure gets the event markers, the highlighted step range of an alert link, the view's x
range (so a zoom on one panel applies to all) and a `uirevision` that changes with the view, so a
new figure's range is applied rather than the browser's previous zoom.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app import figures
from app.dashboard.contain import contained
from app.dashboard.queries import ViewData
from app.figures.data import DATA_KEYS
from app.figures.frames import x_values
from app.figures.overlay import parse_series_uid
from app.figures.style import base_figure, note_empty
from monitor.detectors import drawn_by, shown_in
from monitor.detectors.overlap import steps
from monitor.schema import (
    DOWNSTREAM_PREFIX,
    HELDOUT_PREFIX,
    Drawing,
    RunData,
    RunInfo,
    Section,
    PERF_MFU,
    PERF_STEP_TIME_S,
    PERF_TOKENS_PER_S,
    SPIKE_SCORE_GRAD_NORM,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
)

PANELS = ("loss", "delta", "heldout", "heldout_delta", "gap", "evals", "grad_norm", "throughput", "data", "picked")
# Panels whose traces are logged series that live polling appends to (by trace uid).
LIVE_PANELS = ("loss", "grad_norm", "throughput", "data", "picked")
THROUGHPUT_KEYS = (PERF_TOKENS_PER_S, PERF_MFU, PERF_STEP_TIME_S)
# The delta panel's windows where the view read no train loss of both runs to cut into them.
NO_WINDOWS = pd.DataFrame({c: pd.Series(dtype=float) for c in ("x", "delta", "band", "n")})


# What the line of panels left out calls each one.
PANEL_NAMES = {"loss": "train loss", "delta": "train loss delta", "heldout": "held-out loss",
               "heldout_delta": "held-out loss delta", "gap": "train–held-out gap", "evals": "downstream evals", "grad_norm": "grad norm",
               "throughput": "throughput", "data": "data loader", "picked": "picked series"}
# Panels hidden without a word when empty: the picked series are drawn once a person picks some.
UNNAMED = {"picked"}


@dataclass
class RenderedView:
    figures: dict[str, go.Figure]
    traces: dict[str, list[list]]  # panel -> [[trace index, role, key], ...] of appendable series
    resolution: str
    left_out: dict[str, str]
    """Panels with nothing to draw in the whole run (not only in this step range), each with why:
    the page hides them and names them in one line rather than showing a column of empty charts."""

    def left_out_line(self) -> str | None:
        named = {p: why for p, why in self.left_out.items() if p not in UNNAMED}
        if not named:
            return None
        return "Not drawn: " + ", ".join(f"{PANEL_NAMES[p]} ({why})" for p, why in named.items())


def build(view: ViewData, tasks: list[str] | None = None, params: dict | None = None,
          picked: list[str] | None = None) -> RenderedView:
    """Every panel of the run page; `tasks` picks the downstream evals shown (None: the first few);
    `params` are the detector settings the run was judged with (the thresholds drawn); `picked`
    are the logged series a person chose to see, run over reference (read by `load_view`)."""
    run, ref = view.run, view.reference
    x_title = run.axis.title
    long = run.long
    name = run.name
    ref_name = ref.name if ref is not None else None
    ref_long = ref.long if ref is not None else long.iloc[0:0]

    def series(frame: pd.DataFrame, key: str) -> pd.DataFrame:
        return figures.series_frame(frame, key)

    train, ref_train = series(long, TRAIN_LOSS), series(ref_long, TRAIN_LOSS)
    smooth = run.smoothed.get(TRAIN_LOSS)
    ref_smooth = ref.smoothed.get(TRAIN_LOSS) if ref is not None else None
    why = EmptyReasons(view)
    detections = view.detections
    spikes = detections[(detections["detector"].isin(shown_in(Section.GRAD_NORM))) & (detections["metric"] == TRAIN_GRAD_NORM)]
    stalls = detections[detections["detector"].isin(shown_in(Section.THROUGHPUT))]

    def delta() -> go.Figure:
        # The faint line is the drawn (or smoothed) difference; the windows and their band are the
        # detector's, from every logged value (or bucket means): a downsampled series' bucket
        # extremes would widen the band several times over.
        if smooth is not None and ref_smooth is not None:
            points = figures.delta_points(smooth, ref_smooth)
        else:
            points = figures.delta_points(train, ref_train)
        fine = view.delta
        windows = (figures.reference_delta(fine.run, fine.reference, params=params,
                                           values_per_point=fine.values_per_point)[0]
                   if fine is not None else NO_WINDOWS)
        return figures.delta_figure(windows, points, run_name=name, reference_name=ref_name,
                                    x_title=x_title, empty_reason=why.delta(), full_y=view.spec.full_y)

    @functools.cache
    def held(of_reference: bool) -> pd.DataFrame:
        # Both held-out panels draw from these: built once, inside the first panel that asks (a
        # failure still costs only the panels that need them).
        return figures.heldout_frame(ref_long if of_reference else long)

    def heldout() -> go.Figure:
        return figures.heldout_figure(held(False), held(True), run_name=name,
                                      reference_name=ref_name, x_title=x_title, full_y=view.spec.full_y,
                                      empty_reason=why.in_range("held-out evaluation", HELDOUT_PREFIX))

    def heldout_delta() -> go.Figure:
        # The detector's own statistic and band (Drawing.HELDOUT_BAND), from the checkpoints in view.
        detector = drawn_by(Drawing.HELDOUT_BAND, params)
        judged = (detector.checkpoint_deltas(_heldout_run(long, name), _heldout_run(ref_long, ref_name))
                  if detector is not None and ref is not None else NO_WINDOWS)
        return figures.delta_figure(judged.rename(columns={"step": "x"}), run_name=name, reference_name=ref_name,
                                    x_title=x_title, title="held-out loss delta (run − reference)",
                                    summary="median over sets", band_label="held-out divergence threshold",
                                    empty_reason=why.heldout_delta(), full_y=view.spec.full_y)

    def gap() -> go.Figure:
        ref_means = ref.train_means if ref is not None else run.train_means.iloc[0:0]
        return figures.gap_figure(figures.train_heldout_gap(run.train_means, held(False)),
                                  figures.train_heldout_gap(ref_means, held(True)),
                                  run_name=name, reference_name=ref_name, x_title=x_title, full_y=view.spec.full_y,
                                  empty_reason=why.gap())

    def data() -> go.Figure:
        return figures.data_figure(long[long["key"].isin(DATA_KEYS)], x_title=x_title,
                                   empty_reason=why.in_range("data-loader metrics"))

    makers = {
        "loss": lambda: figures.loss_overlay(train, ref_train if ref is not None else None, run_name=name,
                                             reference_name=ref_name, x_title=x_title, run_smoothed=smooth,
                                             reference_smoothed=ref_smooth, full_y=view.spec.full_y,
                                             empty_reason=why.in_range("train loss")),
        "delta": delta,
        "heldout": heldout,
        "heldout_delta": heldout_delta,
        "gap": gap,
        "evals": lambda: figures.downstream_figure(figures.downstream_frame(long), figures.downstream_frame(ref_long),
                                                   run_name=name, reference_name=ref_name, x_title=x_title,
                                                   tasks=tasks or None,
                                                   empty_reason=why.in_range("downstream evals", DOWNSTREAM_PREFIX)),
        "grad_norm": lambda: figures.grad_norm_figure(series(long, TRAIN_GRAD_NORM), spikes=spikes,
                                                      spike_score=series(long, SPIKE_SCORE_GRAD_NORM),
                                                      x_title=x_title, x_of_step=run.axis.to_x,
                                                      empty_reason=why.in_range("grad norm")),
        "throughput": lambda: figures.throughput_figure(
            long[long["key"].isin(THROUGHPUT_KEYS)], stalls=stalls,
            x_title=x_title, x_of_step=run.axis.to_x, empty_reason=why.in_range("throughput")),
        "data": data,
        "picked": lambda: figures.picked_series_figure(long, ref_long if ref is not None else None, picked or [],
                                                       run_name=name, reference_name=ref_name, x_title=x_title,
                                                       empty_reason=why.in_range("picked series")),
    }
    left_out = why.nothing_logged()
    if not picked:
        left_out["picked"] = "none picked"
    out: dict[str, go.Figure] = {}
    for panel, make in makers.items():
        if panel in left_out:
            continue
        # One odd series costs this panel, with its reason, not the page (contain.py).
        fig, failed = contained(f"the {panel.replace('_', ' ')} panel could not be drawn", make)
        out[panel] = fig if failed is None else _empty(panel.replace("_", " "), x_title, failed)

    x_range = _x_range(view)
    highlight = None
    if view.highlight is not None:
        lo, hi = view.highlight
        lo = hi if lo is None else lo
        hi = lo if hi is None else hi
        highlight = tuple(run.axis.to_x([lo, hi]))
    revision = f"{view.spec.run}|{ref_name}|{view.axis_kind}|{view.step_range}|{view.spec.smoothing}|{view.spec.full_y}"
    for fig in out.values():
        # The page explains the markers once (layout.marker_key), not in every legend.
        figures.add_event_markers(fig, run.events, showlegend=False)
        if highlight is not None:
            figures.add_range_highlight(fig, *highlight)
        if x_range is not None:
            fig.update_xaxes(range=list(x_range), autorange=False)
        fig.update_layout(uirevision=revision)
    out.update({panel: go.Figure() for panel in left_out})
    return RenderedView(figures=out, traces={p: _appendable(out[p]) for p in LIVE_PANELS},
                        resolution=resolution_text(view), left_out=left_out)


class EmptyReasons:
    """Why a panel has nothing to draw, in words: nothing logged in the whole run (the panel is
    left out), or nothing in this step range."""

    IN_RANGE = " in this step range (show all steps to see the rest)"

    def __init__(self, view: ViewData) -> None:
        self.view = view
        self.keys = set(view.run.keys)
        self.ref_keys = set(view.reference.keys) if view.reference is not None else set()
        self.zoomed = view.step_range is not None

    def nothing_logged(self) -> dict[str, str]:
        """The panels with nothing to draw in the whole run, each with why."""
        def held(keys: set[str]) -> bool:
            return any(k.startswith(HELDOUT_PREFIX) for k in keys)

        both = self.keys | self.ref_keys
        gap_of = [keys for keys in (self.keys, self.ref_keys) if TRAIN_LOSS in keys and held(keys)]
        out = {
            "loss": None if TRAIN_LOSS in both else "not logged",
            "delta": ("no reference run" if self.view.reference is None else
                      None if TRAIN_LOSS in self.keys and TRAIN_LOSS in self.ref_keys else
                      "one of the runs logged no train loss"),
            "heldout": None if held(both) else "not logged",
            "heldout_delta": ("no reference run" if self.view.reference is None else
                              None if held(self.keys) and held(self.ref_keys) else
                              "one of the runs logged no held-out loss"),
            "gap": None if gap_of else "no run logged both train and held-out loss",
            "evals": None if any(k.startswith(DOWNSTREAM_PREFIX) for k in both) else "not logged",
            "grad_norm": None if TRAIN_GRAD_NORM in self.keys else "not logged",
            "throughput": None if self.keys & set(THROUGHPUT_KEYS) else "not logged",
            "data": None if self.keys & set(DATA_KEYS) else "not logged",
        }
        return {panel: why for panel, why in out.items() if why is not None}

    @staticmethod
    def _drawn(long: pd.DataFrame, key: str) -> bool:
        return bool(len(long)) and bool((long["key"] == key).any())

    def in_range(self, what: str, prefix: str | None = None) -> str:
        """The panel's series are logged, but nothing of them can be drawn here: no finite value in
        the step range shown, or, over the whole run, only NaN or Inf (a downsampled read keeps
        finite values only), or, for a panel of series keyed by `prefix` that only the reference
        logged, none of the reference's within the steps the run logged (it is read over those)."""
        if self.zoomed:
            return f"no finite {what}" + self.IN_RANGE
        logged = self.view.run.logged
        if (prefix is not None and logged and not any(k.startswith(prefix) for k in self.keys)
                and any(k.startswith(prefix) for k in self.ref_keys)):
            extent = (min(a for a, _ in logged.values()), max(b for _, b in logged.values()))
            return f"the run logs no {what}, and the reference logged none within its {steps(extent)}"
        return f"{what}: every logged value is NaN or Inf"

    def delta(self) -> str:
        ref = self.view.reference
        apart = self._apart(TRAIN_LOSS, "train loss")
        if apart:
            return apart
        if not (self._drawn(self.view.run.long, TRAIN_LOSS) and ref is not None
                and self._drawn(ref.long, TRAIN_LOSS)):
            return "no train loss of both runs" + self.IN_RANGE
        return "no step where both runs logged train loss"

    def _apart(self, key: str, what: str) -> str:
        """Why no step range shows `key` of both runs, when none can: the two runs logged it over
        steps (on this view's axis) that do not meet, as a run that starts where its reference
        ended does. "Show all steps" would show nothing more; empty when the steps meet."""
        run, ref = self.view.run, self.view.reference
        if ref is None or key not in run.logged or key not in ref.logged:
            return ""
        mine = run.axis.to_x(list(run.logged[key]))
        theirs = ref.axis.to_x(list(ref.logged[key]))
        if mine[0] <= theirs[1] and theirs[0] <= mine[1]:
            return ""
        shared = "tokens" if self.view.axis_kind == "tokens" else "steps"
        return (f"the runs share no {shared}: the run logged {what} at {steps(run.logged[key])}, the reference at "
                f"{steps(ref.logged[key])}")

    def heldout_delta(self) -> str:
        return ("no judged checkpoint" + self.IN_RANGE if self.zoomed
                else "fewer than 4 checkpoints paired with the reference")

    def gap(self) -> str:
        return "no held-out evaluation within the train loss" + (self.IN_RANGE if self.zoomed else " range")


def _heldout_run(long: pd.DataFrame, name: str) -> RunData:
    """The held-out series of a long frame as a run on the view's x (steps, or tokens where the
    view compares at equal tokens), as the held-out detector reads a run."""
    rows = long[long["key"].str.startswith(HELDOUT_PREFIX)] if len(long) else long
    x = np.rint(x_values(rows)).astype("int64") if len(rows) else np.zeros(0, dtype="int64")
    wide = (pd.DataFrame({"x": x, "key": rows["key"].to_numpy(), "value": rows["value"].to_numpy(dtype=float)})
            .pivot_table(index="x", columns="key", values="value", aggfunc="last") if len(rows) else pd.DataFrame())
    wide.index = pd.Index(wide.index.to_numpy(dtype="int64"), name="step")
    return RunData(info=RunInfo(name=name), scalars=wide)


def _x_range(view: ViewData):
    if view.step_range is None:
        return None
    return tuple(float(v) for v in view.run.axis.to_x(list(view.step_range)))


def _appendable(fig: go.Figure) -> list[list]:
    out = []
    for i, trace in enumerate(fig.data):
        parsed = parse_series_uid(getattr(trace, "uid", None))
        if parsed is not None:
            out.append([i, *parsed])
    return out


def resolution_text(view: ViewData) -> str:
    """What the train-loss panel shows: every step, or downsampled buckets of how many steps;
    nothing for a run that logs no train loss (the notices say so)."""
    if TRAIN_LOSS not in view.run.keys:
        return ""
    width = view.run.bucket_width.get(TRAIN_LOSS)
    if width is None:
        return "no train loss logged in this range"
    points = int((view.run.long["key"] == TRAIN_LOSS).sum())
    if width <= 1:
        return f"full resolution: every logged step ({points} points)"
    return f"downsampled: {points} points, min/max of buckets of ≥{width} steps (zoom in for every step)"


def _empty(title: str, x_title: str, message: str) -> go.Figure:
    return note_empty(base_figure(title, x_title), message)
