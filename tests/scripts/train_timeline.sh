#!/bin/sh
# CHORUS_TIMELINE in every mode of chorus-train: the default fused mode and the per-layer mode
# write a Chrome trace (valid JSON) per rank with exactly one event per collective the trainer
# issues (a gradient allreduce and a loss/accuracy allreduce per step in fused mode, one per
# layer in layer mode); in engine mode the engine's rows and the collectives share the file; a
# timeline that cannot be written, or whose disk fills, is a warning naming the file and why,
# and the run goes on.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/train_timeline.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
steps=3
common="--model mlp --batch 400 --max-steps $steps --no-eval --log-every 1000 --seed 3"

# check FILE MODE: the per-collective events of a trainer run in MODE
check() {
    python3 - "$1" "$2" "$steps" <<'PY' || fail "timeline $1"
import collections, json, sys
path, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
events = json.load(open(path))  # the whole file is one JSON array
assert isinstance(events, list), type(events)
coll = [e for e in events if e.get("cat") == "collective"]
for e in coll:
    assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0, e
    assert e["args"]["algorithm"] and e["args"]["bytes"] >= 0, e
    assert "result" not in e["args"], e
rows = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
assert all(rows[e["tid"]].startswith("collectives") for e in coll), rows
kinds = collections.Counter((e["name"], e["args"]["dtype"], e["args"]["bytes"]) for e in coll)
stats = kinds[("allreduce", "float64", 24)]  # loss, hits, samples: one per step
grads = [(k, n) for k, n in kinds.items() if k[0] == "allreduce" and k[1] == "float32"]
if mode == "fused":
    # one allreduce of the whole gradient (535818 parameters) per step
    assert stats == steps and grads == [(("allreduce", "float32", 535818 * 4), steps)], kinds
elif mode == "layer":
    # one allreduce per layer with parameters (3 linear layers), each once per step
    assert stats == steps and len(grads) == 3 and all(n == steps for _, n in grads), kinds
    assert sum(k[2] for k, _ in grads) == 535818 * 4, grads
elif mode == "engine":
    names = {e["name"] for e in events}
    assert {"NEGOTIATE", "QUEUE", "ALLREDUCE", "CYCLE"} <= names, names
    assert stats == steps and grads, kinds
print("%s: %s mode, %d events, %d collectives: %s" % (path, mode, len(events), len(coll),
      dict(kinds)))
PY
}

for mode in fused engine; do
    out=$(CHORUS_TIMELINE="$dir/$mode.%r.json" chorus-run -np 2 chorus-train $common --grad-sync $mode 2>&1) ||
        { echo "$out"; fail "$mode run"; }
    for r in 0 1; do check "$dir/$mode.$r.json" $mode; done
done

# without %r rank 0 writes the file, and only rank 0
out=$(cd "$dir" && CHORUS_TIMELINE=layer.json chorus-run -np 2 chorus-train $common --grad-sync layer 2>&1) ||
    { echo "$out"; fail "layer run"; }
check "$dir/layer.json" layer
[ "$(ls "$dir" | grep -c '^layer')" = 1 ] || fail "one timeline file expected: $(ls "$dir")"

# a timeline that cannot be written: chorus-run checks the directory before it starts a rank;
# a rank started otherwise warns naming the file and why, and the run goes on
out=$(CHORUS_TIMELINE="$dir/no-such-dir/tl.%r.json" chorus-run -np 2 chorus-train $common 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] || fail "chorus-run started ranks whose timeline directory does not exist"
echo "$out" | grep -q "^chorus-run: CHORUS_TIMELINE=$dir/no-such-dir/tl.%r.json: the directory $dir/no-such-dir does not exist$" ||
    fail "chorus-run did not name the missing directory"
out=$(CHORUS_TIMELINE="$dir/no-such-dir/tl.%r.json" chorus-train $common 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "a run whose timeline cannot be written failed"
echo "$out" | grep -q "CHORUS WARN CHORUS_TIMELINE: rank 0 cannot write the timeline file $dir/no-such-dir/tl.0.json: No such file or directory; this run has no timeline of rank 0" ||
    fail "no warning for rank 0"

# a timeline whose disk fills (/dev/full: opened, then every write fails): said once, naming
# the file and why; the run goes on and ends well
out=$(CHORUS_TIMELINE=/dev/full chorus-run -np 2 chorus-train $common 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "a run whose timeline disk is full failed"
echo "$out" | grep -q "^\[0\] .*CHORUS WARN CHORUS_TIMELINE: cannot write the timeline file /dev/full: No space left on device; the file is incomplete and this run writes no more events to it$" ||
    fail "no warning that the timeline could not be written"
[ "$(echo "$out" | grep -c "cannot write the timeline file")" = 1 ] || fail "the warning is not said once"
echo "train_timeline: ok"
