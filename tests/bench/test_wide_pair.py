"""The wide pair of the end-to-end benchmark: 101 series, the same in its JSONL and its CSV."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.wide_pair import HELDOUT_EVERY, TASK_EVERY, columns, write_pair
from monitor.schema import TRAIN_TOKENS, downstream_key


def test_the_wide_pair_logs_101_series_alike_in_both_files(tmp_path):
    files = write_pair(tmp_path, 6000)
    jsonl, csv = files["cand"]
    assert len(columns()) == 101
    frame = pd.read_csv(csv).set_index("step")
    assert list(frame.columns) == columns() and frame.index.tolist() == list(range(1, 6001))
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    from_jsonl = pd.DataFrame(rows).set_index("step")[columns()]
    pd.testing.assert_frame_equal(from_jsonl, frame, check_exact=False, rtol=1e-15)
    task = frame[downstream_key("task_00", "acc")].dropna()
    assert task.index.tolist() == list(range(TASK_EVERY, 6001, TASK_EVERY))
    assert frame.notna().sum().min() == 6000 // TASK_EVERY
    assert frame.filter(like="eval/heldout/").notna().sum().eq(6000 // HELDOUT_EVERY).all()
    growth = np.diff(frame[TRAIN_TOKENS].to_numpy())
    assert growth.min() >= 3000 and growth.max() <= 4096 and len(set(growth)) > 100  # not linear
