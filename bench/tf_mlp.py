"""One worker of bench/tf.sh: a Keras MLP (784-512-256-10, ReLU, SGD) on synthetic
data, 64 samples per worker per step, trained with model.fit either with
chorus.tensorflow.keras.DistributedOptimizer (--mode chorus, under chorus-run) or under
tf.distribute.MultiWorkerMirroredStrategy (--mode mwms, TF_CONFIG set by the caller).
Prints one line on the first worker: "<mode> <samples/s> <steps> <seconds>", the rate of the
steps after the warm-up ones, counted over every worker."""

import argparse
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["chorus", "mwms"], required=True)
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--batch", type=int, default=64, help="samples per worker per step")
args = ap.parse_args()


def mlp():
    return tf.keras.Sequential([
        tf.keras.layers.Dense(512, activation="relu", input_shape=(784,)),
        tf.keras.layers.Dense(256, activation="relu"),
        tf.keras.layers.Dense(10)])


rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 784)).astype(np.float32)
y = rng.integers(0, 10, 4096).astype(np.int64)
loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

if args.mode == "chorus":
    import chorus.tensorflow.keras as hvd
    hvd.init()
    workers, first = hvd.size(), hvd.rank() == 0
    model = mlp()
    model.compile(loss=loss, optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)))
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    first = strategy.cluster_resolver.task_id == 0
    with strategy.scope():
        model = mlp()
        model.compile(loss=loss, optimizer=tf.keras.optimizers.SGD(0.01))
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(
        args.batch * workers).with_options(opts)  # the global batch: 64 per worker
    callbacks = []


class Clock(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == args.warmup - 1:
            self.t0 = time.perf_counter()

    def on_train_end(self, logs=None):
        self.dt = time.perf_counter() - self.t0


clock = Clock()
model.fit(data, steps_per_epoch=args.warmup + args.steps, epochs=1, verbose=0,
          callbacks=callbacks + [clock])
if first:
    print("%s %.1f %d %.3f" % (args.mode, args.steps * args.batch * workers / clock.dt,
                               args.steps, clock.dt), flush=True)
