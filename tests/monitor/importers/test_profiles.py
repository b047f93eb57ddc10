"""Metric-name profiles: built-in mappings, detection, and user profiles from YAML."""

from __future__ import annotations

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import load
from monitor.importers.profiles import (
    BUILTIN_PROFILES, detect_profile, get_profile, load_user_profiles,
)


@pytest.mark.parametrize("profile, name, key", [
    ("olmo", "train/CE loss", schema.TRAIN_LOSS),
    ("olmo", "train/CrossEntropyLoss", schema.TRAIN_LOSS),
    ("olmo", "optim/total grad norm", schema.TRAIN_GRAD_NORM),
    ("olmo", "optim/LR (group 0)", schema.OPTIM_LR),
    ("olmo", "throughput/total tokens", schema.TRAIN_TOKENS),
    ("olmo", "eval/c4_en-validation/CrossEntropyLoss", "eval/heldout/c4_en-validation/loss"),
    ("olmo", "eval/lm/c4_en-validation/CE loss", "eval/heldout/c4_en-validation/loss"),
    ("olmo", "eval/downstream/hellaswag (length-normalized accuracy)",
     "eval/downstream/hellaswag/length-normalized_accuracy"),
    ("olmo", "eval/downstream_bpb/piqa_rc_0shot_bpb_bpb", "eval/downstream/piqa_rc_0shot/bpb"),
    ("olmo", "eval/downstream/boolq_val_rc_5shot_soft_log",
     "eval/downstream/boolq_val_rc_5shot/soft_log"),
    ("maxtext", "learning/loss", schema.TRAIN_LOSS),
    ("maxtext", "perf/step_time_seconds", schema.PERF_STEP_TIME_S),
    ("maxtext", "eval/avg_loss", "eval/heldout/default/loss"),
    ("llmc", "tel", "eval/heldout/val/loss"),
    ("gapwatch", "eval/downstream/arc_easy/acc/stderr", "eval/downstream/arc_easy/acc/stderr"),
])
def test_builtin_mappings(profile, name, key):
    got, _, matched = BUILTIN_PROFILES[profile].map_name(name)
    assert got == key and matched


def test_dropped_and_unmatched_names():
    olmo = BUILTIN_PROFILES["olmo"]
    assert olmo.map_name("eval/pile-validation/Perplexity")[0] is None
    assert olmo.map_name("throughput/total_training_Gflops")[0] == (
        "throughput/total_training_gflops")
    assert olmo.map_name("learning rate")[0] == "extra/learning_rate"
    assert olmo.map_name("_runtime")[0] is None


def test_detection():
    assert detect_profile(["train/CE loss", "optim/total grad norm"]).name == "olmo"
    assert detect_profile(["learning/loss", "perf/step_time_seconds"]).name == "maxtext"
    assert detect_profile([schema.TRAIN_LOSS, schema.OPTIM_LR]).name == "gapwatch"
    assert detect_profile(["x/y"], prefer="llmc").name == "llmc"


def test_two_names_onto_one_key_is_an_error():
    with pytest.raises(GapwatchError, match="maps both 'train/CE loss' and 'train/CrossEntropyLoss'"):
        BUILTIN_PROFILES["olmo"].mapping(["train/CE loss", "train/CrossEntropyLoss"], "f.csv")


def test_user_profile_from_the_config_dir(tmp_path, monkeypatch):
    config = tmp_path / "xdg_config" / "gapwatch"
    config.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg_config"))
    (config / "profiles.yaml").write_text(
        "profiles:\n"
        "  mytrainer:\n"
        "    extends: olmo\n"
        "    step_key: iteration\n"
        "    rules:\n"
        "      - {match: 'loss/train', key: train/loss}\n"
        "      - {match: 'val/(?P<set>[^/]+)/loss', key: 'eval/heldout/{set}/loss'}\n"
        "      - {match: 'mfu_pct', key: perf/mfu, scale: 0.01}\n"
        "      - {match: 'sys/.*', drop: true}\n"
    )
    profile = get_profile("mytrainer")
    assert profile.step_key == "iteration"
    assert profile.map_name("val/wiki/loss")[0] == "eval/heldout/wiki/loss"
    assert profile.map_name("train/CE loss")[0] == schema.TRAIN_LOSS  # from olmo
    path = tmp_path / "log.jsonl"
    path.write_text('{"iteration": 3, "loss/train": 2.0, "mfu_pct": 40, "sys/gpu": 1}\n')
    run = load(path, profile="mytrainer")
    data = run.to_run_data("u")
    assert data.series(schema.PERF_MFU).loc[3] == pytest.approx(0.4)
    assert "sys/gpu" not in run.key_map


@pytest.mark.parametrize("text, message", [
    ("profiles: [1, 2]\n", "expected a mapping with a 'profiles' mapping"),
    ("profiles:\n  p: {rules: [{match: '(', key: a/b}]}\n", "rule 1: bad pattern"),
    ("profiles:\n  p: {rules: [{key: a/b}]}\n", "rule 1 needs 'match'"),
    ("profiles:\n  p: {extends: nothere}\n", "extends unknown profile 'nothere'"),
    ("profiles:\n  p: {extends: p}\n", "'extends' loops back"),
    ("profiles:\n  p: {colour: red}\n", "unknown field"),
    ("profiles: {p: [}\n", "cannot read profiles"),
])
def test_bad_user_profile_files(tmp_path, text, message):
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    with pytest.raises(GapwatchError, match=message) as err:
        load_user_profiles(path)
    assert str(path) in str(err.value)


def test_explicit_profile_file_must_exist(tmp_path):
    with pytest.raises(GapwatchError, match="profile file does not exist"):
        load_user_profiles(tmp_path / "none.yaml")


def test_unknown_profile_name():
    with pytest.raises(GapwatchError, match="unknown profile 'nope'; known: composer, deepspeed, fairseq, fairseq2, flax, gapwatch, hf"):
        get_profile("nope")


def test_user_profile_key_that_is_not_valid(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("profiles:\n  bad: {rules: [{match: 'x', key: 'No Namespace'}]}\n")
    log = tmp_path / "l.jsonl"
    log.write_text('{"step": 1, "x": 2}\n')
    with pytest.raises(GapwatchError, match="not a valid metric key"):
        load(log, profile="bad", profiles_file=path)


def test_a_negative_value_of_what_cannot_be_negative_is_left_out(tmp_path):
    # nanoGPT's W&B keys: MFU in percent, -100 before its first estimate.
    path = tmp_path / "nanogpt.csv"
    path.write_text("iter,train/loss,mfu\n0,5.0,-100\n10,4.0,20.5\n20,3.5,21.0\n")
    run = load(path, profile="nanogpt")
    mfu = run.to_run_data("n").series(schema.PERF_MFU).dropna()
    assert list(mfu.index) == [10, 20] and list(mfu) == pytest.approx([0.205, 0.21])
    assert any("1 of perf/mfu" in note for note in run.notes)
