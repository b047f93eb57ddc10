"""The report on real runs: OLMo 2 ladder models and their reruns (W&B CSV exports in
the real data's runs/olmo-wandb-exports), through the importer, the store and `gapwatch report`."""

from __future__ import annotations

import json

import pytest

from monitor.importers import load

from app.cli import main
from app.report import build_report, compare
from app.report.heldout_table import heldout_table

LADDER = "runs/olmo-wandb-exports/ladder"
# Largest |Δ| of C4 held-out loss between run and rerun at matching checkpoints, as
# The real data's README states it for the 190M, 1B and 3B pairs.
C4_MAX_DELTA = {"190M": 0.021, "1B": 0.015, "3B": 0.042}
# Findings that would call a rerun of the same config a different run.
WRONG_VERDICTS = {"memorization_suspected", "diverged_below", "diverged_above", "data_loader_invariant_broken",
                  "resume_inconsistent", "nonfinite", "evals_regressed"}


def _pair(shared_data, size: str):
    base = shared_data / LADDER
    run = load(base / f"peteish-moreeval__{size}-1xC.csv").to_run_data(f"peteish-{size}")
    rerun = load(base / f"peteish-moreeval__{size}-1xC-rerun.csv").to_run_data(f"peteish-{size}-rerun")
    return compare(run, rerun)


@pytest.mark.parametrize("size", sorted(C4_MAX_DELTA))
def test_rerun_of_the_same_config_is_compared_at_matching_checkpoints(shared_data, size):
    pair = _pair(shared_data, size)
    table = heldout_table(pair)
    assert len(table.rows) == 11
    c4 = next(r for r in table.rows if r["set"] == "c4_en-validation")
    # The rerun evaluates twice as often: only the run's own checkpoints are compared.
    assert c4["checkpoints"] == len(pair.run.series("eval/heldout/c4_en-validation/loss"))
    assert c4["max_abs_delta"] == pytest.approx(C4_MAX_DELTA[size], abs=0.0006)
    assert not c4["flagged"]
    last = [c.key for c in table.columns if c.key.startswith("at_")][-1]
    assert c4[last].estimated and c4[last].stderr > 0  # W&B exports carry no error bars
    assert build_report(pair).verdict.kind not in WRONG_VERDICTS


@pytest.fixture(scope="module")
def olmo_store(tmp_path_factory, shared_data):
    """A SQLite store holding the 1B run and its rerun, brought in by `gapwatch import`, the rerun
    recorded as the run's reference."""
    root = tmp_path_factory.mktemp("olmo")
    url = f"sqlite:///{root / 'store.db'}"
    with pytest.MonkeyPatch.context() as mp:
        # Module-scoped: runs before the per-test isolation of the user directories.
        mp.setenv("XDG_CONFIG_HOME", str(root / "config"))
        base = shared_data / LADDER
        assert main(["import", str(base / "peteish-moreeval__1B-1xC.csv"), "--run", "peteish-1B",
                     "--store", url]) == 0
        assert main(["import", str(base / "peteish-moreeval__1B-1xC-rerun.csv"), "--run", "peteish-1B-rerun",
                     "--reference-of", "peteish-1B", "--store", url]) == 0
    return url


def test_cli_html_report_of_olmo_opens_offline(olmo_store, tmp_path, open_in_chromium, capsys):
    out = tmp_path / "olmo.html"
    assert main(["report", "--run", "peteish-1B", "--store", olmo_store, "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "loading peteish-1B" in err and "judging peteish-1B against peteish-1B-rerun" in err
    visit = open_in_chromium(out, "report-olmo.png")
    assert visit.console_errors == [] and visit.requests == [] and visit.dialogs == []
    assert visit.plots >= 2  # held-out and downstream charts (the exports have no train loss)


def test_cli_markdown_and_json_of_olmo(olmo_store, capsys):
    assert main(["report", "--run", "peteish-1B", "--store", olmo_store, "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## gapwatch report: peteish-1B vs peteish-1B-rerun")
    assert "### Held-out loss per set at matching checkpoints" in md
    assert "### Train loss delta by window" not in md  # not logged: listed under "Not compared"
    assert "train/loss not logged by 'peteish-1B' and 'peteish-1B-rerun'" in md
    assert main(["report", "--run", "peteish-1B", "--reference", "peteish-1B-rerun", "--store", olmo_store,
                 "-o", "-", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["axis"] == "step"
    assert len(doc["tables"]["downstream"]["rows"]) >= 40
    energy = doc["tables"]["energy"]["rows"]
    assert all(r["energy_kwh"] is None and "perf/step_time_s" in r["missing"] for r in energy)
