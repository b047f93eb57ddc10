"""The detector contract: registry, parameters, documentation of every threshold, purity, and
robustness to whatever a run logs (hypothesis)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.detectors import REGISTRY, Detector, build, make_run
from monitor.schema import (
    DATA_CURSOR,
    PERF_STEP_TIME_S,
    TRAIN_GRAD_NORM,
    TRAIN_LOSS,
    Detection,
    Severity,
    downstream_key,
    heldout_key,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "detectors.md"
NAMES = ["reference_divergence", "memorization", "memorization_trend", "memorization_reread", "heldout_divergence",
         "spike", "nonfinite", "grad_norm_growth", "data_invariants", "resume", "throughput", "eval_regression"]


def test_registry_holds_the_twelve_detectors():
    assert list(REGISTRY) == NAMES
    for name, cls in REGISTRY.items():
        assert issubclass(cls, Detector) and cls.name == name
    assert [d.name for d in build()] == NAMES


def test_build_applies_parameters_and_refuses_unknown_names():
    (spike,) = build(["spike"], {"spike": {"threshold": 7.5}})
    assert spike.params()["threshold"] == 7.5 and "threshold=7.5" in repr(spike)
    assert spike.fingerprint() != build(["spike"])[0].fingerprint()  # saved watch state is keyed on it
    with pytest.raises(KeyError, match="bogus"):
        build(["bogus"])
    with pytest.raises(ValueError, match="unknown parameter 'bogus' of detector spike; its parameters: metrics, "):
        build(["spike"], {"spike": {"bogus": 1}})


def field_docs(cls) -> dict[str, str]:
    """The docstring under each field of a detector dataclass (and of the dataclasses it extends)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = after.value.value
    return docs


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_documented(name):
    doc = DOC.read_text()
    section = doc.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
    for field in dataclasses.fields(REGISTRY[name]):
        assert f"`{field.name}`" in section, f"{name}.{field.name} missing from docs/detectors.md"


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_has_a_default_and_a_docstring(name):
    cls = REGISTRY[name]
    docs = field_docs(cls)
    for field in dataclasses.fields(cls):
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        assert has_default, f"{name}.{field.name} has no default"
        assert docs.get(field.name, "").strip(), f"{name}.{field.name} has no docstring saying what it is"


finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32),
                          st.floats(min_value=0.25, max_value=20, width=32))


@st.composite
def runs(draw):
    n = draw(st.integers(min_value=0, max_value=60))
    cols = {}
    for key in draw(st.sets(st.sampled_from([TRAIN_LOSS, TRAIN_GRAD_NORM, PERF_STEP_TIME_S, DATA_CURSOR,
                                            heldout_key("c4"), downstream_key("piqa", "acc")]))):
        cols[key] = draw(st.lists(finite_or_not, min_size=n, max_size=n))
    frame = pd.DataFrame(cols, index=np.arange(1, n + 1)) if cols else pd.DataFrame(index=np.arange(1, n + 1))
    run = make_run("r", frame)
    run.info.global_batch_size = draw(st.sampled_from([None, 8]))
    run.info.records_per_epoch = draw(st.sampled_from([None, 1000]))
    return run


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs(), ref=runs())
def test_any_logged_values_give_detections_or_nothing_never_an_error(run, ref):
    for detector in build():
        first = detector.detect(run, ref)
        assert all(isinstance(d, Detection) and isinstance(d.severity, Severity) for d in first)
        assert all(d.start_step <= d.end_step for d in first)
        assert [d.to_dict() for d in detector.detect(run, ref)] == [d.to_dict() for d in first]  # deterministic
        detector.update(detector.new_state(), run, ref)
