"""An integration's reference, imported in the same call when the store does not have it yet."""

from __future__ import annotations

import pytest

from monitor.client import MonitorSettings
from monitor.errors import GapwatchError
from monitor.integrations.session import RunSpec
from monitor.store import open_store


def test_the_reference_is_imported_once_from_its_source(sqlite_url, tmp_path):
    source = tmp_path / "ref.csv"
    source.write_text("step,train/loss\n" + "".join(f"{s},{3.0 - s / 100}\n" for s in range(1, 31)))
    spec = RunSpec("cand", sqlite_url, reference="ref", reference_source=source,
                   monitor_args={"settings": MonitorSettings(spool_dir=tmp_path / "spool")})
    for attempt in range(2):
        with spec.open({"global_batch_size": 4}) as mon:
            mon.log(5, {"train/loss": 2.0})
    with open_store(sqlite_url) as store:
        assert store.load_run("ref").scalars["train/loss"].tolist() == [3.0 - s / 100 for s in range(1, 31)]
        assert store.get_run("ref")["status"] == "imported"
        cand = store.get_run("cand")
        assert cand["reference"] == "ref" and cand["attempts"] == 2 and cand["config"] == {"global_batch_size": 4}


def test_a_reference_source_needs_the_reference_s_name():
    with pytest.raises(GapwatchError, match="reference_source needs reference="):
        RunSpec("cand", reference_source="ref.csv")
