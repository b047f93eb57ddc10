"""Two JAX processes on this machine (CPU collectives, coordinator on 127.0.0.1) share the data hosts:
in one epoch the hosts of both processes together read every record exactly once."""

import json
import socket
import subprocess

import pytest

from monitor import schema
from monitor.store import open_store
from tests.trainer.conftest import REPO, cli, cli_env
from trainer import checkpoint, packing
from trainer.config import load
from trainer.data import usable_records

CONFIG = """
preset: tiny
data:
  data_hosts: 8
  global_batch_size: 8
  corpus:
    max_train_chars: 30000
checkpoint_every: 1000
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_read_each_record_exactly_once_per_epoch(tmp_path, caches):
    config_file = tmp_path / "two.yaml"
    config_file.write_text(CONFIG)
    cfg = load(str(config_file))
    records = usable_records(len(packing.build(cfg.data.corpus, cfg.model.max_seq_len, cfg.model.vocab_size,
                                               cache_dir=caches["corpus"], say=lambda _: None).train), 8)
    epoch_steps = records // 8
    url = f"sqlite:///{tmp_path / 'store.db'}"
    port = free_port()
    procs = [
        subprocess.Popen(
            cli("--config", str(config_file), "--steps", str(epoch_steps), "--run", "two", "--store", url,
                "--run-dir", str(tmp_path / "two"), "--quiet", "--coordinator", f"127.0.0.1:{port}",
                "--num-processes", "2", "--process-id", str(i)),
            env=cli_env(caches), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]

    with open_store(url) as store:
        run = store.load_run("two")
        info = store.get_run("two")
    assert info["config"]["processes"] == 2 and info["config"][schema.CONFIG_RECORDS_PER_EPOCH] == records
    last = run.scalars.loc[epoch_steps]
    assert last[schema.DATA_UNIQUE_FRACTION] == 1.0 and last[schema.DATA_SEEN_ONCE_FRACTION] == 1.0
    assert last[schema.DATA_CURSOR] == records
    assert run.scalars[schema.DATA_SEEN_2PLUS_FRACTION].max() == 0.0

    # The final checkpoint holds every host's loader state, gathered from both processes.
    mngr = checkpoint.manager(tmp_path / "two" / "checkpoints", read_only=True)
    try:
        meta, states, _ = checkpoint.restore_host_side(mngr, epoch_steps)
    finally:
        mngr.close()
    assert sorted(states, key=int) == [str(h) for h in range(8)]
    assert {json.loads(s)["last_seen_indices"]["0"] for s in states.values()} == {epoch_steps - 1}
    assert meta["records_per_epoch"] == records
