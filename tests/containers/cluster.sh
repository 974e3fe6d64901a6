#!/bin/bash
# cluster.sh - the Indexed Job of deploy/kubernetes/ played by containers: one container per pod
# on a podman network of its own, each with exactly what the pod of its completion index gets
# (tests/containers/pod_args.py reads it from what `kubectl kustomize deploy/kubernetes/`
# renders, so the test runs the manifests' own pod specification: hostname, the kubelet's
# /etc/hosts line, the headless Service's DNS names, labels, environment with the Secret's
# value, CPU and memory limits, /dev/shm), then waits for every pod to end, shows their logs and
# removes everything it made (containers, network, files) on every exit path.
#
#   tests/containers/cluster.sh [--image IMG] [--mount SRC:DST[:ro]]... [--env VAR=VALUE]...
#                               [--logs DIR] [--kill-pod I --kill-when REGEX] [--deadline S]
#                               [-- COMMAND...]
#
# IMG and COMMAND replace the manifest's image and command (a workload of the container test);
# --mount adds a volume (a data set, a script), --env a variable (after the manifest's);
# --kill-pod kills the pod of index I (podman
# kill: SIGKILL to every process of the pod) once pod 0's log matches REGEX. Each pod must end
# by itself within --deadline seconds (default CHORUS_TIMEOUT_S of the manifest plus 60):
# Chorus, not this script, ends the job when a pod is lost. Pod logs go to DIR/pod-I.log
# (default: a directory that is removed). Exit status 0 when every pod exited 0, 1 otherwise;
# the last lines say how each pod ended, when, and how long the pods took to start.
# $PODMAN is the podman command (mk/containers.mk); $PODMAN_ULIMITS the --ulimit options
# (podman run here needs them explicit: the defaults are refused).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
read -r -a podman <<< "${PODMAN:-podman --runtime runc --cgroup-manager cgroupfs}"
read -r -a ulimits <<< "${PODMAN_ULIMITS:---ulimit nofile=16384:16384 --ulimit nproc=8192:8192}"
use_image="" mounts=() logs="" kill_pod="" kill_when="" deadline="" cmd=()
while [ $# -gt 0 ]; do
    case "$1" in
        --image) use_image=$2; shift 2 ;;
        --mount) mounts+=(--mount "$2"); shift 2 ;;
        --env) mounts+=(--env "$2"); shift 2 ;;
        --logs) logs=$2; shift 2 ;;
        --kill-pod) kill_pod=$2; shift 2 ;;
        --kill-when) kill_when=$2; shift 2 ;;
        --deadline) deadline=$2; shift 2 ;;
        --) shift; cmd=("$@"); break ;;
        *) echo "cluster: unknown option $1 (see the head of $0)" >&2; exit 2 ;;
    esac
done
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t0=$(now)

