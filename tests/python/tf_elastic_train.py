"""An elastic Keras training script (Horovod's style: KerasState, hvd.elastic.run, Model.fit
with DistributedOptimizer), run by test_tensorflow_elastic.py under `chorus-run --elastic`.
Each epoch is one fit of two steps over this rank's rows of the data, then a commit. Worker
CHORUS_TEST_DIE_WORKER (if set) dies in the first generation after the first step of epoch
DIE_EPOCH: the others have applied that step, lose it in the second and go on from the last
commit (which they must restore: the step applied since is not in it). serial() is the same
training in one process over all rows (what the ranks' averaged gradients compute)."""
import os

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow as tf  # noqa: E402

EPOCHS, DIE_EPOCH = 8, 4
rng = np.random.default_rng(1)
X = rng.standard_normal((48, 4)).astype(np.float32)
Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype=np.float32) + 1.0


def make_model(wrap=lambda opt: opt):
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    model.build((None, 4))
    opt = wrap(tf.keras.optimizers.SGD(0.05, momentum=0.5))
    model.compile(loss="mse", optimizer=opt)
    return model, opt


def flat(variables):
    return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in variables])


def serial():
    """The weights after EPOCHS steps over all of X in one process."""
    model, _ = make_model()
    model.fit(X, Y, batch_size=len(X) // 2, epochs=EPOCHS, shuffle=False, verbose=0)
    return flat(model.variables)


def main():
    import chorus.tensorflow.keras as hvd

    hvd.init()
    model, opt = make_model(hvd.DistributedOptimizer)
    state = hvd.elastic.KerasState(model, epoch=0)
    die = os.environ.get("CHORUS_TEST_DIE_WORKER")

    def on_reset():
        print("reset: generation %d rank %d of %d at epoch %d"
              % (hvd.elastic.generation(), hvd.rank(), hvd.size(), state.epoch), flush=True)

    state.register_reset_callbacks([on_reset])

    def after_step(batch, logs):
        if (die is not None and batch == 0 and state.epoch == DIE_EPOCH - 1 and
                hvd.elastic.generation() == 1 and os.environ.get("CHORUS_WORKER_ID") == die):
            os._exit(7)  # dies without a word after a step that every rank applied
    dying = tf.keras.callbacks.LambdaCallback(on_train_batch_end=after_step)

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            r, n = hvd.rank(), hvd.size()
            model.fit(X[r::n], Y[r::n], batch_size=len(X[r::n]) // 2, epochs=1,
                      shuffle=False, verbose=0, callbacks=[dying])
            state.epoch += 1
            state.commit()
        mine = flat(model.variables + list(opt.variables))  # the weights and SGD's momentum
        everyone = hvd.allgather(mine[None, :])
        same = all(np.array_equal(everyone[i], mine) for i in range(hvd.size()))
        return hvd.size(), same, flat(model.variables)

    size, same, weights = train(state)
    print("done: epoch %d size %d same %s iterations %d weights %s"
          % (state.epoch, size, same, int(opt.iterations.numpy()),
             " ".join("%.9g" % w for w in weights)), flush=True)


if __name__ == "__main__":
    main()
