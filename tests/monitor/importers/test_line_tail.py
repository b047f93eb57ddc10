"""A console log read on as it grows (`import --follow`) gives what one whole read of it gives:
every reader with a `tail`, its log cut at random bytes (mid-line, mid line end), read on after
each cut. Lines end as Python's text mode ends them, a progress bar's carriage returns included."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from monitor.importers import FORMATS, get_format
from monitor.importers.formats import ReadOptions
from monitor.importers.line_tail import LineTail

from .test_corrupted_logs import (
    _clu, _composer, _fairseq_json, _fairseq_simple, _hf_console, _levanter, _maxtext, _olmo_core, _t5x,
    _torchtitan, _torchtune)


def _megatron() -> bytes:
    return "".join(f" [2024-05-01 10:00:00] iteration {s:8d}/    1000 | consumed samples: {s * 256:12d} | "
                   f"learning rate: 3.000000E-04 | lm loss: {10 - s / 100:.6E} | loss scale: 1.0 |\n"
                   for s in range(10, 400, 10)).encode()


def _modded_nanogpt() -> bytes:
    script = "class Hyperparameters:\n    batch_size : int = 8*64\n    sequence_length : int = 1024\n\n"
    return (script + "".join(f"step:{s}/100 train_loss:{4 - s / 50:.4f} train_time:{s * 100}ms step_avg:100ms\n"
                             + (f"step:{s}/100 val_loss:{4.1 - s / 50:.4f} train_time:{s * 100}ms step_avg:100ms\n"
                                if s % 10 == 0 else "") for s in range(1, 40))).encode()


SAMPLES = {"megatron-log": _megatron, "fairseq-log": _fairseq_json, "composer-log": _composer,
           "olmo-core-log": _olmo_core, "torchtitan-log": _torchtitan, "maxtext-log": _maxtext,
           "llmc-log": _modded_nanogpt, "hf-console-log": _hf_console, "clu-log": _clu, "levanter-log": _levanter}


def test_every_console_log_reader_can_be_followed():
    followed = {f.name for f in FORMATS if f.tail is not None}
    assert followed >= set(SAMPLES), "a console log read again from its start at every poll"


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_a_log_read_on_as_it_grows_is_the_log_read_whole(tmp_path, fmt, line_end):
    # The job appended its log twice over (a resume: its steps go back), in Windows line ends too.
    text = (SAMPLES[fmt]() * 2).decode().replace("\n", line_end).encode()
    if fmt == "fairseq-log":
        text += _fairseq_simple().replace(b"\n", line_end.encode())
    if fmt == "llmc-log":
        text += _torchtune().replace(b"\n", line_end.encode())
    if fmt == "clu-log":
        text += _t5x().replace(b"\n", line_end.encode())
    whole_path = tmp_path / "whole.log"
    whole_path.write_bytes(text)
    whole = get_format(fmt).read(whole_path, ReadOptions())  # the reader's own names, before a profile
    rng = random.Random(f"{fmt}{line_end!r}")
    cuts = sorted(rng.sample(range(1, len(text)), 12)) + [len(text)]
    path = tmp_path / "growing.log"
    path.write_bytes(b"")
    tail = get_format(fmt).tail(path)
    scalars, events = [], []
    for cut in cuts:
        path.write_bytes(text[:cut])
        part = tail.read()
        scalars.append(part.scalars)
        events += part.events
    followed = pd.concat(scalars, ignore_index=True).astype({"key": str})
    pd.testing.assert_frame_equal(followed, whole.scalars.reset_index(drop=True).astype({"key": str}))
    assert events == whole.events and len(events) >= 1
    assert part.config == whole.config and part.tokens_per_step == whole.tokens_per_step
    assert part.profile == whole.profile


def test_a_progress_bar_redrawn_in_place_ends_its_lines_with_carriage_returns(tmp_path):
    path = tmp_path / "titan.log"
    bar = "".join(f"\r  {p}%|#   | {p}/100" for p in range(0, 100, 25))
    text = _torchtitan().decode()
    path.write_text(bar + "\n" + text.replace("\n", bar + "\r", 3), newline="")
    tail = get_format("torchtitan-log").tail(path)
    assert list(tail.read().scalars["step"].unique()) == list(range(1, 40))
    assert tail.number == 5 + len(text.splitlines()) + 3 * 4  # the bar alone: 5 lines (the first empty)


def test_a_line_cut_mid_carriage_return_and_newline_is_one_line_end(tmp_path):
    path = tmp_path / "mt.log"
    first = "completed step: 1, seconds: 1.0, loss: 9.000\r"
    path.write_bytes(first.encode())
    tail = LineTail(path, get_format("maxtext-log").tail(path).parser)
    assert not len(tail.read().scalars)  # a CR at the end may be the first half of a CR LF
    path.write_bytes((first + "\ncompleted step: 2, seconds: 1.0, loss: 8.900\r\n").encode())
    assert list(tail.read().scalars["step"].unique()) == [1, 2] and tail.number == 2
