#!/bin/sh
# CHORUS_TIMELINE from the Python runtime (chorus, on the engine): one file per rank, valid
# JSON, with the engine's row per tensor (one ALLREDUCE span each) and, on the engine
# communicator's row, exactly one collective event per synchronous allreduce the program made.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/py_timeline.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
py=/usr/bin/python3
cat >"$dir/t.py" <<'PY'
import chorus, numpy as np
chorus.init()
for i in range(5):
    chorus.allreduce(np.full(1000, i, np.float32), name="g%d" % i)
chorus.shutdown()
PY
out=$(CHORUS_TIMELINE="$dir/tl.%r.json" PYTHONPATH=python chorus-run -np 2 $py "$dir/t.py" 2>&1) ||
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
