"""FLOPs accounting, the config files, the supervisor's policy and the train command's errors."""

import subprocess
import sys

import numpy as np
import pytest

from monitor.errors import GapwatchError
from tests.trainer.conftest import REPO, cli, cli_env
from trainer import flops
from trainer.config import PRESETS, load
from trainer.model import FULL, SLIDING, ModelConfig
from trainer.preflight import check_matmul
from trainer.supervisor import SupervisorConfig, exit_code, supervise


def test_attended_keys_match_a_brute_force_mask():
    seq, window = 50, 7
    q = np.arange(seq)[:, None]
    k = np.arange(seq)[None, :]
    causal = k <= q
    sliding = causal & (k > q - window)
    assert flops.mean_attended_keys(seq, None) == causal.sum() / seq
    assert flops.mean_attended_keys(seq, window) == sliding.sum() / seq


def test_flops_per_token_is_6n_plus_the_attention_term():
    cfg = ModelConfig(vocab_size=100, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=8,
                      mlp_hidden=64, max_seq_len=64, sliding_window=16)
    n = cfg.param_count() - 100 * 32  # everything but the embedding lookup
    attention = 3 * 4 * 4 * 8 * (3 * flops.mean_attended_keys(64, 16) + flops.mean_attended_keys(64, None))
    assert flops.flops_per_token(cfg, 64) == pytest.approx(6 * n + attention)
    assert cfg.layer_types == (SLIDING, SLIDING, SLIDING, FULL)


def test_peak_table_knows_the_accelerators():
    assert flops.chip_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert flops.chip_peak_flops("NVIDIA H200") == 989e12
    assert flops.chip_peak_flops("NVIDIA A100-SXM4-40GB") == 312e12
    assert flops.chip_peak_flops("TPU v5") == 459e12
    assert flops.chip_peak_flops("TPU v5 lite") is None  # v5e is not in the table
    assert flops.chip_peak_flops("TPU v6 lite") == 918e12
    assert flops.chip_peak_flops("TPU7x") == 2307e12
    assert flops.measure_cpu_peak(size=256, repeats=2) > 1e8


def test_preflight_compares_a_matmul_with_numpy():
    result = check_matmul(size=64)
    assert result.ok and result.max_abs_error < 1e-5
    assert not check_matmul(size=64, tolerance=0.0).ok or result.max_abs_error == 0.0


def test_yaml_and_toml_configs(tmp_path):
    (tmp_path / "a.yaml").write_text("preset: demo\nsteps: 12\nmodel: tiny\noptim: {lr: 0.001}\n"
                                     "data: {corpus: {sources: [x.txt]}}\n")
    cfg = load(str(tmp_path / "a.yaml"))
    assert cfg.steps == 12 and cfg.model == PRESETS["tiny"].model and cfg.optim.lr == 0.001
    assert cfg.data.corpus.sources == ("x.txt",) and cfg.data.data_hosts == PRESETS["demo"].data.data_hosts
    (tmp_path / "b.toml").write_text("steps = 5\n[fault]\nname = 'nan'\nat_step = 3\n")
    cfg = load(str(tmp_path / "b.toml"))
    assert cfg.fault.name == "nan" and cfg.fault.at_step == 3
    (tmp_path / "c.yaml").write_text("optim: {learning_rate: 1}\n")
    with pytest.raises(GapwatchError, match="unknown setting 'learning_rate'"):
        load(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("steps: many\n")
    with pytest.raises(GapwatchError, match="expected int"):
        load(str(tmp_path / "d.yaml"))
    with pytest.raises(GapwatchError, match="neither a preset"):
        load("nope")


def test_supervisor_restarts_with_backoff_until_success(tmp_path):
    counter = tmp_path / "n"
    script = ("import os, sys, pathlib; p = pathlib.Path(sys.argv[1]); n = int(p.read_text() or 0) "
              "if p.exists() else 0; p.write_text(str(n + 1)); "
              "os.kill(os.getpid(), 9) if n < 2 else sys.exit(0)")
    said = []
    code = supervise([sys.executable, "-c", script, str(counter)],
                     SupervisorConfig(backoff_s=0.01, backoff_factor=2.0), say=said.append,
                     restart_flag="--ignored")
    assert code == 0 and counter.read_text() == "3"
    assert len(said) == 2 and "code 137" in said[0]
    assert SupervisorConfig(backoff_s=1, backoff_factor=2, max_backoff_s=5).delay(10) == 5
    assert exit_code(-9) == 137


def test_supervisor_stops_on_user_errors_and_after_max_restarts(tmp_path):
    said = []
    assert supervise([sys.executable, "-c", "raise SystemExit(2)"], say=said.append) == 2
    assert "user error" in said[0]
    assert supervise([sys.executable, "-c", "raise SystemExit(3)"],
                     SupervisorConfig(max_restarts=2, backoff_s=0.01), say=said.append) == 3
    assert "giving up" in said[-1]


def test_train_command_reports_a_bad_config_in_one_line(tmp_path, caches):
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: tiny\ndata: {global_batch_size: 6}\n")  # tiny has 8 data hosts
    done = subprocess.run(cli("--config", str(bad), "--no-monitor", "--run-dir", str(tmp_path / "r")),
                          env=cli_env(caches), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("gapwatch train: error:")]
    assert lines == ["gapwatch train: error: global_batch_size 6 is not a multiple of data_hosts 8"]
