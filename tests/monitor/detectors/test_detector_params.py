"""Detector settings checked against the detectors' fields as they are built (monitor/detectors/__init__.py)."""

from __future__ import annotations

import dataclasses

import pytest

from monitor.detectors import REGISTRY, check_params


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_detectors_own_defaults_pass_as_settings(name):
    # A setting written out as the defaults it repeats is accepted: no default breaks its own check.
    defaults = REGISTRY[name]()
    given = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
    check_params({name: {k: list(v) if isinstance(v, tuple) else v for k, v in given.items()}})


def test_a_count_of_none_is_refused_unless_the_detector_allows_it():
    with pytest.raises(ValueError, match=r"center_window of detector spike must be a count \(1 or more\), not 0"):
        check_params({"spike": {"center_window": 0}})
    check_params({"spike": {"recovery_points": 0}, "memorization_trend": {"skip_checkpoints": 0}})
