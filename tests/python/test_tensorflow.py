"""chorus.tensorflow and chorus.tensorflow.keras (Horovod's TensorFlow and Keras 2 API):
collectives eagerly and inside tf.function, their gradients, the error a user sees for
mismatched tensors, DistributedGradientTape, and Keras training with DistributedOptimizer and
the callbacks ending with the same weights on every rank. Runs with a Python that has
tensorflow-cpu and tf-keras (make check-tensorflow)."""

import numpy as np
import pytest
import tensorflow as tf

import chorus.tensorflow as hvd
import chorus.tensorflow.keras as hvdk

hvd.init()
R, N = hvd.rank(), hvd.size()


def ranks_agree(arrays):
    """True when every rank holds the same bits in arrays (compared through allgather)."""
    flat = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    g = hvd.allgather(tf.constant(flat[None, :])).numpy()
    return all(np.array_equal(g[0], g[i]) for i in range(N))


def both_modes(fn, *args):
    """fn(*args) eagerly and inside a tf.function: the two results."""
    return fn(*args), tf.function(fn)(*args)


@pytest.mark.parametrize("dtype", [tf.int8, tf.uint8, tf.int32, tf.int64, tf.float16,
                                   tf.float32, tf.float64, tf.bfloat16])
def test_allreduce_ops_and_dtypes(dtype):
    base = np.arange(6).reshape(2, 3) % 4
    x = tf.constant(base + R, dtype=dtype)
    per = np.stack([base + r for r in range(N)]).astype(np.float64)
    for op, want in ((hvd.Sum, per.sum(0)), (hvd.Min, per.min(0)), (hvd.Max, per.max(0)),
                     (hvd.Product, per.prod(0))):
        for got in both_modes(lambda t, op=op: hvd.allreduce(t, op=op), x):
            assert got.dtype == dtype and got.shape == (2, 3)
            np.testing.assert_array_equal(tf.cast(got, tf.float64).numpy(), want)
    if dtype.is_floating:
        for got in both_modes(hvd.allreduce, x):  # Average is the default
            np.testing.assert_allclose(tf.cast(got, tf.float64).numpy(), per.mean(0),
                                       rtol=1e-2)


def test_scaling_and_fp16_compression():
    x = tf.constant([1.0, 2.0, 3.0]) * (R + 1)
    total = sum(r + 1 for r in range(N))
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    np.testing.assert_allclose(got.numpy(), np.array([1, 2, 3]) * total * 1.5, rtol=1e-6)
    got = tf.function(lambda t: hvd.allreduce(t, compression=hvd.Compression.fp16))(x)
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), np.array([1, 2, 3]) * total / N, rtol=1e-3)


def test_grouped_allgather_broadcast_alltoall_reducescatter():
    xs = [tf.fill([3], float(R)), tf.fill([2, 2], R + 1)]
    for got in both_modes(lambda a, b: hvd.grouped_allreduce([a, b], op=hvd.Sum), *xs):
        np.testing.assert_array_equal(got[0].numpy(), [sum(range(N))] * 3)
        np.testing.assert_array_equal(got[1].numpy(), np.full((2, 2), sum(range(1, N + 1))))
        assert got[1].dtype == tf.int32
    rows = tf.fill([R + 1, 2], R)  # uneven first dimension
    want = np.array([[r, r] for r in range(N) for _ in range(r + 1)])
    for got in both_modes(hvd.allgather, rows):
        np.testing.assert_array_equal(got.numpy(), want)
    for got in both_modes(lambda t: hvd.broadcast(t, N - 1), tf.constant([R, R])):
        np.testing.assert_array_equal(got.numpy(), [N - 1, N - 1])
    splits = [1] * N
    splits[0] += 1  # rank j gets splits[j] rows from every rank
    data = tf.constant([100 * R + i for i in range(N + 1)])
    for out, recv in both_modes(lambda t: hvd.alltoall(t, splits=splits), data):
        np.testing.assert_array_equal(recv.numpy(), [splits[R]] * N)
        first = 0 if R == 0 else R + 1
        np.testing.assert_array_equal(
            out.numpy(), [100 * r + i for r in range(N) for i in range(first, first + splits[R])])
    x = tf.constant(np.arange(2 * N, dtype=np.float32).reshape(2 * N, 1) * (R + 1))
    for got in both_modes(lambda t: hvd.reducescatter(t, op=hvd.Sum), x):
        want = np.arange(2 * N, dtype=np.float32).reshape(2 * N, 1) * sum(range(1, N + 1))
        np.testing.assert_array_equal(got.numpy(), want[2 * R:2 * R + 2])


