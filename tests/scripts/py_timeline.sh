#!/bin/sh
# CHORUS_TIMELINE from the Python runtime (chorus, on the engine): one file per rank, valid
# JSON, with the engine's row per tensor (one ALLREDUCE span each) and, on the engine
# communicator's row, exactly one collective event per synchronous allreduce the program made.
# The file is valid JSON after shutdown(), and a second init() in the process goes on in it.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/py_timeline.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
py=/usr/bin/python3
cat >"$dir/t.py" <<'PY'
import json, sys, chorus, numpy as np
for session in range(2):
    chorus.init()
    for i in range(5) if session == 0 else []:
        chorus.allreduce(np.full(1000, i, np.float32), name="g%d" % i)
    chorus.allreduce(np.zeros(8, np.float32), name="session%d" % session)
    path = sys.argv[1] % chorus.rank()
    chorus.shutdown()
    rows = {e["args"]["name"] for e in json.load(open(path)) if e.get("name") == "thread_name"}
    assert {"session%d" % s for s in range(session + 1)} <= rows, (session, rows)
PY
out=$(CHORUS_TIMELINE="$dir/tl.%r.json" PYTHONPATH=python chorus-run -np 2 $py "$dir/t.py" "$dir/tl.%d.json" 2>&1) ||
    { echo "$out"; fail "python run"; }
for r in 0 1; do
    $py - "$dir/tl.$r.json" <<'PY' || fail "rank $r timeline"
import collections, json, sys
ev = json.load(open(sys.argv[1]))
rows = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
spans = collections.Counter((rows[e["tid"]], e["name"]) for e in ev
                            if e.get("ph") == "X" and "cat" not in e)
for i in range(5):
    assert spans[("g%d" % i, "ALLREDUCE")] == 1, spans
coll = [e for e in ev if e.get("cat") == "collective"]
ours = [e for e in coll if e["name"] == "allreduce" and e["args"]["dtype"] == "float32"
        and e["args"]["bytes"] == 4000]
assert len(ours) == 5, ours
print("%s: %d events, %d collectives, 5 tensors with one ALLREDUCE each" % (sys.argv[1], len(ev),
                                                                           len(coll)))
PY
done
echo "py_timeline: ok"
