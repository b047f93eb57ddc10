"""Two hosts writing one run's new series into PostgreSQL at the same moment."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from monitor.store import open_store

STEPS = 20_000  # past two chunks' widths: the first batch already seals chunks
ROUNDS = 4


def host_rows(host: int) -> pd.DataFrame:
    """Every host logs the same steps of the same series (a metric each host reports), its own value."""
    steps = np.arange(STEPS)
    return pd.DataFrame({"step": steps, "key": "train/loss", "value": host + steps * 1e-6})


def test_two_hosts_writing_the_first_batch_of_a_series_both_land(pg_url):
    """Neither host had the series' last step to lock, so both sealed the same new chunk; the
    second one's insert broke the chunk key and its whole batch was refused."""
    stores = [open_store(pg_url), open_store(pg_url)]
    try:
        for round_ in range(ROUNDS):
            name = f"shared-{round_}"
            stores[0].ensure_run(name)
            start = threading.Barrier(2)
            errors: list[BaseException] = []

            def write(host: int) -> None:
                start.wait(timeout=30)
                try:
                    stores[host].write_metrics(name, host_rows(host))
                except BaseException as exc:  # the test reports it below
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(h,)) for h in (0, 1)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            assert not any(t.is_alive() for t in threads)
            assert errors == []
            loss = stores[0].load_run(name).scalars["train/loss"]
            # Every step once; the row table's rule decides which host's value a step keeps.
            assert loss.index.tolist() == list(range(STEPS))
            assert set(np.round(loss.to_numpy() - loss.index.to_numpy() * 1e-6).astype(int)) <= {0, 1}
    finally:
        for s in stores:
            s.close()
