"""Put a report together from a compared pair: tables, verdict, figures."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field

from app.report.data_table import data_table
from app.report.downstream_table import DownstreamTableConfig, downstream_table
from app.report.energy import EnergyParams
from app.report.energy_table import energy_table
from app.report.figures import FigureConfig, build_figures
from app.report.findings_table import findings_table, incidents_of, not_judged_table
from app.report.heldout_table import HeldoutTableConfig, heldout_table
from app.report.model import Report, Table
from app.report.pair import ComparedPair
from app.report.resume_table import resume_table
from app.report.settings_table import settings_table
from app.report.spike_table import SpikeTableConfig, spike_scores, spike_table
from app.report.throughput_table import throughput_table
from app.report.train_table import TrainTableConfig, train_delta_table
from app.report.verdict import decide


@dataclass
class ReportConfig:
    """Every setting of a report; each part's defaults are documented next to its code."""

    train: TrainTableConfig = field(default_factory=TrainTableConfig)
    heldout: HeldoutTableConfig = field(default_factory=HeldoutTableConfig)
    downstream: DownstreamTableConfig = field(default_factory=DownstreamTableConfig)
    spikes: SpikeTableConfig = field(default_factory=SpikeTableConfig)
    energy: EnergyParams = field(default_factory=EnergyParams)
    figures: FigureConfig = field(default_factory=FigureConfig)
    # False leaves the charts out (Markdown and JSON never carry them).
    with_figures: bool = True


def build_report(pair: ComparedPair, config: ReportConfig | None = None) -> Report:
    config = config or ReportConfig()
    scores = spike_scores(pair)
    incidents = incidents_of(pair)
    tables = [
        train_delta_table(pair, config.train),
        heldout_table(pair, config.heldout),
        downstream_table(pair, config.downstream),
        spike_table(pair, config.spikes, scores),
        resume_table(pair),
        data_table(pair),
        throughput_table(pair),
        energy_table(pair, config.energy),
        findings_table(pair, incidents),
        not_judged_table(pair),
        settings_table(pair),
    ]
    verdict = decide(pair.detections, tables, cleans=[c for c in pair.cleans if c.run == pair.run.name],
                     not_judged=pair.not_judged.get(pair.run.name, []),
                     incidents=[i for i in incidents if i.run == pair.run.name], alone=pair.reference is None)
    figures = build_figures(pair, tables, scores, config.figures) if config.with_figures else []
    notes = _not_compared(tables)
    return Report(
        run=pair.run.name,
        reference=pair.reference.name if pair.reference is not None else None,
        generated_at=dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        axis=pair.axis,
        axis_reason=pair.axis_reason,
        verdict=verdict,
        tables=tables,
        figures=figures,
        detections=[d for _, found in pair.each_run() for d in found],
        notes=notes,
        parameters=_parameters(config, pair),
    )


def _not_compared(tables: list[Table]) -> list[str]:
    """A line for each reason tables are empty, naming the tables it empties (a run alone: one
    line for the four tables that compare)."""
    titles: dict[str, list[str]] = {}
    for t in tables:
        if not t.rows and t.empty_reason:
            titles.setdefault(t.empty_reason, []).append(t.title)
    return [f"{'; '.join(names)}: {reason}." for reason, names in titles.items()]


def _parameters(config: ReportConfig, pair: ComparedPair) -> dict:
    """The settings in plain JSON, the detectors' included."""
    return {
        "detect": {"detectors": pair.detect.detectors, "params": pair.detect.params, "axis": pair.detect.axis},
        "train": asdict(config.train),
        "heldout": asdict(config.heldout),
        "downstream": asdict(config.downstream),
        "spikes": asdict(config.spikes),
        "energy": asdict(config.energy),
        "figures": asdict(config.figures),
    }
