"""chorus.tensorflow's elastic API under `chorus-run --elastic`: a 2-rank Keras job
(tf_elastic_train.py: KerasState, hvd.elastic.run, Model.fit with DistributedOptimizer) loses
a worker in the middle of an epoch; it goes on alone, or with a replacement that takes
the state from the survivor, from the last commit, and ends where the same training in one
process over all the data ends.
Runs as one process and starts the jobs itself, with a Python that has tensorflow-cpu and
tf-keras (make check-tensorflow)."""

import os
import subprocess
import sys
import textwrap

import numpy as np

import tf_elastic_train

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
RUN = os.path.join(BUILD, "bin", "chorus-run")
SCRIPT = os.path.join(HERE, "tf_elastic_train.py")


def run(args, ok=True, **extra):
    """The output of chorus-run args (which must succeed when ok). A job's deadline: its
    ranks' TensorFlow start (tens of seconds each on a loaded machine), the loss of a peer
    (CHORUS_TIMEOUT_S at most) and a new generation; the list's deadline holds two jobs."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"),
               CHORUS_LIB=os.path.join(BUILD, "lib", "libchorus.so"), CHORUS_TIMEOUT_S="30")
    for k in ("CHORUS_RANK", "CHORUS_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(extra)
    r = subprocess.run([RUN] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=240)
    assert r.returncode == 0 or not ok, r.stdout
    return r.stdout


def done(out):
    """(line prefix, weights) of every rank's done: line, in rank order."""
    lines = sorted(l for l in out.splitlines() if "done:" in l)
    return [(l.split(" weights ")[0],
             np.array([float(w) for w in l.split(" weights ")[1].split()])) for l in lines]


def test_keras_elastic_lost_and_replaced_worker():
    want = tf_elastic_train.serial()

    # worker 1 dies after the first step of epoch 4, which both ranks applied: worker 0 loses
    # it in the second step, restores the commit of epoch 3 (weights, momentum, iterations,
    # epoch: without it the step applied since would count twice) and does the rest alone
    out = run(["--elastic", "-np", "2", "--min-np", "1", "--max-restarts", "0",
               sys.executable, SCRIPT], CHORUS_TEST_DIE_WORKER="1")
    assert "[0] reset: generation 2 rank 0 of 1 at epoch 3" in out, out
    got = done(out)
    assert [p for p, _ in got] == ["[0] done: epoch 8 size 1 same True iterations 16"], out
    np.testing.assert_allclose(got[0][1], want, rtol=1e-5)  # float sums in another order

    # the same loss with a replacement (worker 2) that joins without optimizer slots and
    # takes the state of worker 0
    out = run(["--elastic", "-np", "2", "--min-np", "2", "--max-np", "2",
               sys.executable, SCRIPT], CHORUS_TEST_DIE_WORKER="1")
    assert "[0] reset: generation 2 rank 0 of 2 at epoch 3" in out, out
    assert "[2] reset: generation 2 rank 1 of 2 at epoch 3" in out, out
    got = done(out)
    assert [p for p, _ in got] == ["[0] done: epoch 8 size 2 same True iterations 16",
                                   "[2] done: epoch 8 size 2 same True iterations 16"], out
    for _, w in got:
        np.testing.assert_allclose(w, want, rtol=1e-5)


def test_elastic_outside_an_elastic_job_restores_and_explains(tmp_path):
    """Under plain chorus-run a lost peer inside a tf.function restores the last commit and
    raises HorovodInternalError saying why the job cannot go on in place."""
    code = textwrap.dedent("""
        import os, tensorflow as tf, chorus.tensorflow as hvd
        hvd.init()
        v = tf.Variable([1.0, 2.0])
        state = hvd.elastic.TensorFlowState([v], step=0)
        step = tf.function(lambda: hvd.allreduce(tf.ones([1 << 16]), name="big"))
        @hvd.elastic.run
        def train(state):
            state.step = 5
            v.assign([3.0, 4.0])
            state.commit()
            state.step = 6
            v.assign([0.0, 0.0])
            if hvd.rank() == 1:
                os._exit(3)
            step()
        try:
            train(state)
        except hvd.HorovodInternalError as e:
            print("caught step", state.step, v.numpy().tolist(), type(e.__cause__).__name__, e)
    """)
    p = tmp_path / "lost.py"
    p.write_text(code)
    out = run(["-np", "2", "--grace", "30", sys.executable, str(p)], ok=False,
              CHORUS_TIMEOUT_S="10")
    # the chorus error behind TensorFlow's UnknownError is the one named
    assert "[0] caught step 5 [3.0, 4.0] UnknownError chorus grouped allreduce: 'big'" \
        in out, out
    assert "rank 1 (pid" in out and "[CHORUS_ERR_PEER_LOST] -- chorus.tensorflow.elastic " \
        "restored the last commit, but the ranks cannot change in place outside `chorus-run " \
        "--elastic`" in out, out
