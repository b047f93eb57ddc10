"""The OLMo-style sampler and Grain pipeline: sharding, epochs, double sharding, loader state."""

import json

import numpy as np
import pytest

from monitor.errors import GapwatchError
from trainer.data import DataConfig, DataHosts, usable_records
from trainer.sampler import HostShardedSampler

HOSTS = 32


def records(n: int, width: int = 5) -> np.ndarray:
    return np.arange(n * width, dtype=np.int32).reshape(n, width)


def read_counts(hosts: DataHosts, steps: int, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    counts = np.zeros(n, int)
    batches = []
    for step in range(1, steps + 1):
        batch = hosts.next_batch(step)
        np.add.at(counts, batch["record"], 1)
        batches.append(batch)
    return counts, batches


def test_hosts_together_read_each_record_once_per_epoch_and_reshuffle():
    n = 64 * HOSTS
    samplers = [HostShardedSampler(n, h, HOSTS, seed=3) for h in range(HOSTS)]
    per_host = n // HOSTS
    for epoch in (0, 1):
        keys = [s[epoch * per_host + i].record_key for s in samplers for i in range(per_host)]
        assert sorted(keys) == list(range(n))
    first = [samplers[0][i].record_key for i in range(per_host)]
    second = [samplers[0][per_host + i].record_key for i in range(per_host)]
    assert first != second  # a new permutation each epoch


def test_clean_loader_covers_the_corpus_once_in_one_epoch():
    n = 3200
    cfg = DataConfig(global_batch_size=64, data_hosts=HOSTS)
    hosts = DataHosts(records(n), "k", cfg, seed=1, host_ids=range(HOSTS))
    counts, batches = read_counts(hosts, n // 64, n)
    assert np.all(counts == 1)
    # The cursor (summed host positions) advances by exactly the global batch each step.
    assert [int(b["position"].sum()) for b in batches[:3]] == [64, 128, 192]


def test_double_sharding_resamples_with_replacement():
    n = 6400
    cfg = DataConfig(global_batch_size=64, data_hosts=HOSTS)
    hosts = DataHosts(records(n), "k", cfg, seed=1, host_ids=range(HOSTS), loader_shard_options=True)
    counts, batches = read_counts(hosts, n // 64, n)
    # One nominal epoch of Poisson(1)-like draws: e^-1 = 36.8% unseen, 36.8% once, 26.4% twice+.
    assert abs(np.mean(counts == 0) - 0.368) < 0.03
    assert abs(np.mean(counts == 1) - 0.368) < 0.03
    assert abs(np.mean(counts >= 2) - 0.264) < 0.03
    # ...because each loader's cursor runs HOSTS times too fast.
    assert int(batches[-1]["position"].sum()) > 0.9 * HOSTS * n


def test_loader_state_resumes_exactly():
    cfg = DataConfig(global_batch_size=8, data_hosts=4)
    data = records(400)
    a = DataHosts(data, "k", cfg, seed=7, host_ids=range(4))
    for step in range(1, 6):
        a.next_batch(step)
    saved = a.state()
    expected = [a.next_batch(step)["record"] for step in range(6, 11)]
    b = DataHosts(data, "k", cfg, seed=7, host_ids=range(4))
    b.restore(saved)
    got = [b.next_batch(step)["record"] for step in range(6, 11)]
    assert all(np.array_equal(x, y) for x, y in zip(expected, got))
    assert json.loads(saved["3"])["last_seen_indices"]["0"] == 9  # 5 batches of 2 records


def test_state_from_another_corpus_or_seed_is_refused():
    cfg = DataConfig(global_batch_size=8, data_hosts=4)
    a = DataHosts(records(400), "k", cfg, seed=7, host_ids=range(4))
    a.next_batch(1)
    for other in (DataHosts(records(400), "other", cfg, seed=7, host_ids=range(4)),
                  DataHosts(records(400), "k", cfg, seed=8, host_ids=range(4))):
        with pytest.raises(GapwatchError, match="does not fit"):
            other.restore(a.state())


def test_one_process_can_play_a_block_of_hosts():
    cfg = DataConfig(global_batch_size=8, data_hosts=4)
    full = DataHosts(records(400), "k", cfg, seed=2, host_ids=range(4)).next_batch(1)["record"]
    upper = DataHosts(records(400), "k", cfg, seed=2, host_ids=range(2, 4)).next_batch(1)["record"]
    assert np.array_equal(full[4:], upper)


def test_batch_and_host_counts_are_checked():
    with pytest.raises(GapwatchError, match="not a multiple"):
        DataHosts(records(400), "k", DataConfig(global_batch_size=6, data_hosts=4), 0, range(4))
    with pytest.raises(GapwatchError, match="fewer than one global batch"):
        DataHosts(records(5), "k", DataConfig(global_batch_size=8, data_hosts=4), 0, range(4))
    assert usable_records(103, 4) == 100
