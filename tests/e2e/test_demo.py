"""A shortened `gapwatch demo` end to end: the same phases and commands as `make demo`, on the tiny
preset so that it fits in the suite.

What it must show at this size: the W&B offline run was imported as the reference, the double-
sharded run trips the data invariants, the run killed with SIGKILL and resumed off by one batch
trips the resume detector, the clean rerun with another seed trips nothing of what a run learns, every
run evaluates downstream tasks in its loop (the reference's reach the store through the .wandb
import), and the report compares them.
The memorization expectation needs the demo preset's model and corpus (a 0.2M-parameter model on
0.1 MB of text barely learns, so repeated records cannot lower its loss); the full demo checks it
and tests/monitor/detectors cover the detector on both firing and silent cases.
"""

from __future__ import annotations

import pytest

from app.demo import CANDIDATE, REFERENCE, RERUN, RESUMED, Demo, DemoConfig
from app.report.render_markdown import md
from evals.data_convert import convert_original
from monitor.schema import Story, downstream_key
from monitor.store import open_store

# Two tasks of 8 seeded documents at steps 50 and 100: downstream evals in the loop of every run,
# at a cost the suite can pay.
TASKS = ("arc_easy", "hellaswag")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory, shared_data):
    workdir = tmp_path_factory.mktemp("demo")
    # The real benchmark files, converted as `gapwatch evals fetch-data --original-dir` does.
    convert_original(shared_data / "evals", workdir / "eval-data")
    # Killed after step 30: past the first checkpoint (step 25), so the restart resumes from it.
    demo = Demo(DemoConfig(workdir=workdir, config="tiny", kill_at_step=30, serve=False,
                           eval_data=workdir / "eval-data", downstream_tasks=TASKS, downstream_limit=8))
    # Module-scoped, so the suite's per-test user folders are not set yet: give the demo its own.
    with pytest.MonkeyPatch.context() as env:
        for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):
            env.setenv(var, str(workdir / var.lower()))
        demo.run()
    return demo


def outcome(demo: Demo, run: str, story: Story | None) -> tuple[bool, str]:
    for exp, ok, found in demo.check():
        if exp.run == run and exp.story == story:
            return ok, found
    raise AssertionError(f"the demo expects nothing of {run} / {story}")


def detectors_of(demo: Demo, run: str, story: Story) -> set[str]:
    return {d.detector for i in demo.incidents(run) if i.story == story for d in i.detections}


def test_the_reference_comes_from_the_wandb_offline_run(demo):
    wandb_files = list((demo.workdir / "runs" / f"{REFERENCE}-trainer" / "wandb").glob("offline-run-*/*.wandb"))
    assert len(wandb_files) == 1
    with open_store(demo.config.store_url) as store:
        info = store.get_run(REFERENCE)
        # Imported from the .wandb file; our trainer's metric names need no mapping (profile gapwatch).
        assert info is not None and info["source"] == "import:gapwatch"
        assert len(store.read_scalars([REFERENCE], ["train/loss"], max_points=10_000)) == 100


def test_the_references_downstream_evals_arrive_through_the_wandb_import(demo):
    with open_store(demo.config.store_url) as store:
        for run in (REFERENCE, CANDIDATE, RESUMED, RERUN):
            scalars = store.load_run(run).scalars
            for task in TASKS:
                for key in (downstream_key(task, "acc"), downstream_key(task, "acc", "stderr"),
                            downstream_key(task, "acc", "n")):
                    logged = scalars[key].dropna() if key in scalars.columns else scalars.index[:0]
                    assert list(logged.index) == [50, 100], (run, key)
            assert (scalars[downstream_key("arc_easy", "acc", "n")].dropna() == 8).all(), run


def test_the_report_compares_the_downstream_evals_with_the_reference(demo):
    markdown = (demo.workdir / "report.md").read_text()
    section = markdown.split("Downstream evals per task")[1].split("\n#")[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and "---" not in line]
    # A header and one row per task and metric, each at the last shared checkpoint.
    assert {task for task in TASKS if any(md(task) in row.split("|")[1] for row in rows)} == set(TASKS), section
    assert all("| 100 |" in row for row in rows[1:]), section


def test_double_sharding_trips_the_data_invariants(demo):
    ok, found = outcome(demo, CANDIDATE, Story.DATA)
    assert ok, found
    assert "data_invariants" in detectors_of(demo, CANDIDATE, Story.DATA)


def test_the_killed_and_resumed_run_trips_the_resume_detector(demo):
    ok, found = outcome(demo, RESUMED, Story.DATA)
    assert ok, found
    assert "resume" in detectors_of(demo, RESUMED, Story.DATA)
    with open_store(demo.config.store_url) as store:
        kinds = set(store.read_events(RESUMED)["kind"])
    assert "resume" in kinds


def test_the_clean_rerun_trips_nothing(demo):
    ok, found = outcome(demo, RERUN, None)
    assert ok, found


def test_the_report_compares_the_candidate_with_the_reference(demo):
    html = (demo.workdir / "report.html").read_text()
    markdown = (demo.workdir / "report.md").read_text()
    for text in (html, markdown):
        assert CANDIDATE in text and REFERENCE in text
    assert "Data-loader invariant broken" in markdown and "data/cursor" in markdown
