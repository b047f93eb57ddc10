"""Resume events of both runs and their parity.

For every resume or restart: what was restored (model step, data-loader position, global batch)
and whether the two agree, as the resume detector judged it (monitor.detectors.resume), and for
each run how the steps it logged twice (before and after a restart) compare.
"""

from __future__ import annotations

from monitor.detectors import in_section
from monitor.schema import TRAIN_LOSS, Detection, EventKind, RunData, Section

from app.report.model import Column, Table
from app.report.pair import ComparedPair

RESTART_KINDS = (EventKind.RESUME.value, EventKind.RESTART.value)
RESUME_METRIC = "event/resume"  # the metric name the resume detector gives a resume event


def resume_table(pair: ComparedPair) -> Table:
    table = Table(
        id="resumes",
        title="Resume events and their parity",
        columns=[
            Column("run", "run", fmt=""),
            Column("step", "step", fmt=","),
            Column("kind", "event", fmt=""),
            Column("attempt", "attempt", fmt="d"),
            Column("restored_step", "restored model step", fmt=","),
            Column("data_step", "data position / batch", fmt=",.6g"),
            Column("parity", "parity", fmt=""),
        ],
        note=("A resume is consistent when the restored model step equals the restored data "
              "position divided by the global batch size (plus the run's cursor offset); a model "
              "one step ahead of its data trains every later step on the neighbouring batch."),
        flag_key="flagged",
    )
    for data, found in pair.each_run():
        table.rows += _event_rows(data, found)
        replay = _replay_row(data, found)
        if replay is not None:
            table.rows.append(replay)
    if not table.rows:
        table.empty_reason = pair.none_logged("resume or restart, nor any step twice")
    return table


def _event_rows(data: RunData, found: list[Detection]) -> list[dict]:
    ev = data.events
    rows = []
    for e in ev[ev["kind"].isin(RESTART_KINDS)].itertuples(index=False):
        payload = e.payload if isinstance(e.payload, dict) else {}
        batch = payload.get("global_batch_size") or data.info.global_batch_size
        position = payload.get("restored_data_position")
        restored = payload.get("restored_step")
        hits = [d for d in in_section(found, Section.RESUME, RESUME_METRIC) if d.start_step == int(e.step)]
        if hits:
            parity = hits[0].message
        elif e.kind != EventKind.RESUME.value:
            parity = "restart (nothing restored to check)"
        elif restored is None or position is None or not batch:
            parity = "not checkable: the event lacks restored step, data position or batch size"
        else:
            parity = "consistent"
        rows.append({
            "run": data.name, "step": int(e.step), "kind": str(e.kind),
            "attempt": int(e.attempt) if e.attempt == e.attempt else None,
            "restored_step": int(restored) if restored is not None else None,
            "data_step": float(position) / float(batch) if position is not None and batch else None,
            "parity": parity, "flagged": bool(hits),
        })
    return rows


def _replay_row(data: RunData, found: list[Detection]) -> dict | None:
    rep = data.repeats
    rep = rep[rep["key"] == TRAIN_LOSS] if len(rep) else rep
    if not len(rep):
        return None
    spread = rep.groupby("step")["value"].agg(lambda v: float(v.max() - v.min()))
    hits = in_section(found, Section.RESUME, TRAIN_LOSS)
    return {
        "run": data.name, "step": int(spread.index.min()), "kind": "steps logged twice",
        "attempt": int(rep["attempt"].max()), "restored_step": None, "data_step": None,
        "parity": (hits[0].message if hits else
                   f"{len(spread)} replayed steps, max |Δ {TRAIN_LOSS}| = {spread.max():.3g}"),
        "flagged": bool(hits),
    }
