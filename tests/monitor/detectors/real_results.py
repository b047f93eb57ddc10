"""The detectors' results on the real runs in the real data's runs/, as numbers and as the Markdown
tables of docs/detectors.md.

`PYTHONPATH=. .venv/bin/python tests/monitor/detectors/real_results.py` rewrites the results
section of docs/detectors.md; test_real_runs.py asserts on the same numbers and that the document shows
them. Every run is read by our importers and every pair aligned as `gapwatch detect` aligns it.
"""

from __future__ import annotations

import functools
import itertools
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from monitor.judging.judge import DetectConfig, judge
from monitor.detectors import build
from monitor.detectors.spike import SpikeDetector
from monitor.importers import load
from monitor.schema import TRAIN_GRAD_NORM, TRAIN_LOSS

REPO = Path(__file__).resolve().parents[3]
DATA = REPO.parent / "shared" / "data" / "runs"
DOC = REPO / "docs" / "detectors.md"
SECTIONS = ("real-results", "spike-synthetic")
MODDED = DATA / "modded-nanogpt"
LADDER = DATA / "olmo-wandb-exports" / "ladder"
COMPARING = ["reference_divergence", "memorization", "heldout_divergence", "eval_regression"]
# Spikes the data notes list (the real data's README).
LLMC_GRAD_SPIKES = (7435, 9025)
LLMC_LOSS_SPIKES = (4635, 4708, 5052, 5618, 6270, 7435)


@functools.cache
def run(path: str, name: str):
    return load(path).to_run_data(name)


def repeats():
    files = sorted((MODDED / "valueembed_seeds_2024-12-04").glob("*.txt"))
    return [run(str(f), f.stem[:8]) for f in files]


def compare(a, b, detectors=COMPARING, **params):
    return judge(a, b, DetectConfig(detectors=detectors, params=params, write_series=False)).detections


def counts(found) -> dict[str, int]:
    return {name: sum(d.detector == name for d in found) for name in COMPARING}


