"""The main job end to end: four real training runs, the W&B path, detection, alerts, report, dashboard.

Each phase runs the same `gapwatch` commands a user would, as child processes, and prints one line
when it starts and when it ends. The story it tells is the one gapwatch was born from: a run whose
data loader double-shards looks *better* than its reference on train loss while held-out loss is
tied, and a resume off by one batch goes unnoticed, unless something watches for them.

Every run, the W&B reference included, runs downstream evals in its loop (a seeded subset of the
benchmarks that `gapwatch evals fetch-data` puts in the per-user cache, fetched once), so the
memorization verdict against the reference rests on train, held-out and downstream alike.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from monitor.detectors import REGISTRY, judging
from monitor.errors import GapwatchError
from monitor.schema import Story

REFERENCE = "reference"
CANDIDATE = "double-sharding"
RESUMED = "resume-off-by-one"
RERUN = "clean-rerun"


# The story of how the machine ran rather than what the run learned: a busy laptop slows steps
# down, and that is worth showing but is not the run's fault, so it never fails the demo.
MACHINE_STORY = Story.THROUGHPUT

# In-loop downstream evals of every run: at every other held-out checkpoint, on the same seeded
# subset of documents each time. MMLU's subset is taken per subject (57 of them), so its evaluations
# would more than double the demo's training time (bench/RESULTS.md, "Design measurements"): the
# demo leaves it out, and BoolQ too: its passages do not fit the demo model's 32-token window.
DOWNSTREAM_EVERY = 50
DOWNSTREAM_TASKS = ("hellaswag", "arc_easy", "arc_challenge", "openbookqa", "piqa", "winogrande")
DOWNSTREAM_LIMIT = 40


@dataclass(frozen=True)
class Expectation:
    """A story a run must tell (an incident of it) for the demo to have told the truth."""

    run: str
    story: Story | None  # None: no incident of what the run learned may open
    why: str


EXPECTATIONS = (
    Expectation(CANDIDATE, Story.DATA, "the cursor advances 16x a global batch per step"),
    Expectation(CANDIDATE, Story.MEMORIZATION, "records read again score lower than first reads in the same batches, "
                "while held-out loss is tied"),
    Expectation(RESUMED, Story.DATA, "model restored at step N+1, data loader at batch N"),
    Expectation(RERUN, None, "another seed of the same recipe is not a divergence, a memorization, "
                "a held-out or a downstream difference"),
)


# The watch settings of the demo's scale (the between-run noise of its small model), in the form a
# user writes them.
WATCH_SETTINGS = Path(__file__).with_name("demo_watch.yaml")


@dataclass
class DemoConfig:
    workdir: Path = field(default_factory=lambda: Path("demo-output"))
    """Folder for the store, checkpoints, the W&B run folder and the report."""
    store: str | None = None
    """Store URL; default: a SQLite file in `workdir`."""
    config: str = "demo"
    """Trainer preset or file for all four runs (tests use `tiny`)."""
    steps: int | None = None
    """Optimizer steps of each run; None: the preset's."""
    kill_at_step: int | None = None
    """Step after which the resumed run's first process is SIGKILLed; None: 40% of the run."""
    serve: bool = True
    """Serve the dashboard at the end, until Ctrl-C."""
    eval_data: Path | None = None
    """Benchmark files for the downstream evals; default: the per-user cache, fetched once."""
    downstream_every: int = DOWNSTREAM_EVERY
    """Steps between the in-loop downstream evals of every run."""
    downstream_tasks: tuple[str, ...] = DOWNSTREAM_TASKS
    """The tasks they run (evals.task_suite.TASKS)."""
    downstream_limit: int = DOWNSTREAM_LIMIT
    """Seeded documents per task (per subject for MMLU)."""
    host: str = "127.0.0.1"
    port: int = 8050

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:///{(self.workdir / 'gapwatch.db').resolve()}"


