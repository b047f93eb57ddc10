"""`python -m bench.quality.mirrored_pairs`: how far a held-out difference at the offset cadence is
from the truth, one-sided (the reference interpolated) and mirrored (checkpoints.pair_series), on
every ordered pair of different repeats of a half.

Each repeat keeps every other evaluation, the reference the ones between: the true difference at
a checkpoint is the two runs' evaluations there, which the full logs hold. Checkpoints past half
the run, where the curves bend least and the test matters most. A mirrored difference is the mean
of two, at the checkpoint and at the reference's evaluation inside the run's last bracket, so it is
held against the mean of the true differences at those two steps.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from bench.quality import corpus
from monitor.detectors.checkpoints import pair_series


def errors(half: str) -> dict[str, np.ndarray]:
    out = {"one-sided": [], "mirrored": [], "run side": [], "reference side": []}
    for a, b in itertools.permutations(corpus.repeats(half), 2):
        key = next(k for k in a.scalars.columns if k.startswith("eval/heldout/") and k.endswith("/loss"))
        full_a, full_b = a.series(key).dropna(), b.series(key).dropna()
        common = full_a.index[(full_a.index > 0) & full_a.index.isin(full_b.index)]
        truth = full_a[common] - full_b[common]
        run, ref = full_a[common[0::2]], full_b[common[1::2]]
        plain = pair_series(run, ref).set_index("step")
        mirrored = pair_series(run, ref, mirrored=True).set_index("step")
        for t in mirrored.index[mirrored["mirrored"].to_numpy() & (mirrored.index > common[-1] / 2)]:
            u = ref.index[ref.index < t][-1]  # the reference's evaluation inside the run's bracket
            out["one-sided"].append(plain.loc[t, "delta"] - truth[t])
            out["mirrored"].append(mirrored.loc[t, "delta"] - (truth[t] + truth[u]) / 2)
            out["reference side"].append(plain.loc[t, "delta"] - truth[t])
            out["run side"].append(2 * mirrored.loc[t, "delta"] - plain.loc[t, "delta"] - truth[u])
    return {k: np.array(v) for k, v in out.items()}


def main() -> int:
    for half in ("calibration", "test"):
        e = errors(half)
        for name in ("one-sided", "mirrored"):
            x = e[name]
            print(f"{half:11s} {name:9s} n={x.size} rms {np.sqrt(np.mean(x ** 2)):.4f} "
                  f"p95 {np.quantile(np.abs(x), 0.95):.4f}")
        print(f"{half:11s} run-side and reference-side errors correlate by "
              f"{np.corrcoef(e['run side'], e['reference side'])[0, 1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
