#!/bin/bash
# container_test.sh - the Kubernetes job of deploy/kubernetes/ in containers (make
# container-test, after make images): each case runs the kustomized Indexed Job as containers
# on a podman network (tests/containers/cluster.sh), 2 pods x 2 ranks as the kustomization
# says, and checks what the pods printed:
#   1. allreduce   the manifest's own command (chorus-run chorus-bench, results validated):
#                  the ranks of each pod over shared memory, the pods over TCP, and the
#                  hierarchical allreduce chosen for the world (the ranks' INFO lines say so,
#                  and every rank's timeline names the algorithm each allreduce ran: hier);
#   2. train       chorus-train on Fashion-MNIST (the host's /usr/share/datasets/fashion-mnist
#                  mounted read-only, as a volume would be) for 40 steps across the 2 pods:
#                  the test accuracy it reports must show learning (>= 0.70; chance is 0.10);
#   3. ddp         tests/python/torchdist_ddp.py in the chorus-torch image: DDP and
#                  ZeroRedundancyOptimizer on backend "chorus" give the parameters Gloo gives;
#   4. kill        chorus-train again, and pod 1 is killed (SIGKILL to the pod) once training
#                  has started: each surviving rank names the lost pod, and the job ends by
#                  itself within CHORUS_TIMEOUT_S of the kill, failed;
#   5. interrupt   the cluster script itself stopped with SIGTERM while the pods run;
# and after each case nothing of it is left (containers, network). Prints the time each case
# took. Needs root, podman and kubectl; $PODMAN as for cluster.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
read -r -a podman <<< "${PODMAN:-podman --runtime runc --cgroup-manager cgroupfs}"
tag=${IMAGE_TAG:-latest}
data=/usr/share/datasets/fashion-mnist
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fail() {
    echo "container-test: FAIL: $*"
    exit 1
}
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
    fail "Fashion-MNIST is not in $data (apt-get install dataset-fashion-mnist)"
eval "$(kubectl kustomize "$root/deploy/kubernetes" | python3 "$here/pod_args.py" facts)"
world=$((pods * ranks))
timings=""

# run CASE [cluster.sh options...]: the case's cluster, output in $logs/CASE.out and the pods'
# logs in $logs/CASE/pod-I.log; then checks that nothing of it is left. Sets $rc and $took.
run() {
    local name=$1 t
    shift
    echo "=== container-test: $name"
    t=$(date +%s.%N)
    bash "$here/cluster.sh" --logs "$logs/$name" "$@" > "$logs/$name.out" 2>&1
    rc=$?
    took=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    grep -v '^chorus-[0-9]*| ' "$logs/$name.out"
    timings="$timings$(printf '%-10s %6s s  %s' "$name" "$took" "$(grep -o 'rank 0 met the others [0-9.]* s' "$logs/$name.out")")\n"
    left=$("${podman[@]}" ps -a -q --filter label=chorus-test)
    nets=$("${podman[@]}" network ls -q --filter label=chorus-test)
    [ -z "$left$nets" ] || fail "$name left containers ($left) or networks ($nets) behind"
}
show() { cat "$logs/$1.out"; }

# 1. The manifest's command: hierarchical allreduce, validated; every rank's timeline
#    (CHORUS_TIMELINE, docs/MONITORING.md) says which algorithm each allreduce ran.
trace=$logs/trace
mkdir -p "$trace" && chmod 1777 "$trace" # the ranks run as the image's user
run allreduce --mount "$trace:/trace" --env "CHORUS_TIMELINE=/trace/allreduce.%r.json"
[ $rc = 0 ] || { show allreduce; fail "the allreduce job failed"; }
grep -q "# Out of bounds values : 0 OK" "$logs/allreduce/pod-0.log" ||
    { show allreduce; fail "chorus-bench found wrong results"; }
for i in $(seq 0 $((pods - 1))); do
    n=$(grep -c "($ranks ranks, one host): shared memory for every collective" "$logs/allreduce/pod-$i.log")
    [ "$n" = "$ranks" ] || { show allreduce; fail "pod $i: $n of its $ranks ranks set up shared memory among themselves"; }
    n=$(grep -c "($world ranks, $pods hosts): hierarchical allreduce, broadcast and allgather (shared memory within each host, TCP between hosts" "$logs/allreduce/pod-$i.log")
    [ "$n" = "$ranks" ] || { show allreduce; fail "pod $i: $n of its $ranks ranks chose the hierarchical collectives"; }
done
algos=$(python3 - "$trace" "$world" << 'EOF'
import glob, json, sys
trace, world = sys.argv[1], int(sys.argv[2])
files = sorted(glob.glob(trace + "/allreduce.*.json"))
if len(files) != world:
    sys.exit("%d timelines, not %d" % (len(files), world))
seen = set()
for f in files:
    ev = json.load(open(f))
    rows = [e["tid"] for e in ev if e.get("name") == "thread_name"
            and e["args"]["name"].endswith(", %d ranks)" % world)]
    # the benchmark's float32 allreduces (the int32 one before them is the ranks agreeing,
    # while the communicator is set up, that every pod's shared memory works)
    algos = {e["args"]["algorithm"] for e in ev if e.get("name") == "allreduce"
             and e.get("tid") in rows and e["args"]["dtype"] == "float32"}
    if not algos:
        sys.exit("%s: no float32 allreduce of the %d-rank communicator" % (f, world))
    seen |= algos
print(" ".join(sorted(seen)))
EOF
) || { show allreduce; fail "the timelines: $algos"; }
[ "$algos" = hier ] || { show allreduce; fail "the world's allreduces ran '$algos', not only hier"; }
echo "container-test: allreduce: $world ranks in $pods pods; each pod's ranks over shared memory, hierarchical allreduce across the pods (every rank's timeline: algorithm hier); results validated"