class Demo:
    def __init__(self, config: DemoConfig) -> None:
        self.config = config
        self.workdir = config.workdir.resolve()
        self.started = time.monotonic()
        self.phase = 0
        self.eval_data: Path | None = None  # set by fetch_eval_data; None: no downstream evals
        self.phase_seconds: dict[str, float] = {}

    # --- narration ---------------------------------------------------------------------------------
    PHASES = 8

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.0f} s] {text}", flush=True)

    def begin(self, title: str) -> None:
        self.phase += 1
        self.phase_seconds[title] = time.monotonic()
        self.say(f"({self.phase}/{self.PHASES}) {title}")

    def timed(self) -> dict[str, float]:
        """Seconds each phase took so far (a phase ends where the next begins)."""
        starts = list(self.phase_seconds.items())
        ends = [t for _title, t in starts[1:]] + [time.monotonic()]
        return {title: end - start for (title, start), end in zip(starts, ends)}

    # --- running our own commands ------------------------------------------------------------------
    def gapwatch(self, *args: str, env: dict[str, str] | None = None, quiet: bool = False) -> str:
        """Run `gapwatch ARGS` as a child process; its output streams through unless `quiet`."""
        cmd = [sys.executable, "-m", "app", *args]
        # No progress bars from the in-loop evals: the trainer prints its own line every few steps.
        full_env = {**os.environ, "GAPWATCH_STORE": self.config.store_url, "WANDB_ERROR_REPORTING": "false",
                    "WANDB_SILENT": "true", "TQDM_DISABLE": "1", **(env or {})}
        result = subprocess.run(cmd, env=full_env, text=True, stdout=subprocess.PIPE if quiet else None,
                                stderr=subprocess.STDOUT if quiet else None)
        if result.returncode != 0:
            raise GapwatchError(f"demo step `gapwatch {' '.join(args[:3])} ...` failed with exit code {result.returncode}"
                                + (f": {result.stdout.strip().splitlines()[-1]}" if quiet and result.stdout.strip() else ""))
        return result.stdout or ""

    def train_config(self) -> str:
        """The trainer config of every run: the preset with the demo's downstream evals when the
        eval data is there; a config file is used as it is (its own evals settings decide)."""
        from trainer.config import PRESETS

        if self.eval_data is None or self.config.config not in PRESETS:
            return self.config.config
        path = self.workdir / f"train-{self.config.config}.yaml"
        c = self.config
        path.write_text(yaml.safe_dump({"preset": c.config, "evals": {
            "downstream_every": c.downstream_every, "downstream_tasks": list(c.downstream_tasks),
            "downstream_limit": c.downstream_limit, "downstream_data_dir": str(self.eval_data)}}))
        return str(path)

    def train(self, run: str, *extra: str, env: dict[str, str] | None = None) -> None:
        args = ["train", "--config", self.train_config(), "--run", run, "--run-dir", str(self.workdir / "runs" / run)]
        if self.config.steps:
            args += ["--steps", str(self.config.steps)]
        self.gapwatch(*args, *extra, env=env)

    # --- the phases --------------------------------------------------------------------------------
    def fetch_eval_data(self) -> None:
        """The benchmark files, once: `gapwatch evals fetch-data` (a pip download) unless they are
        already there. Without them the demo goes on without downstream evals."""
        from evals.data_layout import default_data_dir

        self.begin("eval data for the in-loop downstream evals")
        data_dir = (self.config.eval_data or default_data_dir()).resolve()
        if not (data_dir / "tasks").is_dir():
            try:
                self.gapwatch("evals", "fetch-data", "--data-dir", str(data_dir), quiet=True)
            except GapwatchError as exc:
                self.say(f"no downstream evals this time: fetching the eval data failed ({exc})")
                return
        self.eval_data = data_dir
        c = self.config
        self.say(f"downstream evals every {c.downstream_every} steps on {', '.join(c.downstream_tasks)} "
                 f"({c.downstream_limit} seeded documents each), from {data_dir}")

    def reference_from_wandb(self) -> None:
        self.begin("reference run, logged to Weights & Biases in offline mode only")
        trainer_run = REFERENCE + "-trainer"
        self.train(trainer_run, "--seed", "0", "--no-monitor", "--wandb", "offline", env={"WANDB_MODE": "offline"})
        # The trainer keeps its W&B files beside its checkpoints.
        wandb_dir = self.workdir / "runs" / trainer_run / "wandb"
        folders = sorted(glob.glob(str(wandb_dir / "offline-run-*")))
        if not folders:
            raise GapwatchError(f"the reference run wrote no W&B offline run folder under {wandb_dir}")
        self.say(f"importing the W&B run {Path(folders[-1]).name} as {REFERENCE!r}")
        self.gapwatch("import", folders[-1], "--run", REFERENCE)

    def candidate(self) -> None:
        self.begin("candidate run with the double-sharding data-loader bug")
        self.train(CANDIDATE, "--seed", "0", "--fault", "double-sharding", "--reference", REFERENCE)

    def resumed(self) -> None:
        self.begin("run killed with SIGKILL and resumed off by one batch, under --until-done")
        from trainer.config import load

        steps = self.config.steps or load(self.config.config).steps
        kill = self.config.kill_at_step or max(1, int(0.4 * steps))
        self.train(RESUMED, "--seed", "0", "--fault", "resume-off-by-one", "--until-done", "--backoff", "0.5",
                   "--reference", REFERENCE, "--kill-at-step", str(kill))

    def rerun(self) -> None:
        self.begin("clean rerun of the reference recipe with another seed")
        self.train(RERUN, "--seed", "1", "--reference", REFERENCE)

    @property
    def watch_config(self) -> Path:
        """The watch service's settings, written by watch() and read again by report() and dashboard()."""
        return self.workdir / "watch.yaml"

    def watch(self) -> None:
        sink = "Slack and the console" if os.environ.get("SLACK_WEBHOOK_URL") else "the console"
        self.begin(f"watch service: one detection pass over every run, alerts to {sink}")
        config = self.watch_config
        # Alert links open the dashboard this demo serves, on its own host and port.
        settings = yaml.safe_load(WATCH_SETTINGS.read_text())
        config.write_text(yaml.safe_dump({**settings,
                                          "dashboard_url": f"http://{self.config.host}:{self.config.port}"}))
        self.say(f"noise floors for this scale: {settings['detector_params']} (see {WATCH_SETTINGS.name})")
        self.gapwatch("watch", "--all", "--once", "--config", str(config))

    def report(self) -> Path:
        self.begin("offline report: the candidate against the reference")
        path = self.workdir / "report.html"
        # Judged with the watch service's settings, so the report tells what the alerts told.
        config = str(self.watch_config)
        for output in (path, path.with_suffix(".md")):
            self.gapwatch("report", "--run", CANDIDATE, "--reference", REFERENCE, "--config", config, "-o", str(output))
        self.say(f"report written to {path} (and {path.with_suffix('.md').name})")
        return path

    def incidents(self, run: str) -> list:
        """The incidents of `run`'s stored findings, as `gapwatch detect` and the watch service
        group them, most severe first."""
        from monitor.alerting.grouping import group, most_severe_first, progress_from_marks
        from monitor.store import open_store

        with open_store(self.config.store_url) as store:
            return most_severe_first(group(store.read_detections(run),
                                           progress_from_marks(run, store.run_marks(run).series)))

    def check(self) -> list[tuple[Expectation, bool, str]]:
        """Compare the stories the stored findings tell with what the demo promises."""
        outcomes = []
        told = {run: [i for i in self.incidents(run) if i.story != MACHINE_STORY]
                for run in (CANDIDATE, RESUMED, RERUN)}
        for exp in EXPECTATIONS:
            found = told[exp.run]
            ok = not found if exp.story is None else any(i.story == exp.story for i in found)
            outcomes.append((exp, ok, "; ".join(dict.fromkeys(i.name for i in found)) or "nothing"))
        return outcomes

    def summarize(self, outcomes) -> bool:
        from rich.console import Console
        from rich.table import Table

        from app.findings import headline, steps

        table = Table(title="What the runs learned: what gapwatch told")
        for column in ("run", "expected story", "why", "incidents", "ok"):
            table.add_column(column)
        for exp, ok, found in outcomes:
            expected = exp.story.value if exp.story else "nothing"
            table.add_row(exp.run, expected, exp.why, found, "[green]yes[/]" if ok else "[red]NO[/]")
        machine = Table(title="How the machine ran (shown, never a failure of the demo)")
        for column in ("run", "incident", "finding"):
            machine.add_column(column)
        found = [(run, i.name, headline(i)) for run in (REFERENCE, CANDIDATE, RESUMED, RERUN)
                 for i in self.incidents(run) if i.story == MACHINE_STORY]
        for run, name, finding in found or [("every run", MACHINE_STORY.value, "nothing found")]:
            machine.add_row(run, name, finding)
        # Piped or logged output has no terminal width to follow; rich's 80 columns would cut run names.
        console = Console(width=None if sys.stdout.isatty() else 120)
        console.print(table)
        console.print(machine)
        for incident in self.incidents(CANDIDATE):
            if incident.story != MACHINE_STORY:
                self.say(f"{CANDIDATE}: {incident.name}, steps {steps(incident)}: {headline(incident)}")
        if not any(i.story == Story.MEMORIZATION for i in self.incidents(CANDIDATE)):
            self.say(self.no_memorization(CANDIDATE))
        return all(ok for _exp, ok, _found in outcomes)

    def no_memorization(self, run: str) -> str:
        """Why `run` has no memorization incident: what its detectors could not judge, or that they
        judged it and found nothing."""
        from monitor.judging.judge import DetectConfig, detect_stored
        from monitor.store import open_store

        names = [name for name, cls in REGISTRY.items() if cls.story is Story.MEMORIZATION]
        with open_store(self.config.store_url) as store:
            result = detect_stored(store, run, REFERENCE, DetectConfig(detectors=names, write_series=False),
                                   write=False)
        reasons = "; ".join(item.describe(judging(item.detector)) for item in result.not_judged) or "judged, and none fired"
        return f"{run}: no memorization incident ({', '.join(names)}): {reasons}"

    def dashboard(self) -> None:
        self.begin("live dashboard")
        url = f"http://{self.config.host}:{self.config.port}/"
        if not self.config.serve:
            self.say(f"not serving (--no-serve); `gapwatch dashboard --store {self.config.store_url} --config "
                     f"{self.watch_config}` would serve {url}")
            return
        self.say(f"dashboard at {url}  (Ctrl-C to stop)")
        try:
            # Its thresholds drawn with the watch service's settings, as the alerts were judged.
            self.gapwatch("dashboard", "--host", self.config.host, "--port", str(self.config.port),
                          "--config", str(self.watch_config))
        except KeyboardInterrupt:
            pass

    def run(self) -> bool:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.say(f"gapwatch demo in {self.workdir}; store {self.config.store_url}")
        self.fetch_eval_data()
        self.reference_from_wandb()
        self.candidate()
        self.resumed()
        self.rerun()
        self.watch()
        self.report()
        ok = self.summarize(self.check())
        self.say("every expectation held" if ok else "some expectations did NOT hold (see the table)")
        self.say("phases: " + ", ".join(f"{title.split(':')[0].split(',')[0]} {s:.0f} s"
                                         for title, s in self.timed().items())
                 + f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        self.dashboard()
        return ok
