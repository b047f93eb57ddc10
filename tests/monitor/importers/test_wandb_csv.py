"""W&B CSV exports: every real OLMo export in the real data, both layouts, and bad files."""

from __future__ import annotations

import math
import re

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load

C4 = schema.heldout_key("c4_en-validation")


def test_every_real_export_maps_with_the_olmo_profile(shared_data):
    files = sorted((shared_data / "runs" / "olmo-wandb-exports").glob("*/*.csv"))
    assert len(files) == 13
    for path in files:
        run = load(path)
        assert run.profile == "olmo", path
        assert run.tokens_per_step and run.tokens_per_step > 0, path
        data = run.to_run_data("r")
        assert data.scalars.index.is_monotonic_increasing and len(data.scalars) > 30, path
        for key in data.scalars.columns:
            assert schema.is_valid_key(key), key
        assert not any(k.startswith("_") for k in data.scalars.columns)


def test_ladder_export_held_out_and_downstream_keys(shared_data):
    run = load(shared_data / "runs/olmo-wandb-exports/ladder/peteish-moreeval__1B-1xC.csv")
    data = run.to_run_data("1b")
    c4 = data.series(C4)
    # Every 200 steps, and once more at the last step (16,279).
    assert c4.index[0] == 200 and c4.index.to_series().diff().iloc[1:-1].eq(200).all()
    assert c4.index[-1] == 16279
    assert 2.5 < c4.iloc[-1] < 4.0
    assert run.key_map["eval/downstream/hellaswag_val_rc_5shot_len_norm"] == (
        "eval/downstream/hellaswag_val_rc_5shot/len_norm")
    assert run.key_map["eval/downstream_bpb/piqa_val_rc_5shot_bpb"] == (
        "eval/downstream/piqa_val_rc_5shot/bpb")
    assert run.tokens_per_step == 1572864


def test_rerun_evaluates_twice_as_often(shared_data):
    base = shared_data / "runs/olmo-wandb-exports/ladder"
    run = load(base / "peteish-moreeval__1B-1xC.csv").to_run_data("run")
    rerun = load(base / "peteish-moreeval__1B-1xC-rerun.csv").to_run_data("rerun")
    assert rerun.series(C4).index.to_series().diff().iloc[1:-1].eq(100).all()
    shared = run.series(C4).index.intersection(rerun.series(C4).index)
    assert len(shared) == len(run.series(C4))  # every checkpoint of the run is in the rerun
    # The README: run and rerun of the 1B differ by at most 0.015 nats on C4 (0.0153).
    diff = (run.series(C4).loc[shared] - rerun.series(C4).loc[shared]).abs()
    assert diff.max() == pytest.approx(0.0153, abs=5e-4)


def test_token_keyed_export_derives_steps(shared_data):
    run = load(shared_data / "runs/olmo-wandb-exports/ladder/peteish-final-new__1B-10xC.csv")
    data = run.to_run_data("10x")
    tokens = data.series(schema.TRAIN_TOKENS)
    assert (tokens.to_numpy() == tokens.index.to_numpy() * 1572864).all()
    assert any("derived from throughput/total_tokens" in n for n in run.notes)


def test_panel_export_with_min_max_columns(tmp_path):
    path = tmp_path / "panel.csv"
    path.write_text(
        '"Step","olmo-7b - train/CE loss","olmo-7b - train/CE loss__MIN",'
        '"olmo-7b - train/CE loss__MAX"\n'
        "10,3.5,3.4,3.6\n20,3.25,3.2,3.3\n30,NaN,,\n40,,,\n"
    )
    run = load(path)
    assert run.name_hint == "olmo-7b" and run.profile == "olmo"
    loss = run.to_run_data("x").series(schema.TRAIN_LOSS)
    assert list(loss.index) == [10, 20, 30] and math.isnan(loss.loc[30])
    assert any("kept 2 __MIN/__MAX column(s) as the band" in n for n in run.notes)
    # The band follows the metric's gapwatch key, on the steps where the export has it.
    data = run.to_run_data("x")
    low = data.series(schema.band_key(schema.TRAIN_LOSS, "min")).dropna()
    high = data.series(schema.band_key(schema.TRAIN_LOSS, "max")).dropna()
    assert low.to_dict() == {10: 3.4, 20: 3.2} and high.to_dict() == {10: 3.6, 20: 3.3}
    band_rows = {r["source"]: r["key"] for r in run.mapping if r["key"].startswith("band/")}
    assert band_rows == {"train/CE loss__MIN": "band/min/train/loss",
                         "train/CE loss__MAX": "band/max/train/loss"}


