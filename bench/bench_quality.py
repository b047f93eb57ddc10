"""Detection quality on real runs: false alarms on clean pairs, faults caught, and latency, on the test
half of bench/quality/corpus.py (thresholds are fitted on the other half, bench/quality/calibrate.py).

`python -m bench quality [--quick]` writes the tables into bench/RESULTS.md and into the
"Detection quality" section of docs/detectors.md.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import time
from pathlib import Path

from tqdm import tqdm

from bench.quality import cases, corpus, faults
from bench.results import record, table
from monitor.judging.judge import DetectConfig, judge

DOC = Path(__file__).resolve().parents[1] / "docs" / "detectors.md"
# Latency is measured in pieces on this many pairs per fault and cadence (feeding every piece costs
# ~30 whole-run judgements).
LATENCY_PAIRS = 1


def pair_outcomes(quick: bool) -> list[cases.Outcome]:
    todo = list(cases.pair_cases("test"))
    if quick:
        keep = {(a.name, b.name) for a, b, _ in corpus.clean_pairs("test")[:4]}
        todo = [c for c in todo if (c[2].name, c[3].name) in keep]
    timed: collections.Counter = collections.Counter()
    out = []
    for fault, cadence, run, ref, family in tqdm(todo, desc="judging pairs", unit="case"):
        measure = bool(fault.expected) and timed[(fault.name, cadence)] < LATENCY_PAIRS and family == "repeats"
        outcome = cases.judge_pair(fault, cadence, run, ref, family, "test", latency=measure)
        if measure:
            timed[(fault.name, cadence)] += 1
        if outcome.applicable:
            out.append(outcome)
    return out


def single_outcomes() -> list[cases.Outcome]:
    out = []
    for fault in cases.single_faults():
        for run in corpus.single_runs("test"):
            outcome = cases.judge_single(fault, run, "test")
            if outcome.applicable:
                out.append(outcome)
    return out


def _rate(hits: int, n: int) -> str:
    return f"{hits}/{n}"


def fault_table(outcomes: list[cases.Outcome]) -> list[dict]:
    rows = []
    for fault in cases.pair_faults():
        mine = [o for o in outcomes if o.fault == fault.name]
        if not mine:
            continue
        row = {"case": fault.name, "pairs x cadences": len(mine)}
        for name in cases.COMPARING:
            hits = sum(o.fired[name] for o in mine)
            mark = " (must catch)" if name in fault.expected else " (must not)" if name in fault.forbidden else ""
            row[name] = _rate(hits, len(mine)) + mark
        caught = [o for o in mine if any(o.fired[n] for n in fault.expected)] if fault.expected else []
        lat = [o.latency for o in mine if o.latency is not None and o.latency == o.latency]
        row["caught"] = _rate(len(caught), len(mine)) if fault.expected else "-"
        row["median latency (steps)"] = f"{statistics.median(lat):.0f} (n={len(lat)})" if lat else "-"
        rows.append(row)
    return rows


def cadence_table(outcomes: list[cases.Outcome], prefix: str, detector: str) -> list[dict]:
    rows = []
    for fault in cases.pair_faults():
        if not fault.name.startswith(prefix):
            continue
        row = {"case": fault.name}
        for cadence in faults.CADENCE_NAMES:
            mine = [o for o in outcomes if o.fault == fault.name and o.cadence == cadence]
            row[cadence] = _rate(sum(o.fired[detector] for o in mine), len(mine)) if mine else "-"
        rows.append(row)
    return rows


def undecided_table(outcomes: list[cases.Outcome]) -> list[dict]:
    rows = []
    for fault in cases.pair_faults():
        mine = [o for o in outcomes if o.fault == fault.name and o.applicable]
        silent = [o for o in mine if not o.fired["memorization"]]
        rows.append({"case": fault.name, "cases": len(mine), "memorization did not fire": len(silent),
                     "said undecided where it did not fire": _rate(sum(o.undecided for o in silent), len(silent)),
                     "said undecided where it fired": _rate(sum(o.undecided for o in mine if o.fired["memorization"]),
                                                             len(mine) - len(silent))})
    return rows


def _goal_met(o: cases.Outcome, fault: cases.Fault) -> bool:
    """One story per fault: one opening, at most two escalations, no false resolution, the right
    name; nothing at all for a clean case."""
    t = o.told
    if fault.truth is None:
        return t.notifications == 0
    return (t.opened == 1 and t.escalated + t.updated <= 2 and t.false_resolutions == 0
            and t.named_right(fault.truth) and (fault.persists or t.resolved_after is not None))


def story_table(outcomes: list[cases.Outcome]) -> list[dict]:
    rows = []
    for fault in cases.pair_faults() + cases.single_faults():
        mine = [o for o in outcomes if o.fault == fault.name and o.told is not None]
        if not mine:
            continue
        told = [o.told for o in mine]
        opened = [t.opened for t in told]
        names = collections.Counter(n for t in told for n in t.names)
        after = [t.resolved_after for t in told if t.resolved_after is not None]
        rows.append({
            "fault": fault.name, "cases": len(mine), "truth": fault.truth or "nothing",
            "opened (median, max)": f"{statistics.median(opened):g}, {max(opened)}",
            "escalated (max)": max(t.escalated for t in told),
            "renamed (max)": max(t.updated for t in told),
            "false resolutions": sum(t.false_resolutions for t in told),
            "named right": _rate(sum(t.named_right(fault.truth) for t in told), len(told)),
            "most common name": names.most_common(1)[0][0] if names else "-",
            "resolved after (steps)": (f"{statistics.median(after):.0f} ({len(after)}/{len(told)})"
                                       if not fault.persists else "-"),
            "goal met": _rate(sum(_goal_met(o, fault) for o in mine), len(mine)),
        })
    return rows


def story_cadence_table(outcomes: list[cases.Outcome]) -> list[dict]:
    rows = []
    for fault in cases.pair_faults():
        row = {"case": fault.name}
        for cadence in faults.CADENCE_NAMES:
            mine = [o for o in outcomes if o.fault == fault.name and o.cadence == cadence and o.told is not None]
            row[cadence] = _rate(sum(_goal_met(o, fault) for o in mine), len(mine)) if mine else "-"
        rows.append(row)
    return rows


def single_table(outcomes: list[cases.Outcome]) -> list[dict]:
    rows = []
    for fault in cases.single_faults():
        mine = [o for o in outcomes if o.fault == fault.name]
        (expected,) = fault.expected
        rows.append({"fault": fault.name, "runs": len(mine), "detector": expected,
                     "caught": _rate(sum(o.fired[expected] for o in mine), len(mine))})
    return rows


def real_pairs_table() -> list[dict]:
    """Pairs of different recipes: real differences, so divergence fires, but none is memorization."""
    s = corpus.scaleup()
    soap, muon = corpus.soap_muon()
    pairs = [(s["muon-1.5b"], s["adamw-1.5b"], "a genuinely better optimizer: never memorization"),
             (s["adamw-1.5b"], s["muon-1.5b"], "a worse run: divergence, never memorization"),
             (s["muon-0.75x-1.5b"], s["muon-1.5b"], "another schedule"),
             (soap, muon, "another optimizer, same data order")]
    rows = []
    for run, ref, what in pairs:
        found = judge(run, ref, DetectConfig(detectors=list(cases.COMPARING), write_series=False)).detections
        names = collections.Counter(d.detector for d in found)
        rows.append({"run vs reference": f"{run.name} vs {ref.name}", "what it is": what,
                     **{n: names.get(n, 0) for n in cases.COMPARING}})
    return rows


def markdown(pair_rows, cadence_rows, undecided_rows, divergence_rows, single_rows, real_rows, story_rows,
             story_cadence_rows, seconds: float) -> str:
    parts = [
        "Every fault injected into every ordered clean pair of the test half (15 pairs of repeats both ways, the "
        "OLMo 1B ladder run and rerun both ways) under each of the cadence patterns below, judged whole; "
        "`k/n` counts the pair-cadence cases where the detector fired. Faults ramp in from 30% to 60% of the "
        "run (bench/quality/faults.py); the OLMo ladder logs no train loss, so only the held-out faults apply "
        "to it. Latency: steps from the fault's onset to the first alert of the detector that must catch it, "
        f"feeding the run in pieces of {cases.PIECE_STEPS} steps through the detection engine's incremental mode "
        f"({LATENCY_PAIRS} pair per fault and cadence).",
        table(pair_rows),
        "Memorization caught, by cadence (`ref 2x less`: the reference evaluates every second checkpoint of the "
        "run; `offset`: both every second checkpoint, half an interval apart; `tokens`: the reference has twice "
        "the global batch; `late evals`: the run's held-out rows arrive two intervals late; `train at evals`: both "
        "log train loss only when they evaluate, the mean since the last log, as HF Trainer does with "
        "logging_steps = eval_steps; `train every 25`: both log train loss every 25 steps, the mean since the "
        "last log):",
        table(cadence_rows),
        "Where memorization did not fire, whether it said its evidence was undecided (a \"not judged\" line: at "
        "the last judged checkpoint train loss is below the reference and held-out loss is not better, but the "
        "follow test falls short), which `detect`, the report and the dashboard show beside the incident named "
        "\"train loss below the reference\"; it fired earlier and is undecided at the end in the last column:",
        table(undecided_rows),
        "The worse run, caught as divergence (reference_divergence) by cadence:",
        table(divergence_rows),
        "Faults of one run, on the test half's single runs (the 6 repeats and llm.c GPT-2 124M, the one that "
        "logs a grad norm):",
        table(single_rows),
        "Pairs of different recipes (real differences, not injected), detections per detector:",
        table(real_rows),
        "What a person is told, per injected fault (bench/quality/told.py): the incidents the watch service's "
        "tracker makes of each case's detections and clean verdicts, one poll per step at which a finding or "
        "a clean verdict becomes known (so every escalation and rename is counted: an upper bound) and one "
        f"every {cases.PIECE_STEPS} steps. Goal per case: 1 opened, at most 2 escalations or renames, 0 false "
        "resolutions (a resolution after the fault's onset, while it persists), every incident named by a "
        "detector of the true story; a transient fault (spike, NaN, stall) resolved once it has run clean; a "
        "clean case tells nothing. `named right` fails a memorization named only \"train loss below the "
        "reference\" (the memorization detector did not confirm the held-out tie). In a single run only the "
        "incidents about the fault count (those holding its detector's findings or its step): the real runs "
        "have spikes of their own (an injected spike inside the cool-down after one of them opens an "
        "incident of its own when it is news: twice the size told, or more severe). The counts come from the whole-run detections, replayed as the "
        "incremental engine reports them (a finding grows poll by poll from the step it first held); the property test tests/monitor/watch/test_live_equals_offline.py holds the watch service's "
        "incidents to the same.",
        table(story_rows),
        "Story goal met, by cadence:",
        table(story_cadence_rows),
        f"_{seconds:.0f} s for the whole benchmark._",
    ]
    return "\n\n".join(parts) + "\n"


def write_doc(body: str) -> None:
    text = DOC.read_text()
    pattern = re.compile(r"<!-- quality:begin -->.*?<!-- quality:end -->", re.S)
    DOC.write_text(pattern.sub(lambda _m: f"<!-- quality:begin -->\n{body}<!-- quality:end -->", text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench quality")
    parser.add_argument("--quick", action="store_true", help="4 pairs instead of the whole test half")
    args = parser.parse_args(argv)
    started = time.monotonic()
    print("pairs of the test half ...", flush=True)
    outcomes = pair_outcomes(args.quick)
    print("single runs ...", flush=True)
    singles = single_outcomes()
    print("pairs of other recipes ...", flush=True)
    real = real_pairs_table()
    body = markdown(fault_table(outcomes), cadence_table(outcomes, "memorization", "memorization"),
                    undecided_table(outcomes), cadence_table(outcomes, "worse", "reference_divergence"), single_table(singles), real,
                    story_table(outcomes + singles), story_cadence_table(outcomes), time.monotonic() - started)
    record("quality", "Detection quality on real runs (test half)", body)
    if not args.quick:
        write_doc(body)
    return 0
