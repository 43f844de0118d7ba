"""Train the course's forecasting model on one worker.

    python scripts/train_single.py --epochs 5 --batch-size 64 --lr 0.001

Prints one line per epoch and, at the end, a line `RESULT {json}` with the losses and throughput.
Checkpoints after every epoch to --checkpoint-dir and resumes from the last one if it exists.
"""
import argparse
import json
import os
import time

import keras
import numpy as np

from utils import data, model

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--optimizer", default="adam")
parser.add_argument("--width", type=int, default=128)
parser.add_argument("--depth", type=int, default=2)
parser.add_argument("--data-size", type=int, default=0, help="hours of synthetic data; 0 = the course dataset")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--checkpoint-dir", default="")
args = parser.parse_args()

values = data.synthetic_series(args.data_size, seed=args.seed) if args.data_size else \
    data.load_series()["temperature_f"].to_numpy()
splits = data.prepare(values)
x_train, y_train = splits.x_train, splits.y_train
train = data.to_dataset(x_train, y_train, args.batch_size, shuffle=True, seed=args.seed)
val = data.to_dataset(splits.x_val, splits.y_val, 1024)

net = model.build_forecaster(width=args.width, depth=args.depth, seed=args.seed)
model.compile_forecaster(net, learning_rate=args.lr, optimizer=args.optimizer)

callbacks, initial_epoch = [], 0
if args.checkpoint_dir:
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    last = os.path.join(args.checkpoint_dir, "last.keras")
    if os.path.exists(last):
        net = keras.models.load_model(last)
        initial_epoch = json.load(open(last + ".json"))["epoch"]
        print(f"resuming after epoch {initial_epoch}", flush=True)

    class Checkpoint(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            self.model.save(last + ".tmp.keras")
            os.replace(last + ".tmp.keras", last)  # a crash mid-save never leaves a broken checkpoint
            json.dump({"epoch": epoch + 1}, open(last + ".json", "w"))
            with open(last + ".history.jsonl", "a") as f:  # every epoch's losses, across restarts
                f.write(json.dumps({"epoch": epoch + 1, "loss": logs["loss"], "val_loss": logs["val_loss"]}) + "\n")

    callbacks.append(Checkpoint())


class EpochLine(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.trained = time.perf_counter()  # end of training in this epoch (validation comes after)

    def on_epoch_end(self, epoch, logs=None):
        seconds = self.trained - self.start
        logs["samples_per_s"] = len(x_train) / seconds
        print(f"epoch {epoch + 1}/{args.epochs}: loss {logs['loss']:.4f} val_loss {logs['val_loss']:.4f} "
              f"({logs['samples_per_s']:.0f} samples/s)", flush=True)


history = net.fit(train, validation_data=val, epochs=args.epochs, initial_epoch=initial_epoch,
                  callbacks=callbacks + [EpochLine()], verbose=0, shuffle=False)
print("RESULT " + json.dumps({
    "rank": 0, "size": 1, "loss": history.history["loss"], "val_loss": history.history["val_loss"],
    "samples_per_s": history.history["samples_per_s"],
    "weights_checksum": float(sum(np.abs(w).sum() for w in net.get_weights())),
}), flush=True)
