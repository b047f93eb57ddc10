"""URLs: what a link says is what the page shows, whatever characters a run name holds."""

from __future__ import annotations

import json

import pytest

from app.dashboard.routes import ViewSpec, parse_run_path, run_href


@pytest.mark.parametrize("name", ["olmo-7b", "a/b?c=d&e=f#g", '<script>alert("x")</script>', "ünïcode run", "%2F"])
def test_run_links_round_trip_any_name(name):
    href = run_href(name, reference="ref/1", axis="tokens", start=10, end=20)
    path, _, search = href.partition("?")
    assert "/" not in path[len("/run/"):] and "<" not in href and "#" not in href
    assert parse_run_path(path, "?" + search) == ViewSpec(run=name, reference="ref/1", axis="tokens", start=10, end=20)


def test_alert_link_form_of_the_slack_sink():
    assert parse_run_path("/run/olmo-7b", "?start=900&end=1000") == ViewSpec(run="olmo-7b", start=900, end=1000)


def test_bad_query_values_are_ignored_and_ranges_ordered():
    spec = parse_run_path("/run/x", "?start=abc&end=50&axis=bogus")
    assert spec == ViewSpec(run="x", start=None, end=50, axis="step")
    assert parse_run_path("/run/x", "?start=90&end=10") == ViewSpec(run="x", start=10, end=90)


def test_an_empty_reference_means_none_and_a_missing_one_the_runs_own():
    assert parse_run_path("/run/x", "?ref=").reference == ""
    assert parse_run_path("/run/x", "").reference is None


def test_other_paths_are_not_runs():
    assert parse_run_path("/", "") is None
    assert parse_run_path("/run/", "") is None
    assert parse_run_path("/runs/x", "") is None
    assert run_href("x") == "/run/x"


def test_the_whole_view_round_trips_through_its_url():
    spec = ViewSpec(run="a/b", reference="ref", axis="tokens", start=100, end=120, lo=0, hi=5000,
                    smoothing=0.85, full_y=True, series=("optim/lr", "train/rewards/margins"),
                    tasks=("mmlu/acc", "arc_easy/acc"))
    path, _, search = spec.href().partition("?")
    assert parse_run_path(path, "?" + search) == spec
    assert "series=optim%2Flr&series=train%2Frewards%2Fmargins" in search  # in the order picked
    assert "task=mmlu%2Facc&task=arc_easy%2Facc" in search
    assert ViewSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec  # as the page keeps it
    assert ViewSpec(run="x").href() == "/run/x"


def test_smoothing_out_of_range_or_garbage_is_clamped_or_ignored():
    assert parse_run_path("/run/x", "?smooth=2").smoothing == 0.999
    assert parse_run_path("/run/x", "?smooth=-1").smoothing == 0.0
    assert parse_run_path("/run/x", "?smooth=nan").smoothing == 0.0
    assert parse_run_path("/run/x", "?smooth=abc").smoothing == 0.0
    assert parse_run_path("/run/x", "?from=10").lo is None  # half a range is no range
