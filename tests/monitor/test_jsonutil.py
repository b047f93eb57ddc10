"""The one policy for numbers that are not finite: kept in the store's text, null in strict JSON
handed to programs, text in records shown and compared again."""

from __future__ import annotations

import json
import math

import numpy as np

from monitor.jsonutil import dumps, plain, readable
from monitor.schema import Detection, Severity

VALUE = {"score": np.float64("nan"), "band": math.inf, "deltas": np.array([1.5, -np.inf]), "n": np.int64(3)}


def test_plain_makes_them_null_and_readable_makes_them_text():
    assert plain(VALUE) == {"score": None, "band": None, "deltas": [1.5, None], "n": 3}
    assert readable(VALUE) == {"score": "nan", "band": "inf", "deltas": [1.5, "-inf"], "n": 3}
    for strict in (plain(VALUE), readable(VALUE)):
        json.dumps(strict, allow_nan=False)  # strict JSON: raises on a NaN or Infinity left in it


def test_the_store_keeps_them():
    back = json.loads(dumps(VALUE))
    assert math.isnan(back["score"]) and back["band"] == math.inf and back["deltas"] == [1.5, -math.inf]


def test_a_detection_with_a_nan_score_equals_itself_once_written():
    d = Detection("r", "x", "train/loss", 1, 2, 1, math.nan, Severity.CRITICAL, "m", {"delta": math.inf})
    assert d.to_dict()["score"] == "nan" and d.to_dict() == d.to_dict()
