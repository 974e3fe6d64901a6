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
