"""Which runs the watch service follows: named ones, or every run in the store."""

from __future__ import annotations

from dataclasses import dataclass

from monitor.errors import GapwatchError


@dataclass(frozen=True)
class Target:
    run: str
    reference: str | None


@dataclass
class TargetSpec:
    runs: tuple[str, ...] = ()
    """Runs named on the command line (empty with `all_runs`)."""
    reference: str | None = None
    """Reference for the named runs; None: each run's own stored reference."""
    all_runs: bool = False
    """Every run in the store, found anew as runs appear. A run without a reference (an imported
    reference among them) is judged by the detectors that need none: spikes, NaN, data, resumes,
    throughput."""

    def resolve(self, store) -> list[Target]:
        if self.all_runs:
            return [Target(name, _none(ref)) for name, ref in store.run_references()]
        targets = []
        for run in self.runs:
            info = store.get_run(run)
            if info is None:
                raise GapwatchError(f"no run named {run!r} in {store.url.redacted()}")
            reference = self.reference or info["reference"]
            if reference is not None and store.get_run(reference) is None:
                raise GapwatchError(f"reference run {reference!r} of {run!r} is not in {store.url.redacted()}")
            targets.append(Target(run, reference))
        return targets


def _none(value) -> str | None:
    return value if isinstance(value, str) and value else None
