"""The Hugging Face Trainer's trainer_state.json, written by a real `transformers.Trainer` (a tiny
randomly initialised Llama on CPU, 30 steps, logging every 5, two eval sets every 10, a checkpoint
every 10): read from the file, a checkpoint folder or the output folder, on the Trainer's global
step, with the meanings a W&B run of the same Trainer gets."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from monitor import schema
from monitor.errors import GapwatchError
from monitor.importers import detect_format, load

VOCAB, LENGTH = 32, 16


def _records(n: int, seed: int) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = (torch.randint(0, VOCAB, (1,), generator=gen) + torch.arange(LENGTH)) % VOCAB
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The output folder and the Trainer's own log history."""
    out = tmp_path_factory.mktemp("hf-out")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=LENGTH))
    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=30, per_device_train_batch_size=4, learning_rate=3e-3, logging_steps=5,
        eval_strategy="steps", eval_steps=10, save_steps=10, report_to="none", use_cpu=True, disable_tqdm=True,
        seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_records(200, 1),
                                   eval_dataset={"val": _records(8, 2), "wiki": _records(8, 3)})
    trainer.train()
    return out, trainer.state.log_history


def test_a_checkpoints_state_reads_on_the_global_step_with_hf_meanings(trained):
    out, history = trained
    path = out / "checkpoint-30" / "trainer_state.json"
    assert detect_format(path) == "hf-trainer-state"
    run = load(path)
    assert run.profile == "hf"
    data = run.to_run_data("hf")
    loss = data.series(schema.TRAIN_LOSS)
    assert list(loss.index) == [5, 10, 15, 20, 25, 30]
    logged = {e["step"]: e["loss"] for e in history if "loss" in e}
    assert loss.to_dict() == pytest.approx(logged)
    for held in ("val", "wiki"):
        assert list(data.series(schema.heldout_key(held)).index) == [10, 20, 30]
    lr = data.series(schema.OPTIM_LR)
    assert lr.is_monotonic_decreasing and lr.iloc[0] < 3e-3
    assert data.series(schema.TRAIN_GRAD_NORM).notna().sum() == 6
    # Eval timings are no series of the model.
    assert not any("runtime" in k or "per_second" in k for k in data.scalars.columns)
    assert run.config["max_steps"] == 30 and run.config["eval_steps"] == 10
    # The model saved beside the state: its architecture is part of the run's settings.
    model = run.config["model"]
    assert (model["hidden_size"], model["num_hidden_layers"], model["architectures"]) == (16, 1, ["LlamaForCausalLM"])
    assert run.attempts == 1 and not run.events
    assert run.name_hint == out.name  # the output folder's name, not the checkpoint's


def test_two_models_differ_in_the_settings_diff_and_an_unreadable_model_config_costs_only_itself(trained, tmp_path):
    import shutil

    from monitor.judging.settings_diff import compare_settings

    out, _ = trained
    other = tmp_path / "checkpoint-30"
    shutil.copytree(out / "checkpoint-30", other, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.pt"))
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 32, "_name_or_path": str(other)}))
    differs = [(d.setting, d.run, d.reference) for d in compare_settings(load(out / "checkpoint-30").config,
                                                                        load(other).config).differences]
    assert differs == [("model.hidden_size", "16", "32")]
    (other / "config.json").write_text("{not json")
    broken = load(other)
    assert "model" not in broken.config and broken.config["max_steps"] == 30
    assert any("config.json: the model's settings cannot be read" in n for n in broken.notes)


def test_a_checkpoint_folder_and_the_output_folder(trained):
    out, _ = trained
    early = load(out / "checkpoint-20").to_run_data("early")
    assert early.series(schema.TRAIN_LOSS).index[-1] == 20
    assert detect_format(out) == "hf-trainer-state"
    run = load(out)
    assert run.to_run_data("whole").series(schema.TRAIN_LOSS).index[-1] == 30
    assert any("checkpoint-30/trainer_state.json" in n for n in run.notes)


def test_odd_entries_cost_only_themselves(tmp_path):
    state = {"global_step": 20, "log_history": [
        {"loss": 3.0, "learning_rate": 1e-3, "step": 10},
        {"loss": 2.5, "step": "20"},                       # a step that is not an integer
        {"loss": 2.4, "note": "resumed", "step": 20},       # a value that is not a number
        {"eval_loss": 2.6, "eval_runtime": 1.0, "step": 20},
        "not an entry",
    ]}
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state))
    run = load(path)
    data = run.to_run_data("odd")
    assert data.series(schema.TRAIN_LOSS).to_dict() == {10: 3.0, 20: 2.4}
    assert data.series("eval/heldout/eval/loss").to_dict() == {20: 2.6}
    notes = " ".join(run.notes)
    assert "2 log_history entries without a step" in notes and "'note' is not a number" in notes


@pytest.mark.parametrize("text,message", [
    ('{"log_history": {"step": 1}}', "no log_history list"),
    ('{"log_history": [{"epoch": 1.0}]}', "holds no numbers at a step"),
    ('{"log_history": [', "not a readable JSON document"),
    ('{"log_history": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
    ('{"log_history": [{"loss": 1e999, "step": 1}]}', "does not fit a 64-bit float"),
])
def test_a_state_with_nothing_to_read_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    with pytest.raises(GapwatchError, match=message):
        load(path)


def test_the_final_results_file_points_to_the_state(tmp_path):
    path = tmp_path / "all_results.json"
    path.write_text(json.dumps({"epoch": 3.0, "eval_loss": 2.1, "train_loss": 2.3, "train_runtime": 812.5}))
    with pytest.raises(GapwatchError, match="final results .* import the trainer_state.json"):
        load(path)