def test_gradients_of_the_collectives():
    v = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        s = tf.reduce_sum(hvd.allreduce(v * (R + 1), op=hvd.Sum))
        g = tf.reduce_sum(hvd.allgather(v * (R + 1)))
        b = tf.reduce_sum(hvd.broadcast(v, 0))
        rs = tf.reduce_sum(hvd.reducescatter(tf.reshape(tf.tile(v, [N]), [N, 3]), op=hvd.Sum))
    # Horovod's definitions: allreduce's gradient is the same allreduce of the gradients
    # (here N ones), allgather's this rank's rows of the average of every rank's gradient,
    # broadcast's that average on the root and zeros elsewhere, reducescatter's (Sum) the
    # allgathered gradient times the size; then times (R+1) for v * (R+1).
    np.testing.assert_array_equal(tape.gradient(s, v).numpy(), [(R + 1) * N] * 3)
    np.testing.assert_array_equal(tape.gradient(g, v).numpy(), [R + 1] * 3)
    np.testing.assert_array_equal(tape.gradient(b, v).numpy(), [1 if R == 0 else 0] * 3)
    np.testing.assert_array_equal(tape.gradient(rs, v).numpy(), [N * N] * 3)


def test_mismatched_shapes_fail_on_every_rank_naming_them():
    x = tf.zeros([3 + R])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="ranks disagree: count .* 3 on rank 0 but 4 on rank 1"):
        hvd.allreduce(x, name="mismatched")
    # in a graph too (the op library's ChorusCheck raises the error class)
    with pytest.raises(tf.errors.FailedPreconditionError, match="ranks disagree: count"):
        tf.function(lambda t: hvd.allreduce(t, name="mismatched.fn"))(x)
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError,
                           match="ranks disagree: dtype int32 on rank 0 but float32 on rank 1"):
            sess.run(hvd.allgather(tf.ones([2], tf.int32 if R == 0 else tf.float32)))
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy().tolist() == [N, N]  # still works


def test_process_set_objects_barrier_join():
    ps = hvd.add_process_set([0, 1])
    try:
        got = hvd.allreduce(tf.constant([R + 1.0]), op=hvd.Sum, process_set=ps)
        assert got.numpy().tolist() == [3.0]
    finally:
        hvd.remove_process_set(ps)
    assert hvd.broadcast_object({"a": R}, root_rank=1) == {"a": 1}
    assert hvd.allgather_object(R * 10) == [r * 10 for r in range(N)]
    hvd.barrier()
    if R == 0:
        last = hvd.join()
    else:
        hvd.allreduce(tf.ones([4]), op=hvd.Sum, name="while.joined")
        last = hvd.join()
    assert int(last) in range(N)


def _model(seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                tf.keras.layers.Dense(2)])


def test_distributed_gradient_tape_keeps_ranks_equal():
    model = _model(R)  # different initial weights on every rank
    opt = tf.keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(R)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = rng.standard_normal((16, 2)).astype(np.float32)

    @tf.function
    def step(first):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss
    model(x)
    for i in range(4):
        step(i == 0)
    assert ranks_agree(model.get_weights())


def test_keras_fit_with_callbacks_ends_with_the_same_weights():
    model = _model(R)
    opt = hvdk.DistributedOptimizer(tf.keras.optimizers.SGD(0.05 * N, momentum=0.9))
    model.compile(loss="mse", optimizer=opt)
    rng = np.random.default_rng(R)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = rng.standard_normal((64, 2)).astype(np.float32)
    lrs = []
    cbs = [hvdk.callbacks.BroadcastGlobalVariablesCallback(0),
           hvdk.callbacks.MetricAverageCallback(),
           hvdk.callbacks.LearningRateWarmupCallback(initial_lr=0.05 * N, warmup_epochs=2),
           tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: lrs.append(
               float(tf.keras.backend.get_value(model.optimizer.learning_rate))))]
    hist = model.fit(x, y, batch_size=16, epochs=3, callbacks=cbs, verbose=0)
    assert ranks_agree(model.get_weights())
    assert ranks_agree([hist.history["loss"]])  # averaged over the ranks
    # the warm-up's last batch of epoch 0 (4 batches): initial/N * (3/4 * (N-1)/2 + 1)
    np.testing.assert_allclose(lrs[0], 0.05 * N / N * (0.75 * (N - 1) / 2 + 1), rtol=1e-6)
    assert type(model.optimizer).__name__ == "SGD" and model.optimizer.get_config()[
        "momentum"] == pytest.approx(0.9)


