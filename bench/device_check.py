"""The checks of scripts/device_check.sh, one per subcommand, each printing what it measured.

    python -m bench.device_check jax|hf|lightning|values [--steps N] [--device auto|cpu|cuda]

- jax: our JAX trainer's demo preset with monitoring off and on (after a compiling run), tokens/s,
  MFU against the device's peak (trainer/flops.py), and the monitoring overhead.
- hf / lightning: a tiny Hugging Face Trainer / Lightning loop on the device, logging every step,
  without and with gapwatch's integration; the median step time of each and the overhead.
- values: CUDA tensors through Monitor.log: stored as they were at the call though updated in place
  right after it, with torch.cuda.synchronize and Tensor.item never called on the training thread.

Each prints "<check>: <device>: ..." lines; a check that cannot run says why in one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


def jax_check(steps: int, tmp: Path) -> None:
    import jax

    from trainer import flops
    from trainer.config import PRESETS
    from trainer.loop import RunOptions, train

    base = PRESETS["demo"]
    config = base.replace(steps=steps, checkpoint_every=10 * steps, gc_every=0, preflight=False,
                          evals=dataclasses.replace(base.evals, heldout_every=0))
    device = jax.devices()[0]

    def run(monitor: bool, name: str) -> float:
        options = RunOptions(run=name, store=f"sqlite:///{tmp / 'jax.db'}", run_dir=tmp / name,
                             monitor=monitor, console_every=0)
        return statistics.median(train(config, options).step_times)

    run(False, "compile")  # builds the corpus cache and compiles the step
    off, on = run(False, "off"), run(True, "on")
    tokens_per_s = config.tokens_per_step / on
    peak = flops.peak_flops(jax.devices(), jax.process_count())
    per_token = flops.flops_per_token(config.model, config.model.max_seq_len)
    mfu = f"{per_token * tokens_per_s / peak:.1%}" if peak else "unknown (no peak for this device)"
    print(f"jax: {device.platform} ({device.device_kind}), demo preset, {steps} steps: "
          f"{tokens_per_s:,.0f} tokens/s with monitoring, MFU {mfu}; median step {off * 1e3:.2f} ms off, "
          f"{on * 1e3:.2f} ms on: overhead {100 * (on / off - 1):+.2f}%")


class StepClock:
    """Wall time between consecutive optimizer steps, from the framework's own step hook."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def tick(self) -> None:
        self.times.append(time.perf_counter())

    def median_step(self, skip: int = 3) -> float:
        gaps = [b - a for a, b in zip(self.times, self.times[1:])][skip:]
        return statistics.median(gaps)


def hf_check(steps: int, device: str, tmp: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from monitor.integrations.transformers import GapwatchCallback

    clock_cls = StepClock

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.clock = clock_cls()

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.tick()

    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 256, (steps * 8, 64))]

    def run(gapwatch: bool) -> float:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                             max_position_embeddings=64))
        args = TrainingArguments(output_dir=str(tmp / f"hf-{gapwatch}"), max_steps=steps, per_device_train_batch_size=8,
                                 logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
                                 use_cpu=device == "cpu")
        clock = Clock()
        callbacks = [clock] + ([GapwatchCallback("hf", f"sqlite:///{tmp / 'hf.db'}")] if gapwatch else [])
        Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks).train()
        return clock.clock.median_step()

    off, on = run(False), run(True)
    print(f"hf: {device}: tiny Llama, {steps} steps logging each: median step {off * 1e3:.2f} ms without "
          f"gapwatch, {on * 1e3:.2f} ms with: overhead {100 * (on / off - 1):+.2f}%")


def lightning_check(steps: int, device: str, tmp: Path) -> None:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from monitor.integrations.lightning import GapwatchLogger

    class Model(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1))

        def training_step(self, batch, index):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.clock = StepClock()

        def on_train_batch_end(self, trainer, module, outputs, batch, index):
            self.clock.tick()

    x = torch.randn(steps * 64, 256)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=64)

    def run(gapwatch: bool) -> float:
        torch.manual_seed(0)
        clock = Clock()
        logger = GapwatchLogger("lightning", f"sqlite:///{tmp / 'pl.db'}") if gapwatch else False
        trainer = L.Trainer(max_steps=steps, log_every_n_steps=1, logger=logger, callbacks=[clock],
                            accelerator="gpu" if device == "cuda" else "cpu", devices=1, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(tmp))
        trainer.fit(Model(), loader)
        return clock.clock.median_step()

    off, on = run(False), run(True)
    print(f"lightning: {device}: MLP, {steps} steps logging each: median step {off * 1e3:.2f} ms without "
          f"gapwatch, {on * 1e3:.2f} ms with: overhead {100 * (on / off - 1):+.2f}%")


def values_check(steps: int, device: str, tmp: Path) -> None:
    import torch

    from monitor.client import Monitor
    from monitor.store import open_store

    if device != "cuda":
        print("values: no CUDA device here: the CUDA copy path is checked only on a GPU "
              "(tests/monitor/client/test_device_values.py covers it with a faked runtime)")
        return
    training = threading.current_thread()
    on_training_thread: list[str] = []

    def guard(name, original):
        def guarded(*args, **kwargs):
            if threading.current_thread() is training:
                on_training_thread.append(name)
            return original(*args, **kwargs)
        return guarded

    torch.cuda.synchronize = guard("torch.cuda.synchronize", torch.cuda.synchronize)
    torch.Tensor.item = guard("Tensor.item", torch.Tensor.item)
    big = torch.randn(4096, 4096, device="cuda")
    value = torch.zeros((), device="cuda")
    expected = []
    costs = []
    with Monitor("values", store=f"sqlite:///{tmp / 'values.db'}") as mon:
        for step in range(steps):
            (big @ big).sum()  # queued work ahead of the copy, so it is still pending after log()
            value.fill_(float(step))
            metrics = {f"train/m{i}": value * (i + 1) for i in range(9)} | {"train/loss": value}
            started = time.perf_counter_ns()
            mon.log(step, metrics)
            costs.append((time.perf_counter_ns() - started) / 1000)
            value.add_(1000.0)  # in place, right after the call
            expected.append(float(step))
    with open_store(f"sqlite:///{tmp / 'values.db'}") as store:
        stored = store.load_run("values").scalars["train/loss"].tolist()
    ok = stored == expected and not on_training_thread
    print(f"values: cuda ({torch.cuda.get_device_name()}): {'OK' if ok else 'FAIL'}: {steps} calls of 10 CUDA "
          f"tensors, stored as at the call: {stored == expected}; syncs/item on the training thread: "
          f"{sorted(set(on_training_thread)) or 'none'}; log() median {statistics.median(costs):.1f} us, "
          f"p99 {sorted(costs)[int(0.99 * len(costs))]:.1f} us")
    if not ok:
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.device_check")
    parser.add_argument("check", choices=["jax", "hf", "lightning", "values"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = parser.parse_args(argv)
    device = args.device
    if device == "auto" and args.check != "jax":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        if args.check == "jax":
            jax_check(args.steps, Path(tmp))
        elif args.check == "hf":
            hf_check(args.steps, device, Path(tmp))
        elif args.check == "lightning":
            lightning_check(args.steps, device, Path(tmp))
        else:
            values_check(args.steps, device, Path(tmp))


if __name__ == "__main__":
    main()
