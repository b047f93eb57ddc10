"""The Hugging Face Trainer's console output (monitor/importers/hf_console_log.py), written by a
real Trainer run (hf_trainer_console.py) with stdout and stderr in one file: each logged dict lands
on the step the Trainer logged it at, read against what its own callbacks saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load
from monitor.importers.hf_trainer_state import source_name

from .conftest import trainer_console_log

def _values(run, key: str) -> dict[int, float]:
    return run.to_run_data("hf").series(key).dropna().to_dict()


def test_each_dict_lands_on_the_step_the_trainer_logged_it_at(trainer_console):
    log, logged = trainer_console
    assert detect_format(log) == "hf-console-log"
    run = load(log)
    assert run.profile == "hf" and run.config["max_steps"] == 60
    truth = {(e["step"], source_name(k)): float(v) for e in logged for k, v in e["logs"].items()
             if isinstance(v, (int, float))}
    assert {s for s, k in truth if k == "train/loss"} == set(range(5, 61, 5))
    loss = _values(run, schema.TRAIN_LOSS)
    assert loss.keys() == {s for s, k in truth if k == "train/loss"}
    for step, value in loss.items():  # printed to four significant figures
        assert value == pytest.approx(truth[(step, "train/loss")], rel=5e-4)
    heldout = _values(run, schema.heldout_key("eval"))
    assert list(heldout) == [20, 40, 60]
    assert all(v == pytest.approx(truth[(s, "eval/loss")], rel=5e-4) for s, v in heldout.items())
    assert _values(run, schema.OPTIM_LR)[5] == pytest.approx(truth[(5, "train/learning_rate")], rel=5e-4)
    # The run's own mean over training (train_loss) is an aggregate, not a series.
    assert "train/train_loss" not in run.key_map
    assert not [n for n in run.notes if "left out" in n and "dict" in n]


def test_a_log_written_twice_over_is_a_restart(trainer_console, tmp_path):
    """`trainer.train(resume_from_checkpoint=...)` in the same log: the bar counts again from below."""
    log, _ = trainer_console
    twice = tmp_path / "resumed.log"
    twice.write_bytes(log.read_bytes() * 2)
    run = load(twice)
    assert run.attempts == 2
    assert [(e["kind"], e["step"]) for e in run.events] == [("restart", 5)]


def test_a_dict_whose_bar_is_not_drawn_yet_waits_with_a_note(trainer_console, tmp_path):
    log, _ = trainer_console
    text = log.read_bytes()
    cut = text.rindex(b"{'loss'")
    cut = text.index(b"\n", cut) + 1  # the last training dict, its bar not yet drawn again
    path = tmp_path / "live.log"
    path.write_bytes(text[:cut])
    run = load(path)
    assert max(_values(run, schema.TRAIN_LOSS)) == 55
    assert any("1 logged dict(s) after the last progress bar" in n for n in run.notes)


def test_a_first_dict_beyond_the_first_64_kb_is_found(trainer_console, tmp_path):
    """The Trainer logs every 500 steps by default and redraws its bar up to ten times a second
    until then: here 2,000 drawings come before the first dict. Before, such a log was unrecognised
    unless imported with --format hf-console-log."""
    log, _ = trainer_console
    text = log.read_bytes()
    first_bar = text.index(b"/60 [")
    start = text.rindex(b"\r", 0, first_bar)
    slow = b"".join(b"\r  0%%|          | 0/60 [00:%02d<?, ?it/s]" % (i % 60) for i in range(2000))
    late = tmp_path / "late.log"
    late.write_bytes(text[:start] + slow + text[start:])
    assert text.index(b"{'loss'") < 64 * 1024 < late.read_bytes().index(b"{'loss'")
    assert detect_format(late) == "hf-console-log"
    assert _values(load(late), schema.TRAIN_LOSS).keys() == _values(load(log), schema.TRAIN_LOSS).keys()


def test_a_console_without_its_progress_bar_is_not_claimed(tmp_path):
    """disable_tqdm=True: the Trainer prints its dicts and no step; trainer_state.json has them."""
    log, _ = trainer_console_log(tmp_path / "no-bar", "--no-bar")
    assert "{'loss'" in log.read_text()
    _not_claimed(log)


def _not_claimed(path: Path) -> None:
    """Not detected as the Trainer's console, and refused in one line when named so."""
    with pytest.raises(GapwatchError, match="unrecognised format"):
        detect_format(path)
    with pytest.raises(GapwatchError, match="no dict logged under a training progress bar"):
        load(path, fmt="hf-console-log")


def test_other_progress_bars_and_printed_dicts_are_not_read_as_logs(tmp_path):
    evaluation = tmp_path / "eval.log"
    evaluation.write_text("Running loglikelihood requests\n"
                          + "".join(f"\r{n}%|##| {n}/100 [00:01<00:05,  5.69it/s]" for n in range(101))
                          + "\n{'model': 'gpt2', 'epoch': 'best'}\n{'results': {'arc_easy': 0.5}}\n")
    # A loop of one's own: a bar over each epoch's batches, its own dict after each epoch.
    loop = tmp_path / "loop.log"
    loop.write_text("".join("".join(f"\r{n}%|##| {n}/100 [00:01<00:05,  5.69it/s]" for n in range(101))
                            + f"\n{{'epoch': {e}, 'loss': {3 - e / 10}}}\n" for e in range(5)))
    for path in (evaluation, loop):
        _not_claimed(path)


def test_numbers_as_transformers_4_prints_them_and_a_value_that_is_no_number(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("\r  0%|  | 0/10 [00:00<?, ?it/s]\r 50%|# | 5/10 [00:01<00:01, 5.0it/s]\r"
                    "{'loss': '3.9', 'router': 'n/a', 'learning_rate': '1e-05', 'epoch': '0.5'}\n"
                    "\r 50%|# | 5/10 [00:01<00:01, 5.0it/s]"
                    "\r{'loss': 3.8123456789, 'learning_rate': 9.3e-05, 'epoch': 0.6}\n"
                    "\r 60%|# | 6/10 [00:01<00:01, 5.0it/s]\n")
    run = load(path)
    assert _values(run, schema.TRAIN_LOSS) == {5: 3.9, 6: 3.8123456789}
    assert _values(run, schema.OPTIM_LR) == {5: 1e-05, 6: 9.3e-05}
    assert any("router: value 'n/a' (line 4) is not a number: left out" in n for n in run.notes)
