"""`gapwatch runs` on a store with runs that have, and lack, a reference and metrics."""

from __future__ import annotations

import json

import pandas as pd

from app.cli import main
from monitor.store import open_store


def test_lists_runs_with_and_without_references(sqlite_url, capsys):
    with open_store(sqlite_url) as store:
        store.ensure_run("ref")
        store.ensure_run("cand", reference="ref")
        store.write_metrics("cand", pd.DataFrame({"step": [0, 1, 2], "key": "train/loss", "value": [3.0, 2.0, 1.0]}))
    assert main(["runs", "--store", sqlite_url]) == 0
    out = capsys.readouterr().out
    assert "cand" in out and "ref" in out and " 2 " in out
    assert main(["runs", "--store", sqlite_url, "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["cand"]["reference"] == "ref" and rows["cand"]["last_step"] == 2
    assert rows["ref"]["reference"] is None and rows["ref"]["last_step"] is None
