"""What a torchrun or horovodrun user meets first under chorus-run, as they see it: Python
output that streams, a plain torch.distributed DDP script that runs unchanged, and Horovod's
elastic benchmark (hvd.size() before hvd.elastic.run) under --elastic. Runs as one process
and starts the jobs itself."""

import os
import subprocess
import time

from test_launch import HERE, PY, RUN, env, run

TICKS = """
import time
for i in range(4):
    print("tick", i)
    time.sleep(1)
"""


def test_python_output_streams_line_by_line():
    """A rank printing once a second (print() without flush=True, stdout a pipe): each line
    arrives as it is printed, not all at once when the rank exits."""
    e = env()
    e.pop("PYTHONUNBUFFERED", None)
    p = subprocess.Popen([RUN, "-np", "1", PY, "-c", TICKS], stdout=subprocess.PIPE, text=True,
                         env=e)
    seen = []
    for line in p.stdout:
        seen.append((time.monotonic(), line.rstrip("\n")))
    p.wait(timeout=60)
    end = time.monotonic()
    assert p.returncode == 0
    assert [l for _, l in seen] == ["[0] tick %d" % i for i in range(4)], seen
    # the script sleeps 3 s after its first line: that line came well before the end, and
    # the lines came spread over those seconds
    assert end - seen[0][0] > 1.5, seen
    assert seen[-1][0] - seen[0][0] > 1.5, seen


def test_plain_ddp_script_runs_unchanged():
    r = run([RUN, "-np", "2", PY, os.path.join(HERE, "ddp_script.py")], env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(2):
        assert "[%d] ddp rank %d of 2 (local %d) allreduce 3 same weights True" % (
            rank, rank, rank) in r.stdout, r.stdout


def test_horovod_elastic_benchmark_runs_under_elastic():
    """hvd.size() and hvd.rank() before hvd.elastic.run and after it, as Horovod allows."""
    r = run([RUN, "--elastic", "-np", "2", PY, os.path.join(HERE, "elastic_benchmark.py")],
            env=env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0] Number of CPUs: 2" in r.stdout, r.stdout
    assert "[0] Iter #2:" in r.stdout and "[0] Total img/sec on 2 CPU(s):" in r.stdout
    assert "[1] " not in r.stdout, r.stdout  # only rank 0 logs, before and after run()
    assert "ValueError" not in r.stderr, r.stderr


def _worker_pid(launcher_pid, worker_id):
    """The pid of the launcher's child whose CHORUS_WORKER_ID is worker_id (None if none)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/environ" % d, "rb") as f:
                envs = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == launcher_pid and b"CHORUS_WORKER_ID=%d" % worker_id in envs:
            return int(d)
    return None


def test_horovod_elastic_benchmark_survives_a_lost_worker():
    """Worker 1 is killed mid-benchmark: rank 0 goes on with a replacement, which reads its
    planned rank (1, not 0) before hvd.elastic.run and so does not log."""
    e = env(CHORUS_HEARTBEAT_TIMEOUT_S="2", CHORUS_HEARTBEAT_S="0.5")
    p = subprocess.Popen([RUN, "--elastic", "-np", "2", PY,
                          os.path.join(HERE, "elastic_benchmark.py"), "--num-iters", "12"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    out = []
    try:
        for line in p.stdout:
            out.append(line)
            if line.startswith("[0] Iter #2:") and "generation 2" not in "".join(out):
                victim = _worker_pid(p.pid, 1)
                assert victim, "".join(out)
                os.kill(victim, 9)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    text = "".join(out)
    assert p.returncode == 0, text
    assert "started worker 2 (pid" in text and "generation 2 has 2 ranks (workers 0 2)" in text
    assert "[0] Total img/sec on 2 CPU(s):" in text, text
    assert "[2] " not in text, text  # the replacement is rank 1 from its start