# 2. chorus-train on Fashion-MNIST across the pods.
train=(chorus-run chorus-train --data /data --max-steps 40)
run train --mount "$data:/data:ro" -- "${train[@]}"
[ $rc = 0 ] || { show train; fail "the training job failed"; }
acc=$(sed -n 's/^\[0\] done: 40 steps, test accuracy \([0-9.]*\),.*/\1/p' "$logs/train/pod-0.log")
[ -n "$acc" ] || { show train; fail "chorus-train reported no test accuracy after 40 steps"; }
awk -v a="$acc" 'BEGIN { exit !(a >= 0.70) }' || { show train; fail "test accuracy $acc after 40 steps: no learning"; }
grep -q "^\[0\] chorus-train: mlp, .* $world ranks x 1 BLAS thread" "$logs/train/pod-0.log" ||
    { show train; fail "chorus-train did not train on $world ranks"; }
echo "container-test: train: chorus-train on $world ranks in $pods pods, test accuracy $acc after 40 steps"

# 3. DDP on backend "chorus" in the torch image.
run ddp --image "chorus-torch:$tag" --mount "$root/tests/python:/tests:ro" -- \
    chorus-run python3 /tests/torchdist_ddp.py
[ $rc = 0 ] || { show ddp; fail "the DDP job failed"; }
n=$(cat "$logs"/ddp/pod-*.log | grep -c "on $world ranks: close to gloo")
[ "$n" = $((2 * world)) ] || { show ddp; fail "$n of $((2 * world)) DDP results agreed with Gloo"; }
echo "container-test: ddp: DDP and ZeroRedundancyOptimizer on backend chorus, $world ranks in $pods pods, agree with Gloo"

# 4. A pod killed mid-run.
victim=$((pods - 1))
run kill --mount "$data:/data:ro" --kill-pod $victim --kill-when '^\[0\] chorus-train: mlp' -- \
    chorus-run chorus-train --data /data --epochs 10
[ $rc != 0 ] || { show kill; fail "the job went on as if nothing happened"; }
killed=$(sed -n 's/^cluster: killed pod .* at \([0-9.]*\) s.*/\1/p' "$logs/kill.out")
[ -n "$killed" ] || { show kill; fail "pod $victim was never killed (training did not start?)"; }
for i in $(seq 0 $((pods - 1))); do
    [ $i = $victim ] && continue
    at=$(sed -n "s/^cluster: pod $job-$i exited with status [1-9][0-9]* at \([0-9.]*\) s/\1/p" "$logs/kill.out")
    [ -n "$at" ] || { show kill; fail "pod $i did not fail by itself after pod $victim was killed"; }
    awk -v a="$at" -v k="$killed" -v t="$timeout" 'BEGIN { exit !(a - k <= t) }' ||
        { show kill; fail "pod $i ended $at s in, more than CHORUS_TIMEOUT_S=$timeout s after the kill at $killed s"; }
    echo "container-test: kill: pod $job-$i failed $(awk -v a="$at" -v k="$killed" 'BEGIN { printf "%.1f", a - k }') s after pod $job-$victim was killed (CHORUS_TIMEOUT_S=$timeout)"
    for r in $(seq $((i * ranks)) $((i * ranks + ranks - 1))); do
        line=$(grep -m1 "^\[$r\] .*$job-$victim" "$logs/kill/pod-$i.log") ||
            { show kill; fail "rank $r did not name the lost pod $job-$victim"; }
        echo "container-test: kill: rank $r: $line"
    done
    line=$(grep -m1 "^chorus-run: it lost rank [0-9]* of node $victim" "$logs/kill/pod-$i.log") ||
        { show kill; fail "chorus-run of pod $i did not name node $victim"; }
    echo "container-test: kill: pod $job-$i's chorus-run: $line"
done

# 5. The cluster script stopped from outside (SIGTERM) while the job runs: it removes
#    everything it made all the same.
echo "=== container-test: interrupt"
bash "$here/cluster.sh" --mount "$data:/data:ro" -- chorus-run chorus-train --data /data --epochs 10 \
    > "$logs/interrupt.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
    grep -q "^cluster: .* pods of job .* started in" "$logs/interrupt.out" && break
    kill -0 $pid 2> /dev/null || break
    sleep 0.1
done
grep -q "^cluster: .* pods of job .* started in" "$logs/interrupt.out" ||
    { cat "$logs/interrupt.out"; fail "the interrupted cluster never started its pods"; }
[ -n "$("${podman[@]}" ps -q --filter label=chorus-test)" ] || fail "no pod running to interrupt"
kill -TERM $pid
wait $pid
echo "container-test: interrupt: cluster.sh stopped by SIGTERM with status $?"
left=$("${podman[@]}" ps -a -q --filter label=chorus-test)
nets=$("${podman[@]}" network ls -q --filter label=chorus-test)
[ -z "$left$nets" ] || fail "an interrupted cluster left containers ($left) or networks ($nets) behind"
echo "container-test: interrupt: nothing left"

printf "container-test: time per case (cluster up, job, teardown):\n$timings"
echo "container-test: OK (allreduce, train, ddp, kill, interrupt; nothing left running)"