@functools.cache
def repeat_pairs() -> dict:
    """All 156 ordered pairs of the 13 repeats: detections per detector and the largest gaps."""
    runs = repeats()
    found = []
    for a, b in itertools.permutations(runs, 2):
        found += compare(a, b)
    train_gap = held_gap = 0.0
    for a, b in itertools.combinations(runs, 2):
        d = (a.series(TRAIN_LOSS) - b.series(TRAIN_LOSS)).dropna()
        med = d.groupby(d.index // 100).median()
        train_gap = max(train_gap, float(med.abs().max()))
        h = (a.series("eval/heldout/val/loss") - b.series("eval/heldout/val/loss")).dropna()
        held_gap = max(held_gap, float(h.iloc[1:].abs().max()))
    return {"pairs": len(runs) * (len(runs) - 1), "found": found, "train_gap": train_gap, "held_gap": held_gap}


@functools.cache
def ladder_pair(size: str) -> dict:
    a = run(str(LADDER / f"peteish-moreeval__{size}-1xC.csv"), size)
    b = run(str(LADDER / f"peteish-moreeval__{size}-1xC-rerun.csv"), f"{size}-rerun")
    found = compare(a, b) + compare(b, a)
    gaps = {}
    for key in a.scalars:
        if key.startswith("eval/heldout/") and key.endswith("/loss") and key in b.scalars:
            d = (a.series(key) - b.series(key)).dropna()
            gaps[key.split("/")[2]] = float(d.abs().max())
    return {"found": found, "c4_gap": gaps.get("c4_en-validation", float("nan")),
            "worst_set": max(gaps, key=gaps.get), "worst_gap": max(gaps.values()), "sets": len(gaps)}


@functools.cache
def soap_muon() -> dict:
    folder = MODDED / "soap_vs_muon_2024-10"
    soap = run(str(next(folder.glob("SOAP_*.txt"))), "soap")
    muon = run(str(next(folder.glob("Muon_*.txt"))), "muon")
    out = {}
    for a, b in ((soap, muon), (muon, soap)):
        out[f"{a.name} vs {b.name}"] = (a, compare(a, b, ["reference_divergence", "heldout_divergence"]))
    return out


def covers(d, step: int) -> bool:
    return d.start_step <= step <= d.end_step


@functools.cache
def llmc_spikes() -> dict:
    data = run(str(MODDED / "llmc_gpt2_124M_2024-10-13" / "main.log"), "llmc")
    out = {}
    for definition in ("gapwatch", "olmo_core", "olmo2"):
        found = SpikeDetector(definition=definition).detect(data)
        loss = {d.peak_step for d in found if d.metric == TRAIN_LOSS}
        grad = {d.peak_step for d in found if d.metric == TRAIN_GRAD_NORM}
        out[definition] = {"loss": loss, "grad": grad}
    return out


@functools.cache
def repeat_spikes() -> dict:
    """Per definition: steps flagged in each of the 13 repeats (same data order: a real spike
    shows in most of them, a noise flag in one)."""
    out = {}
    for definition in ("gapwatch", "olmo_core", "olmo2"):
        det = SpikeDetector(metrics=(TRAIN_LOSS,), definition=definition)
        per_step: dict[int, int] = {}
        for data in repeats():
            for d in det.detect(data):
                per_step[d.peak_step] = per_step.get(d.peak_step, 0) + 1
        out[definition] = per_step
    return out


@functools.cache
def single_runs_within() -> dict:
    paths = [MODDED / "llmc_gpt2_124M_2024-10-13" / "main.log",
             *sorted((MODDED / "soap_vs_muon_2024-10").glob("*.txt")),
             *sorted((MODDED / "scaleup1b_2024-10-20").glob("*.txt"))]
    runs = repeats() + [run(str(p), p.stem[:8]) for p in paths]
    found = []
    for data in runs:
        found += compare(data, None, ["memorization_trend", "eval_regression", "nonfinite", "resume"])
    return {"runs": len(runs), "found": found}


@functools.cache
def pythia() -> dict:
    out = {}
    for folder in sorted((DATA / "pythia-evals").iterdir()):
        if (folder / "zero-shot").is_dir():
            data = run(str(folder / "zero-shot"), folder.name)
            out[folder.name] = build(["eval_regression"])[0].detect(data)
    return out


# --- Markdown ----------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def markdown() -> str:
    parts = []
    rp = repeat_pairs()
    c = counts(rp["found"])
    parts.append("**Same config, other seed: no alarm.** The 13 repeats of one modded-nanogpt config "
                 "(valueembed_seeds, 1,530 steps) compared in all ordered pairs, and the OLMo 2 ladder runs "
                 "against their reruns in both directions:")
    rows = [["13 repeats", rp["pairs"], *[c[n] for n in COMPARING],
             f"train {rp['train_gap']:.3f} (100-step medians), held-out {rp['held_gap']:.3f}"]]
    for size in ("190M", "1B", "3B"):
        lp = ladder_pair(size)
        lc = counts(lp["found"])
        rows.append([f"OLMo ladder {size} run / rerun", 2, *[lc[n] for n in COMPARING],
                     f"c4 {lp['c4_gap']:.3f}; worst of {lp['sets']} sets: {lp['worst_set']} {lp['worst_gap']:.3f}"])
    parts.append(_table(["pair", "comparisons", *COMPARING, "largest gap seen (nats)"], rows))

    parts.append("**Shared spikes are not divergence.** SOAP and Muon (modded-nanogpt 124M) both spike at "
                 "steps 919 and 947 (same data order). What the comparison reports:")
    rows = []
    for label, (_, found) in soap_muon().items():
        for d in found or [None]:
            if d is None:
                rows.append([label, "-", "-", "-", "-"])
                continue
            shared = "yes" if covers(d, 919) or covers(d, 947) else "no"
            rows.append([label, d.detector, f"{d.start_step}-{d.end_step}",
                         f"{d.evidence['delta']:+.3f} (band {d.evidence['band']:.3f})", shared])
    parts.append(_table(["run vs reference", "detector", "steps", "delta", "covers 919/947"], rows))

    ls = llmc_spikes()
    parts.append("**Spikes in llm.c GPT-2 124M** (19,560 steps). Listed spikes from the data notes: grad norm "
                 f"{', '.join(map(str, LLMC_GRAD_SPIKES))}; loss {', '.join(map(str, LLMC_LOSS_SPIKES))}.")
    rows = []
    for definition, found in ls.items():
        rows.append([definition, len(found["loss"]), f"{len(set(LLMC_LOSS_SPIKES) & found['loss'])} of {len(LLMC_LOSS_SPIKES)}",
                     len(found["grad"]), f"{len(set(LLMC_GRAD_SPIKES) & found['grad'])} of {len(LLMC_GRAD_SPIKES)}"])
    parts.append(_table(["definition", "loss spikes", "listed loss spikes found", "grad-norm spikes",
                         "listed grad-norm spikes found"], rows))

    rs = repeat_spikes()
    parts.append("**Spikes in the 13 repeats** (same data order, so a real spike shows in several runs at the "
                 "same step; a flag that no other run shares is noise):")
    rows = []
    for definition, per_step in rs.items():
        shared = ", ".join(f"{s} ({n})" for s, n in sorted(per_step.items()) if n >= 2)
        lone = sum(n for n in per_step.values() if n == 1)
        rows.append([definition, sum(per_step.values()), shared or "-", lone])
    parts.append(_table(["definition", "flags over 13 runs", "steps flagged in >= 2 runs (runs)",
                         "flags no other run shares"], rows))

    sw = single_runs_within()
    parts.append(f"**Single runs on their own** ({sw['runs']} real single-epoch runs: the 13 repeats, llm.c, SOAP, "
                 "Muon, the three 1.5B scale-up runs): memorization (train/held-out gap trend), eval regression, "
                 f"NaN/Inf and resume report {len(sw['found'])} detections.")

    py = pythia()
    parts.append("**Downstream evals within a run** (Pythia, lm-eval results at 27 checkpoints each):")
    rows = []
    for model, found in py.items():
        text = "; ".join(f"{d.metric.split('/')[2]} {d.metric.split('/')[3]} from {d.start_step} "
                         f"(best at {d.evidence['best_step']}: {d.evidence['best_value']:.4g} -> {d.evidence['value']:.4g})"
                         for d in found) or "-"
        rows.append([model, len(found), text])
    parts.append(_table(["model", "regressions", "what"], rows))
    return "\n\n".join(parts) + "\n"


@functools.cache
def spike_synthetic(runs: int = 30, n: int = 5000) -> dict:
    """Recall of spikes of known size and flags elsewhere, ours vs OLMo-core's and OLMo 2's rules,
    on decaying losses with AR(1) noise (sigma 0.03, rho 0.3), 8 spikes per run."""
    det = SpikeDetector(metrics=(TRAIN_LOSS,))
    out = {}
    for size in (6, 8, 10, 14):
        hits = {k: 0 for k in ("gapwatch", "olmo_core", "olmo2")}
        false = dict(hits)
        total = 0
        for seed in range(runs):
            rng = np.random.default_rng(seed)
            steps = np.arange(n)
            noise = lfilter([1.0], [1.0, -0.3], rng.normal(0, 0.03 * np.sqrt(1 - 0.09), n))
            x = 3 + 6 * np.exp(-steps / 800) + noise
            pos = np.sort(rng.choice(np.arange(300, n - 50), 8, replace=False))
            pos = pos[np.r_[True, np.diff(pos) > 3]]
            x[pos] += size * 0.03
            flags = det.flags(pd.Series(x), TRAIN_LOSS)
            mask = np.ones(n, dtype=bool)
            mask[pos] = False
            for k, f in flags.items():
                hits[k] += int(f[pos].sum())
                false[k] += int(f[mask].sum())
            total += pos.size
        out[size] = {"spikes": total, "hits": hits, "false": false}
    return out


def spike_markdown() -> str:
    rows = []
    for size, r in spike_synthetic().items():
        rows.append([f"{size} sigma", r["spikes"],
                     *[f"{r['hits'][k] / r['spikes']:.0%} / {r['false'][k]}" for k in ("gapwatch", "olmo_core", "olmo2")]])
    return _table(["spike size", "spikes", "gapwatch: found / false flags", "olmo_core: found / false flags",
                   "olmo2: found / false flags"], rows) + "\n"


def generated() -> dict[str, str]:
    return {"real-results": markdown(), "spike-synthetic": spike_markdown()}


def write_doc() -> None:
    text = DOC.read_text()
    for name, body in generated().items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _m, b=body, s=begin, e=end: f"{s}\n{b}{e}", text)
    DOC.write_text(text)


def doc_sections() -> dict[str, str]:
    text = DOC.read_text()
    return {name: text.split(f"<!-- {name}:begin -->", 1)[1].split(f"<!-- {name}:end -->", 1)[0].lstrip("\n")
            for name in SECTIONS}


if __name__ == "__main__":
    write_doc()
    for body in generated().values():
        sys.stdout.write(body + "\n")