run_id=chorus-ct-$$-$(od -An -tx1 -N3 /dev/urandom | tr -d ' \n')
work=$(mktemp -d)
[ -n "$logs" ] || logs=$work/logs
mkdir -p "$logs"
net_made=""
# Everything this run made carries the label chorus-test=$run_id: removed here, whatever ended
# the run (success, a failure, a signal, the deadline).
cleanup() {
    local ids
    ids=$("${podman[@]}" ps -a -q --filter "label=chorus-test=$run_id" 2> /dev/null)
    # shellcheck disable=SC2086 # container ids, one a word
    [ -z "$ids" ] || "${podman[@]}" rm -f -v -t 0 $ids > /dev/null 2>&1
    [ -z "$net_made" ] || "${podman[@]}" network rm -f "$run_id" > /dev/null 2>&1
    left=$("${podman[@]}" ps -a -q --filter "label=chorus-test=$run_id" 2> /dev/null)
    if [ -n "$left" ] || { [ -n "$net_made" ] && "${podman[@]}" network exists "$run_id"; }; then
        echo "cluster: could not remove everything of $run_id (containers: $left)" >&2
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "cluster: interrupted" >&2; exit 130' INT TERM HUP

command -v kubectl > /dev/null 2>&1 ||
    { echo "cluster: kubectl renders the manifests (kubectl kustomize); install kubectl 1.24 or later" >&2; exit 1; }
kubectl kustomize "$root/deploy/kubernetes" > "$work/rendered.yaml" ||
    { echo "cluster: kubectl kustomize deploy/kubernetes failed" >&2; exit 1; }
facts=$(python3 "$here/pod_args.py" facts < "$work/rendered.yaml") || exit 1
eval "$facts"
[ -n "$deadline" ] || deadline=$((timeout + 60))
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$work/secret" # the Secret's value, fresh

"${podman[@]}" network create --label "chorus-test=$run_id" "$run_id" > /dev/null ||
    { echo "cluster: podman network create failed" >&2; exit 1; }
net_made=1
subnet=$("${podman[@]}" network inspect "$run_id" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
prefix=${subnet%.*} # a /24 from podman's pool: the pods take .10, .11, ...
[ -n "$prefix" ] || { echo "cluster: network $run_id has no IPv4 subnet" >&2; exit 1; }

names=()
for ((i = 0; i < pods; i++)); do
    args=()
    while IFS= read -r -d '' a; do args+=("$a"); done < <(
        python3 "$here/pod_args.py" run "$i" "$prefix.$((10 + i))" "$work/hosts-$i" \
            "$work/secret" "$run_id" "$run_id" ${use_image:+--image "$use_image"} "${mounts[@]}" \
            ${cmd[@]+-- "${cmd[@]}"} < "$work/rendered.yaml")
    [ ${#args[@]} -gt 0 ] || { echo "cluster: no podman arguments for pod $i" >&2; exit 1; }
    names+=("$run_id-$job-$i")
    "${podman[@]}" run -d "${ulimits[@]}" "${args[@]}" > /dev/null ||
        { echo "cluster: podman run of pod $job-$i failed" >&2; exit 1; }
done
started=$(since "$t0")
echo "cluster: $pods pods of job $job ($ranks ranks each, image ${use_image:-$image}) started in ${started} s on network $run_id ($subnet)"

# Wait for every pod to end by itself; kill one on request.
declare -A status ended
killed_at=""
while :; do
    left=0
    for ((i = 0; i < pods; i++)); do
        [ -n "${status[$i]:-}" ] && continue
        read -r st code <<< "$("${podman[@]}" inspect --format '{{.State.Status}} {{.State.ExitCode}}' "${names[$i]}" 2> /dev/null)"
        if [ "$st" = exited ] || [ "$st" = stopped ]; then
            status[$i]=$code
            ended[$i]=$(since "$t0")
        else
            left=$((left + 1))
        fi
    done
    [ "$left" = 0 ] && break
    if [ -n "$kill_pod" ] && [ -z "$killed_at" ] &&
        "${podman[@]}" logs "${names[0]}" 2>&1 | grep -q -E -- "$kill_when"; then
        "${podman[@]}" kill --signal KILL "${names[$kill_pod]}" > /dev/null
        killed_at=$(since "$t0")
        echo "cluster: killed pod $job-$kill_pod at ${killed_at} s (pod $job-0's log matched '$kill_when')"
    fi
    if awk -v a="$(since "$t0")" -v d="$deadline" 'BEGIN { exit !(a > d) }'; then
        echo "cluster: $left pod(s) still running after the deadline of $deadline s" >&2
        break
    fi
    sleep 0.5
done

# When rank 0 met the other ranks (its INFO line "rank 0: local rank 0 of N, H hosts", written
# once every rank registered with the store): the job's start-up time.
# Each pod's log is found by its labels, as `kubectl logs -l job-name=<job>,
# batch.kubernetes.io/job-completion-index=I` finds it on a cluster.
by_label() {
    "${podman[@]}" ps -a -q --filter "label=chorus-test=$run_id" --filter "label=job-name=$job" \
        --filter "label=batch.kubernetes.io/job-completion-index=$1"
}
rank0=$(by_label 0)
[ "$(echo "$rank0" | wc -w)" = 1 ] || { echo "cluster: the labels of index 0 select '$rank0', not one pod" >&2; exit 1; }
stamp() { "${podman[@]}" logs -t "$rank0" 2>&1 | grep -m1 -E "$1" | cut -d' ' -f1; }
met=$(stamp 'rank 0: local rank 0 of [0-9]+, [0-9]+ host')
rc=0
for ((i = 0; i < pods; i++)); do
    "${podman[@]}" logs "$(by_label "$i")" > "$logs/pod-$i.log" 2>&1
    sed "s/^/$job-$i| /" "$logs/pod-$i.log"
done
for ((i = 0; i < pods; i++)); do
    if [ -z "${status[$i]:-}" ]; then
        echo "cluster: pod $job-$i did not end by the deadline ($deadline s)"
        rc=1
    else
        echo "cluster: pod $job-$i exited with status ${status[$i]} at ${ended[$i]} s"
        [ "${status[$i]}" = 0 ] || rc=1
    fi
done
if [ -n "$met" ]; then
    echo "cluster: rank 0 met the others $(awk -v a="$t0" -v b="$(date -d "$met" +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the cluster began (the pods were started by ${started} s)"
fi
exit $rc
