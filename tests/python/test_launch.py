"""Ways to start a chorus.torch job, and the errors a user meets first. Runs as one process
and starts the jobs itself: torchrun-style variables set by hand, mpirun, a horovod.torch
script with only its import line changed, the Fashion-MNIST example, `pip install` into a
virtual environment, and the failures (library not found, bad environment, a dead peer)."""

import os
import shutil
import socket
import subprocess
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
RUN = os.path.join(BUILD, "bin", "chorus-run")
LIB = os.path.join(BUILD, "lib", "libchorus.so")
PY = "/usr/bin/python3"

PROBE = textwrap.dedent("""
    import torch, chorus.torch as hvd
    hvd.init()
    s = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum).item()
    print("rank %d of %d local %d/%d sum %g" % (hvd.rank(), hvd.size(), hvd.local_rank(),
                                                 hvd.local_size(), s), flush=True)
""")


def env(**extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("CHORUS_RANK", "CHORUS_SIZE", "OMPI_", "PMI_", "SLURM_")) or \
                k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            del e[k]
    e["PYTHONPATH"] = os.path.join(REPO, "python")
    e["CHORUS_LIB"] = LIB
    e.setdefault("CHORUS_TIMEOUT_S", "20")
    e.update(extra)
    return e


def script(tmp_path, text, name="probe.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(cmd, timeout=90, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def test_chorus_run(tmp_path):
    r = run([RUN, "-np", "2", PY, script(tmp_path, PROBE)], env=env())
    assert r.returncode == 0, r.stderr
    assert "[0] rank 0 of 2 local 0/2 sum 3" in r.stdout
    assert "[1] rank 1 of 2 local 1/2 sum 3" in r.stdout


def test_torchrun_style_environment(tmp_path):
    """RANK WORLD_SIZE MASTER_ADDR MASTER_PORT set by hand, as torchrun would."""
    port = str(free_port())
    p = script(tmp_path, PROBE)
    procs = [subprocess.Popen([PY, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env(RANK=str(r), WORLD_SIZE="3", LOCAL_RANK=str(r),
                                                 MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(3)]
    outs = [p.communicate(timeout=90) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, err
        assert "rank %d of 3" % r in out and "sum 6" in out


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")
def test_mpirun(tmp_path):
    r = run(["mpirun", "--allow-run-as-root", "-np", "2", PY, script(tmp_path, PROBE)],
            env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 of 2" in r.stdout and "rank 1 of 2" in r.stdout
    assert r.stdout.count("sum 3") == 2


def test_horovod_script_with_only_the_import_changed(tmp_path):
    src = open(os.path.join(HERE, "horovod_style_mnist.py")).read()
    assert src.count("import horovod.torch as hvd") == 1
    p = script(tmp_path, src.replace("import horovod.torch as hvd", "import chorus.torch as hvd"),
               "mnist.py")
    r = run([RUN, "-np", "2", PY, p, "--limit", "2000", "--lr", "0.05"], env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[1] Train Epoch" not in r.stdout  # only rank 0 logs
    assert "[0] Test set: Average loss" in r.stdout
    acc = float(r.stdout.split("final accuracy")[1].split()[0])
    assert acc > 0.3, r.stdout  # ten classes: well above chance after one small epoch


def test_fashion_mnist_example_learns():
    r = run([RUN, "-np", "2", PY, os.path.join(REPO, "examples", "pytorch_fashion_mnist.py"),
             "--epochs", "2", "--limit", "3000", "--fp16-allreduce"], env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "epoch" in l]
    assert len(lines) == 2 and all(l.startswith("[0] ") for l in lines), r.stdout
    acc = float(lines[-1].split("test accuracy")[1].split("%")[0])
    assert acc > 55.0, r.stdout


def test_pip_install_offline_into_venv(tmp_path):
    venv = tmp_path / "venv"
    r = run([PY, "-m", "venv", "--system-site-packages", str(venv)])
    assert r.returncode == 0, r.stderr
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-build-isolation",
           "--no-index", os.path.join(REPO, "python")]
    e = env(CHORUS_LIB=LIB)
    del e["PYTHONPATH"]
    r = run(pip, timeout=120, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    del e["CHORUS_LIB"]  # the installed package must find its own copy
    r = run([RUN, "-np", "2", str(venv / "bin" / "python"), "-c",
             "import chorus, chorus.torch as hvd, torch; hvd.init(); "
             "print(chorus.lib_path, hvd.allreduce(torch.ones(1), op=hvd.Sum).item())"],
            env=e, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("site-packages/chorus/libchorus.so 2.0") == 2, r.stdout


def test_library_not_found_names_every_place(tmp_path):
    r = run([PY, "-c", "import chorus"], env=env(CHORUS_LIB=str(tmp_path / "nope.so")))
    assert r.returncode != 0
    assert "cannot load libchorus.so" in r.stderr and "nope.so (not there)" in r.stderr


def test_bad_environment_is_a_clear_error(tmp_path):
    code = ("import chorus.torch as hvd\ntry:\n    hvd.init()\nexcept hvd.ChorusError as e:\n"
            "    print(type(e).__name__, e.code_name, e)\n")
    r = run([PY, "-c", code], env=env(RANK="3", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                      MASTER_PORT=str(free_port())))
    assert "ChorusEnvError CHORUS_ERR_ENV" in r.stdout, r.stdout + r.stderr
    assert "rank 3 is out of range for a world of 2" in r.stdout


def test_dead_peer_raises_horovod_internal_error(tmp_path):
    code = textwrap.dedent("""
        import os, torch, chorus.torch as hvd
        hvd.init()
        hvd.allreduce(torch.ones(1))
        if hvd.rank() == 1:
            os._exit(3)  # dies without a word
        try:
            hvd.allreduce(torch.ones(1 << 16))
            print("no error")
        except hvd.HorovodInternalError as e:
            print("caught", type(e).__name__, "rank 1" in str(e), e)
    """)
    r = run([RUN, "-np", "2", "--grace", "20", PY, script(tmp_path, code)],
            env=env(CHORUS_TIMEOUT_S="10"))
    assert "[0] caught" in r.stdout, r.stdout + r.stderr
    assert "[0] caught ChorusPeerLostError True" in r.stdout or \
        "[0] caught ChorusTimeoutError" in r.stdout, r.stdout


def _elastic_done(out):
    lines = [l for l in out.splitlines() if "done:" in l]
    return {l.split("digest")[1].strip() for l in lines}, lines


def test_elastic_lost_and_replaced_workers():
    """hvd.elastic.run under chorus-run --elastic: a worker dies between a step and its
    commit; the survivors go on from the last commit (alone, then with a replacement that
    takes the state from them) and end exactly where a run without failure ends."""
    script = os.path.join(HERE, "elastic_train.py")
    r = run([RUN, "-np", "2", PY, script], env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    want, lines = _elastic_done(r.stdout)
    assert len(want) == 1 and len(lines) == 2 and "same True" in lines[0], r.stdout

    r = run([RUN, "--elastic", "-np", "3", "--min-np", "2", "--max-restarts", "0", PY, script],
            env=env(CHORUS_TEST_DIE_WORKER="2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0] reset: generation 2 rank 0 of 2 at step 20" in r.stdout, r.stdout
    got, lines = _elastic_done(r.stdout)
    assert got == want and len(lines) == 2 and all("size 2 same True" in l for l in lines)
    # after run() returned, the survivors are still a job of 2 (collectives work)
    after = [l for l in r.stdout.splitlines() if "after run:" in l]
    assert len(after) == 2 and all("of 2, mean rank 0.50, workers ['0', '1']" in l
                                   for l in after), r.stdout

    r = run([RUN, "--elastic", "-np", "3", "--min-np", "2", "--max-np", "3", PY, script],
            env=env(CHORUS_TEST_DIE_WORKER="2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[3] reset: generation 2 rank 2 of 3 at step 20" in r.stdout, r.stdout
    got, lines = _elastic_done(r.stdout)
    assert got == want and len(lines) == 3 and all("size 3 same True" in l for l in lines)


def test_elastic_outside_an_elastic_job_restores_and_explains(tmp_path):
    code = textwrap.dedent("""
        import os, torch, chorus.torch as hvd
        hvd.init()
        model = torch.nn.Linear(2, 1)
        state = hvd.elastic.TorchState(model=model, step=0)
        @hvd.elastic.run
        def train(state):
            state.step = 5
            state.commit()
            state.step = 6
            if hvd.rank() == 1:
                os._exit(3)
            hvd.allreduce(torch.ones(1 << 16))
        try:
            train(state)
        except hvd.HorovodInternalError as e:
            print("caught step", state.step, e)
    """)
    r = run([RUN, "-np", "2", "--grace", "20", PY, script(tmp_path, code)],
            env=env(CHORUS_TIMEOUT_S="10"))
    assert "[0] caught step 5" in r.stdout, r.stdout + r.stderr
    assert "cannot change in place outside `chorus-run --elastic`" in r.stdout
