"""`Monitor.log` stores each value as it was at the call, and refuses what is not one number."""

from __future__ import annotations

import decimal
import fractions
import logging
import math

import numpy as np
import pytest
import torch

from monitor.client import InvalidLogError, Monitor, MonitorSettings
from monitor.store import open_store


def _stored(url: str, key: str = "train/loss") -> list[float]:
    with open_store(url) as store:
        return store.load_run("r").scalars[key].tolist()


def test_host_values_changed_after_log_are_stored_as_they_were_at_the_call(sqlite_url, tmp_path):
    array = np.array(1.0)
    scalar = np.zeros(3)
    tensor = torch.tensor(1.0)
    grads = torch.tensor([2.0], requires_grad=True)
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        for step in range(3):
            mon.log(step, {"train/loss": array, "train/grad_norm": tensor, "optim/lr": scalar[1:2].reshape(()),
                           "train/tokens": (grads * 3).sum()})
            array[()] = 99.0 + step  # in place, after the call: the stored value must not see it
            tensor.add_(10.0)
            scalar[1] = 7.0
            with torch.no_grad():
                grads.add_(1.0)
    with open_store(sqlite_url) as store:
        data = store.load_run("r").scalars
    assert data["train/loss"].tolist() == [1.0, 99.0, 100.0]
    assert data["train/grad_norm"].tolist() == [1.0, 11.0, 21.0]
    assert data["optim/lr"].tolist() == [0.0, 7.0, 7.0]
    assert data["train/tokens"].tolist() == [6.0, 9.0, 12.0]


NOT_NUMBERS = [
    ("1.5", "is text, not a number"),
    ("abc", "is text, not a number"),
    (None, "is a NoneType, not a number"),
    (1 + 2j, "is a complex number"),
    (10**400, "does not fit a float"),
    (10**5000, "does not fit a float"),
    (decimal.Decimal("1e309"), "does not fit a float"),
    (np.array([1.0, 2.0]), r"is an array of shape \(2,\), not one number"),
    (np.complex128(1), "is a NumPy complex128 value, not a real number"),
    (np.str_("2"), "is text, not a number"),
    (torch.ones(2), r"is a tensor of shape \(2,\), not one number"),
    (torch.tensor(1j), "is a complex tensor"),
    ([1.0], "is a list, not a number"),
]


@pytest.mark.parametrize("value, why", NOT_NUMBERS, ids=lambda v: type(v).__name__)
def test_a_value_that_is_not_one_number_is_refused_at_the_call(sqlite_url, tmp_path, value, why):
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        with pytest.raises(InvalidLogError, match=f"the value .* of 'train/loss' {why}"):
            mon.log(0, {"train/grad_norm": 1.0, "train/loss": value})
        mon.log(1, {"train/loss": 2.0})
    assert _stored(sqlite_url) == [2.0]  # nothing of the refused call


def test_numbers_of_every_kind_are_accepted(sqlite_url, tmp_path):
    values = {"train/loss": True, "train/grad_norm": decimal.Decimal("0.5"), "optim/lr": fractions.Fraction(1, 4),
              "train/tokens": np.uint16(7), "perf/mfu": np.array([[0.125]]), "perf/step_time_s": math.inf,
              "data/epoch": torch.tensor([3], dtype=torch.int32)}
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=tmp_path)) as mon:
        mon.log(0, values)
    with open_store(sqlite_url) as store:
        row = store.load_run("r").scalars.loc[0].to_dict()
    assert row == {"train/loss": 1.0, "train/grad_norm": 0.5, "optim/lr": 0.25, "train/tokens": 7.0,
                   "perf/mfu": 0.125, "perf/step_time_s": math.inf, "data/epoch": 3.0}


def test_warn_mode_drops_a_value_that_is_not_a_number_and_says_so_once_per_key(sqlite_url, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gapwatch.client")
    settings = MonitorSettings(spool_dir=tmp_path, on_invalid="warn")
    with Monitor("r", store=sqlite_url, settings=settings) as mon:
        for step in range(4):
            mon.log(step, {"train/loss": float(step), "train/grad_norm": "x" * 1_000_000 if step % 2 else step})
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and "of 'train/grad_norm' is text, not a number" in warnings[0]
    assert len(warnings[0]) < 300  # a megabyte of text is not echoed
    assert _stored(sqlite_url) == [0.0, 1.0, 2.0, 3.0]
    assert _stored(sqlite_url, "train/grad_norm")[::2] == [0.0, 2.0]


def test_a_clean_close_leaves_no_spool_file(sqlite_url, tmp_path):
    spool = tmp_path / "spool"
    with Monitor("r", store=sqlite_url, settings=MonitorSettings(spool_dir=spool, flush_interval_s=0.1)) as mon:
        for step in range(2000):
            mon.log(step, {"train/loss": np.float32(step), "train/grad_norm": torch.tensor(1.0)})
            if step % 500 == 0:
                assert mon.flush()
    assert len(_stored(sqlite_url)) == 2000
    assert [p for p in spool.rglob("*") if p.is_file()] == []
