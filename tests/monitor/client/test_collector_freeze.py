"""The first Monitor of a process freezes the setup it finds (gc.freeze()), so a full collection
during training walks only what training made, not every imported module. Run in a fresh
interpreter each: the freeze happens once per process, and this test process froze long ago."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, sys
import pandas, sqlalchemy  # a trainer's imports: tens of thousands of tracked objects
from monitor.client import Monitor, MonitorSettings
gc.collect()
before = len(gc.get_objects())
settings = MonitorSettings(spool_dir=sys.argv[2], handle_sigterm=False, freeze_gc=sys.argv[3] == "on")
first = Monitor("a", store=sys.argv[1], settings=settings)
after_first = len(gc.get_objects())
frozen_first = gc.get_freeze_count()
junk = [[i] for i in range(5000)]  # made after the first Monitor: the trainer's, not frozen
second = Monitor("b", store=sys.argv[1], settings=settings)
print(json.dumps({"before": before, "after": after_first, "frozen": frozen_first,
                  "frozen_after_second": gc.get_freeze_count()}))
first.close(); second.close()
"""


def probe(tmp_path, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, f"sqlite:///{tmp_path / 's.db'}", str(tmp_path / "spool"), mode],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_first_monitor_leaves_the_setup_out_of_every_later_collection(tmp_path):
    seen = probe(tmp_path, "on")
    assert seen["before"] > 50_000
    assert seen["frozen"] >= seen["before"] * 0.9
    assert seen["after"] < seen["before"] / 10  # what a full collection still walks
    assert seen["frozen_after_second"] == seen["frozen"]  # once a process: later objects stay collectable


@pytest.mark.slow
def test_freeze_gc_off_leaves_the_collector_as_it_is(tmp_path):
    seen = probe(tmp_path, "off")
    assert seen["frozen"] == 0
    assert seen["after"] >= seen["before"] * 0.9
