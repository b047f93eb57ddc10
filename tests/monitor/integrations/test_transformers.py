"""The Hugging Face integration on a real `transformers.Trainer`: a tiny randomly initialised Llama on
CPU, 30 steps, logging every 5, evaluating and saving every 10; then resumed from its checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from monitor.client import MonitorSettings
from monitor.importers import import_source
from monitor.integrations.transformers import GapwatchCallback
from monitor.store import open_store

from .pair_checks import checkpoints_and_repeats, detect_needs_no_mapping

VOCAB, LENGTH, BATCH = 32, 16, 4


def records(n: int, seed: int, learnable: bool) -> list[dict]:
    """Counting sequences (a pattern the model learns in a few steps) or uniform noise."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if learnable:
            ids = (torch.randint(0, VOCAB, (1,), generator=gen) + torch.arange(LENGTH)) % VOCAB
        else:
            ids = torch.randint(0, VOCAB, (LENGTH,), generator=gen)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out


def trainer(callback: GapwatchCallback, output_dir, learnable: bool, eval_dataset) -> Trainer:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         max_position_embeddings=LENGTH))
    args = TrainingArguments(output_dir=str(output_dir), max_steps=30, per_device_train_batch_size=BATCH,
                             learning_rate=3e-3, logging_steps=5, eval_strategy="steps", eval_steps=10,
                             save_steps=10, report_to="none", use_cpu=True, disable_tqdm=True, seed=0)
    return Trainer(model=model, args=args, train_dataset=records(200, 1, learnable), eval_dataset=eval_dataset,
                   callbacks=[callback])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A reference run on learnable data with two named eval sets, a candidate on noise with one
    eval set, and the candidate resumed from its step-20 checkpoint."""
    root = tmp_path_factory.mktemp("hf")
    url = f"sqlite:///{root / 'store.db'}"

    def callback(run: str, reference: str | None = None) -> GapwatchCallback:
        return GapwatchCallback(run, url, reference=reference, sequence_length=LENGTH,
                                settings=MonitorSettings(spool_dir=root / "spool", flush_interval_s=0.2))

    trainer(callback("ref"), root / "ref", True,
            {"eval": records(8, 2, True), "wiki": records(8, 3, True)}).train()
    trainer(callback("cand", reference="ref"), root / "cand", False, records(8, 2, False)).train()
    trainer(callback("cand", reference="ref"), root / "cand", False, records(8, 2, False)).train(
        resume_from_checkpoint=str(root / "cand" / "checkpoint-20"))
    return url, root


def test_the_trainer_s_names_land_at_its_global_steps(runs):
    url, root = runs
    with open_store(url) as store:
        cand = store.load_run("cand")
        ref = store.load_run("ref")
        info = store.get_run("cand")
    logged = cand.scalars
    assert logged["train/loss"].dropna().index.tolist() == [5, 10, 15, 20, 25, 30]
    assert logged["eval/heldout/eval/loss"].dropna().index.tolist() == [10, 20, 30]
    lr = logged["optim/lr"].dropna()
    assert lr.index.tolist() == [5, 10, 15, 20, 25, 30] and lr.is_monotonic_decreasing and lr.iloc[0] < 3e-3
    assert logged["train/grad_norm"].notna().sum() == 6 and logged["data/epoch"].iloc[-1] == pytest.approx(0.6)
    # The end-of-training summary (train_loss, train_runtime, ...) and eval timings are not series.
    assert set(logged.columns) == {"train/loss", "train/grad_norm", "optim/lr", "data/epoch",
                                   "eval/heldout/eval/loss"}
    # A dict of eval datasets: each set under its own name.
    assert ref.scalars["eval/heldout/wiki/loss"].dropna().index.tolist() == [10, 20, 30]
    assert ref.scalars["train/loss"].iloc[-1] < logged["train/loss"].iloc[-1] - 0.3
    config = info["config"]
    assert (config["global_batch_size"], config["records_per_epoch"], config["tokens_per_step"]) == (BATCH, 200, 64)
    assert info["tokens_per_step"] == 64 and info["reference"] == "ref"


def test_each_save_is_a_checkpoint_event_and_a_resume_is_a_new_attempt(runs):
    url, root = runs
    events = checkpoints_and_repeats(url)
    checkpoints = events[events["kind"] == "checkpoint"]
    assert checkpoints["payload"].iloc[0]["path"] == os.path.join(str(root / "cand"), "checkpoint-10")
    resume = events[events["kind"] == "resume"]
    assert list(zip(resume["step"], resume["attempt"])) == [(20, 2)]


def test_detect_judges_the_run_against_its_reference_without_a_mapping(runs):
    detect_needs_no_mapping(runs[0])


def test_a_reference_read_from_another_trainers_checkpoint_pairs_by_name(runs):
    # Someone else's run of the same Trainer is often only its checkpoint's trainer_state.json:
    # imported as it is, its sets and losses pair with the callback's without a mapping.
    url, root = runs
    with open_store(url) as store:
        import_source(store, "ref-file", root / "ref" / "checkpoint-30" / "trainer_state.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "app", "detect", "--run", "cand", "--reference", "ref-file",
                           "--store", url, "--no-write"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "held-out loss against the reference (eval/heldout/all): not judged, 3 paired checkpoint(s)" in done.stderr