def test_a_band_without_its_metric_is_left_out(tmp_path):
    path = tmp_path / "panel.csv"
    path.write_text('"Step","r - train/loss","r - lr__MIN"\n1,2.0,0.1\n2,1.5,0.1\n')
    run = load(path)
    assert run.keys == [schema.TRAIN_LOSS]
    assert any("left out the band of 1 metric(s) not kept" in n for n in run.notes)


def test_panel_export_with_two_runs_reads_the_run_named(tmp_path):
    path = tmp_path / "two.csv"
    path.write_text('"Step","a - train/loss","b - train/loss"\n1,2,3\n2,,4\n')
    with pytest.raises(GapwatchError, match="panel export of 2 runs .*--run NAME"):
        load(path)
    b = load(path, source_run="b").to_run_data("b").series(schema.TRAIN_LOSS)
    assert b.to_dict() == {1: 3.0, 2: 4.0}
    a = load(path, source_run="a").to_run_data("a").series(schema.TRAIN_LOSS)
    assert a.to_dict() == {1: 2.0}


def test_a_panel_drawn_against_the_trainers_step_is_on_it(tmp_path):
    # A chart whose x axis was set to train/global_step: that is its first column, not Step.
    path = tmp_path / "wandb_export.csv"
    path.write_text('"train/global_step","hf-run - train/loss","hf-run - train/loss__MIN","hf-run - train/loss__MAX"\n'
                    + "".join(f'"{s}","{3 - s / 1000}","{3 - s / 1000}","{3 - s / 1000}"\n' for s in range(10, 60, 10)))
    run = load(path)
    assert run.name_hint == "hf-run"
    assert list(run.to_run_data("r").series(schema.TRAIN_LOSS).index) == [10, 20, 30, 40, 50]
    two = tmp_path / "two.csv"
    two.write_text('"train/global_step","a - train/loss","b - train/loss"\n10,2,3\n20,,4\n')
    assert load(two, source_run="b").to_run_data("b").series(schema.TRAIN_LOSS).to_dict() == {10: 3.0, 20: 4.0}


@pytest.mark.parametrize("x, cells", [("Relative Time (Wall)", ("12.5", "25.1")), ("train/epoch", ("1", "2")),
                                      ("train/global_step", ("10", "20.5"))])
def test_a_panel_drawn_against_anything_but_a_step_is_refused_in_one_line(tmp_path, x, cells):
    path = tmp_path / "wandb_export.csv"
    path.write_text(f'"{x}","r - train/loss"\n' + "".join(f'"{c}","2.5"\n' for c in cells))
    with pytest.raises(GapwatchError, match=f"a chart exported against '{re.escape(x)}'.*export the chart against Step"):
        load(path)


def test_text_column_is_left_out_but_text_in_a_number_column_is_an_error(tmp_path):
    ok = tmp_path / "media.csv"
    ok.write_text('_step,train/loss,samples\n1,2.0,"{""_type"": ""table""}"\n2,1.5,\n')
    run = load(ok)
    assert run.keys == [schema.TRAIN_LOSS]
    assert any("'samples' holds text" in n for n in run.notes)
    bad = tmp_path / "bad.csv"
    bad.write_text("_step,train/loss\n1,2.0\n2,oops\n3,1.0\n")
    with pytest.raises(GapwatchError, match=r"line 3: column 'train/loss': 'oops' is not a number"):
        load(bad)


@pytest.mark.parametrize(
    "text, message",
    [
        ("_step,train/loss\n1,2.0\n3,1.5\n2,1.4\n", r"line 4: step 2 after step 3"),
        ("_step,train/loss\n1,2.0\n1,1.5\n", r"line 3: step 1 after step 1"),
        ("epoch,train/loss\n1,2.0\n", "line 2: no step field .*; if 'epoch' counts the steps, import with "
                                        "--step-key epoch"),
        ("_step,train/loss\n1,2.0\n,1.5\n", "line 3: no step"),
        ("_step,train/loss\n1.5,2.0\n", "not a whole number"),
        ("_step\n1\n2\n", "no metric columns"),
        ("throughput/total_tokens,train/loss\n100,2.0\n", "--tokens-per-step"),
        ("", "empty file"),
        ('_step,train/loss\n1,"2.0\n', "not a valid CSV"),
    ],
)
def test_bad_exports_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(GapwatchError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)


def test_tokens_per_step_given_by_the_caller(tmp_path):
    path = tmp_path / "tokens.csv"
    path.write_text("throughput/total_tokens,train/CE loss\n1000,2.0\n2000,1.9\n")
    run = load(path, tokens_per_step=1000)
    assert run.to_run_data("t").series(schema.TRAIN_LOSS).to_dict() == {1: 2.0, 2: 1.9}
    with pytest.raises(GapwatchError, match="not a whole number of steps"):
        load(path, tokens_per_step=3000)
