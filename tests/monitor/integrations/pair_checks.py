"""What both framework integrations must show of the pair they log (a reference and a candidate whose
fit is resumed once from its checkpoint at step 20): the same checks for Hugging Face and Lightning."""

from __future__ import annotations

import os
import subprocess
import sys

from monitor.store import open_store


def checkpoints_and_repeats(url: str):
    """The candidate's checkpoint events, after asserting its two attempts, the checkpoints of both
    and the steps its resumed attempt logged again."""
    with open_store(url) as store:
        cand = store.load_run("cand")
        info = store.get_run("cand")
    assert info["attempts"] == 2 and info["status"] == "finished"
    checkpoints = cand.events[cand.events["kind"] == "checkpoint"]
    assert list(zip(checkpoints["step"], checkpoints["attempt"])) == [(10, 1), (20, 1), (30, 1), (30, 2)]
    # The resumed attempt logged steps 25 and 30 again; the store keeps both attempts' values.
    again = cand.repeats[cand.repeats["key"] == "train/loss"]
    assert sorted(set(again["step"])) == [25, 30] and set(again["attempt"]) == {1, 2}
    return cand.events


def detect_needs_no_mapping(url: str) -> None:
    """`gapwatch detect` pairs the candidate with its reference by their metric names alone: 3
    held-out checkpoints are paired, and the training loss is judged (here: too short to say more)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "app", "detect", "--run", "cand", "--store", url, "--no-write"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "cand against ref (step axis)" in done.stderr
    assert "held-out loss against the reference (eval/heldout/all): not judged, 3 paired checkpoint(s)" in done.stderr
    assert "train loss against the reference (train/loss): not judged, only 6 logged steps" in done.stderr
