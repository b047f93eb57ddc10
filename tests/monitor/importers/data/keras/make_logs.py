"""Writes the Keras TensorBoard folders beside this file with the real Keras (3.15, TensorFlow
2.21 CPU; not installed by `make test`, whose tests read the folders as written):

    pip install tensorflow-cpu tensorboard && python make_logs.py

* `per_epoch/`: the callback's defaults (update_freq="epoch"), validation after every epoch;
* `every5_val2/`: update_freq=5, validation after every second epoch;
* `resumed/`: update_freq="batch"; the process is killed 10 batches into its third epoch, and a
  new one loads the checkpoint saved after the second epoch and goes on with initial_epoch=2.

Each fit() is 4 epochs of 20 batches of 32 (640 training rows, 160 held out).
"""

import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).parent
rng = np.random.default_rng(0)
x = rng.random((800, 8), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) + 0.1 * rng.random((800, 1), dtype=np.float32)).astype(np.float32)


def model() -> keras.Model:
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    return m


class Killed(Exception):
    pass


class KillAt(keras.callbacks.Callback):
    """Stands in for a preempted process: raises after `batch` batches of `epoch`."""

    def __init__(self, epoch: int, batch: int) -> None:
        super().__init__()
        self.epoch, self.batch, self.now = epoch, batch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.now = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.now == self.epoch and batch + 1 == self.batch:
            raise Killed


def fit(m, folder, epochs=4, initial_epoch=0, extra=(), **tensorboard):
    m.fit(x, y, batch_size=32, epochs=epochs, initial_epoch=initial_epoch, validation_split=0.2, verbose=0,
          validation_freq=tensorboard.pop("validation_freq", 1),
          callbacks=[keras.callbacks.TensorBoard(str(HERE / folder), **tensorboard), *extra])


def main() -> None:
    for folder in ("per_epoch", "every5_val2", "resumed"):
        shutil.rmtree(HERE / folder, ignore_errors=True)
    fit(model(), "per_epoch")
    fit(model(), "every5_val2", update_freq=5, validation_freq=2)
    checkpoint = HERE / "resumed.keras"
    first = model()
    try:
        fit(first, "resumed", update_freq="batch",
            extra=[KillAt(2, 10), keras.callbacks.ModelCheckpoint(str(checkpoint))])
    except Killed:
        pass
    fit(keras.models.load_model(checkpoint), "resumed", initial_epoch=2, update_freq="batch")
    checkpoint.unlink()


if __name__ == "__main__":
    main()
