"""A pass judged in a forked child gives what it gives here, and a child that dies costs nothing."""

from __future__ import annotations

import os

from monitor.judging.judge import judge
from monitor.judging.side_process import SidePass

from tests.monitor.detectors.synth import full_run


def test_a_run_judged_in_a_child_is_judged_as_here():
    run = full_run()
    run.scalars.iloc[1500, run.scalars.columns.get_loc("train/loss")] += 5.0  # a spike to find
    here = judge(run, None)
    there = SidePass(lambda: (os.getpid(), judge(run, None))).result()
    assert there[0] != os.getpid(), "judged in another process"
    assert [d.to_dict() for d in there[1].detections] == [d.to_dict() for d in here.detections]
    assert any(d.detector == "spike" for d in here.detections)


def test_a_child_that_dies_leaves_the_pass_to_this_process():
    parent = os.getpid()

    def task():
        if os.getpid() != parent:
            os._exit(3)  # killed, as the kernel's out-of-memory killer would
        return "judged here"

    assert SidePass(task).result() == "judged here"