def test_keras_aggregation_applies_every_second_step():
    v = tf.Variable([0.0])
    opt = hvdk.DistributedOptimizer(tf.keras.optimizers.SGD(1.0), backward_passes_per_step=2,
                                    average_aggregated_gradients=True)
    applied = -(N + 1) / 2.0  # the ranks' gradients R+1, averaged over passes and ranks
    for i, want in enumerate([0.0, applied, applied, 2 * applied]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * (R + 1))
        opt.apply_gradients(zip(tape.gradient(loss, [v]), [v]))
        assert v.numpy().tolist() == [want], (i, v.numpy())
        assert int(opt.iterations.numpy()) == i + 1


def test_sync_batch_normalization_is_batch_norm_over_every_rank_batch():
    """Rank r holds r + 2 rows of a batch (uneven): SyncBatchNormalization's output rows and
    moving statistics are those of BatchNormalization over the whole batch in one process,
    eagerly and in a tf.function; fused=True is refused with the reason."""
    rng = np.random.default_rng(7)
    sizes = [r + 2 for r in range(N)]
    full = rng.standard_normal((sum(sizes), 3, 2)).astype(np.float32) * 3 + 1
    start = sum(sizes[:R])
    mine = full[start:start + sizes[R]]
    for mode in ("eager", "function"):
        bn = tf.keras.layers.BatchNormalization(axis=-1, momentum=0.5)
        sbn = hvd.SyncBatchNormalization(axis=-1, momentum=0.5)
        bn.build(full.shape)
        sbn.build(mine.shape)
        run_bn, run_sbn = (lambda x: bn(x, training=True)), (lambda x: sbn(x, training=True))
        if mode == "function":
            run_bn, run_sbn = tf.function(run_bn), tf.function(run_sbn)
        for _ in range(2):  # the moving averages move twice
            want = run_bn(tf.constant(full)).numpy()[start:start + sizes[R]]
            got = run_sbn(tf.constant(mine)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sbn.moving_mean.numpy(), bn.moving_mean.numpy(), rtol=1e-5)
        np.testing.assert_allclose(sbn.moving_variance.numpy(), bn.moving_variance.numpy(),
                                   rtol=1e-5)
        # inference: the moving statistics, no collective
        np.testing.assert_allclose(sbn(tf.constant(mine), training=False).numpy(),
                                   bn(tf.constant(mine), training=False).numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="does not support fused=True"):
        hvd.SyncBatchNormalization(fused=True)


class _CustomRMSprop(tf.keras.optimizers.RMSprop):
    pass


@pytest.mark.parametrize("ext", [".h5", ".keras"])
def test_load_model_wraps_the_saved_optimizer(tmp_path, ext):
    """hvdk.load_model: the saved optimizer (Keras's own, or one of custom_optimizers) comes
    back as a DistributedOptimizer of its class with its saved variables; a step on each
    rank's own data then leaves the same weights on every rank."""
    for opt, custom in ((tf.keras.optimizers.RMSprop(0.01), None),
                        (_CustomRMSprop(0.02), [_CustomRMSprop])):
        model = _model(R)
        model.compile(loss="mse", optimizer=hvdk.DistributedOptimizer(opt))
        model.train_on_batch(np.ones((2, 4)), np.ones((2, 2)))
        path = str(tmp_path / ("model" + ext))
        model.save(path)
        loaded = hvdk.load_model(path, custom_optimizers=custom)
        new = loaded.optimizer
        assert type(new).__name__ == type(opt).__name__ and new._chorus_distributed
        assert isinstance(new, type(opt))
        np.testing.assert_allclose(float(new.learning_rate.numpy()),
                                   float(opt.learning_rate.numpy()))
        saved = [v.numpy() for v in model.optimizer.variables]
        assert len(saved) == len(new.variables) > 1
        for a, b in zip(saved, new.variables):
            np.testing.assert_array_equal(a, b.numpy())
        hvdk.broadcast_global_variables(0, model=loaded)
        rng = np.random.default_rng(R)
        loaded.train_on_batch(rng.standard_normal((8, 4)), rng.standard_normal((8, 2)))
        assert ranks_agree(loaded.get_weights())
