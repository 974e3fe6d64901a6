#!/bin/sh
# k8s_pods.sh - the pods of deploy/kubernetes/job.yaml, played by two namespace hosts of the
# test cluster (tests/net/cluster.sh). Each host gets what the pod of completion index I would
# have: the hostname <job>-I (a UTS namespace of its own), the /etc/hosts line Kubernetes
# writes for a pod with a subdomain ("IP <job>-I.<service>.default.svc.cluster.local <job>-I"),
# the names the cluster DNS answers for the headless Service (<job>-I.<service>), and exactly
# the environment of the manifest's container (read from job.yaml: plain values as written,
# the Secret's key as a fresh random secret) plus JOB_COMPLETION_INDEX=I and HOSTNAME, which
# the Job controller and the kubelet add. Then, across the two hosts:
#   1. one rank per pod, the program started directly (no chorus-run): the collective matrix
#      (every collective against a serial reference) with WORLD_SIZE and MASTER_ADDR added as
#      a PyTorchJob user would, pod 1 started before pod 0's name exists;
#   2. the manifest's own command: chorus-run in each pod starts its PET_NPROC_PER_NODE ranks
#      of chorus-bench (results checked), pod 0's chorus-run serves the store at
#      PET_MASTER_ADDR, and the collectives run hierarchically (shared memory in a pod, TCP
#      between them);
#   3. a pod without a subdomain and without MASTER_ADDR: chorus-bench's error says what to set;
#   4. WORLD_SIZE missing from the manifest: the error names it;
#   5. a rank 0 name that never resolves: the error says so at the timeout.
# Needs root, `ip netns`, unshare and python3 with yaml; prints SKIP with the reason otherwise.
BUILD=${BUILD:-build}
manifest=deploy/kubernetes/job.yaml
prog=$BUILD/tests/mp/coll_matrix
[ -x "$prog" ] || { echo "k8s_pods: $prog is not built"; exit 1; }
command -v unshare > /dev/null 2>&1 || { echo "SKIP k8s_pods: unshare (util-linux) is not installed"; exit 0; }
# python3-yaml reads the manifests; as root it is installed when missing (tools/deps.sh).
python3 -c 'import yaml' 2> /dev/null || sh tools/deps.sh "the Kubernetes tests" python3-yaml > /dev/null 2>&1
python3 -c 'import yaml' 2> /dev/null || { echo "SKIP k8s_pods: python3 with yaml (python3-yaml) is not installed"; exit 0; }

# The manifest's facts: job name, subdomain, completions, command and env (one NAME=VALUE a
# line; a secretKeyRef becomes NAME=@secret).
facts=$(python3 - "$manifest" << 'EOF'
import sys, yaml
job = next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "Job")
pod = job["spec"]["template"]["spec"]
c = pod["containers"][0]
print("job=%s" % job["metadata"]["name"])
print("subdomain=%s" % pod.get("subdomain", ""))
print("completions=%s" % job["spec"]["completions"])
env = {v["name"]: v.get("value") for v in c.get("env", [])}
print("ranks=%s" % env.get("PET_NPROC_PER_NODE"))
print("master=%s:%s" % (env.get("PET_MASTER_ADDR"), env.get("PET_MASTER_PORT")))
print("command='%s'" % " ".join(c["command"] + c.get("args", [])))
for v in c.get("env", []):
    if "value" in v:
        print("env %s=%s" % (v["name"], v["value"]))
    elif "secretKeyRef" in v.get("valueFrom", {}):
        print("env %s=@secret" % v["name"])
    else:
        sys.exit("k8s_pods: env %s: only plain values and secretKeyRef are modelled" % v["name"])
EOF
) || exit 1
eval "$(echo "$facts" | grep -v '^env ')"
[ "$completions" = 2 ] || { echo "k8s_pods: the manifest's completions is $completions; this test models 2 pods"; exit 1; }
[ -n "$subdomain" ] || { echo "k8s_pods: the manifest's pod template has no subdomain"; exit 1; }

. tests/net/cluster.sh
cluster_up k8s 2
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
fqdn() { echo "$job-$1.$subdomain.default.svc.cluster.local"; }
# A pod's resolver: the cluster's search domains; its DNS server is a stand-in on the host's own
# loopback where none answers (the names are in the hosts files), so no query leaves a host.
for h in $cluster_hosts; do
    printf 'nameserver 127.0.0.1\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5 timeout:1 attempts:1\n' \
        > "/etc/netns/$h/resolv.conf"
done
# Pod 1's names now; pod 0's when it is scheduled (case 1).
cluster_alias 2 "$(fqdn 1)" "$job-1.$subdomain" "$job-1"

# pod I WHAT [VAR=VALUE...] [-u VAR...] -- COMMAND...: runs COMMAND as the pod of index I would,
# in the background, with the manifest's environment changed as given; output in $logs/WHAT.I.
pod() {
    _i=$1 _what=$2
    shift 2
    _env="PATH=$PWD/$BUILD/bin:/usr/local/bin:/usr/bin:/bin HOME=/root"
    _env="$_env HOSTNAME=$job-$_i JOB_COMPLETION_INDEX=$_i"
    for _v in $(echo "$facts" | sed -n 's/^env //p'); do
        case "$_v" in *=@secret) _v="${_v%%=*}=$secret" ;; esac
        _env="$_env $_v"
    done
    _unset=""
    while [ "$1" != -- ]; do
        case "$1" in -u) _unset="$_unset -u $2"; shift ;; *) _env="$_env $1" ;; esac
        shift
    done
    shift
    # shellcheck disable=SC2086 # word splitting of the variable lists is intended
    ip netns exec "$(cluster_host $((_i + 1)))" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
        "$job-$_i" env -i $_env env $_unset "$@" > "$logs/$_what.$_i" 2>&1 &
    pids="$pids $!"
}

# waitpods WHAT: waits for the two pods of WHAT, and as the Job's backoffLimit of 0 does,
# ends the other pod as soon as one fails; fails, showing their output, unless both succeeded.
waitpods() {
    _left="0 1" _failed=""
    while [ -n "$_left" ]; do
        for _i in $_left; do
            eval "_p=\$pid$_i"
            kill -0 "$_p" 2> /dev/null && continue
            wait "$_p" || { echo "k8s_pods: $1: the pod of index $_i failed"; _failed=1; }
            _left=$(echo "$_left" | sed "s/$_i//")
            _left=${_left# }
        done
        if [ -n "$_failed" ]; then
            for _i in $_left; do eval "kill \$pid$_i"; done
            break
        fi
        [ -z "$_left" ] || sleep 0.1
    done
    for _i in 0 1; do sed "s/^/$1.$_i| /" "$logs/$1.$_i"; done
    [ -z "$_failed" ] || exit 1
}

# 1. PyTorchJob style (MASTER_ADDR=<job>-0.<service> added), and pod 1 starts while pod 0 is
#    not scheduled yet, its name not in DNS: pod 1 waits for the name, then meets pod 0.
pod 1 matrix WORLD_SIZE=2 MASTER_ADDR="$job-0.$subdomain" -- "$prog"
pid1=$!
sleep 1
cluster_alias 1 "$(fqdn 0)" "$job-0.$subdomain" "$job-0"
pod 0 matrix WORLD_SIZE=2 MASTER_ADDR="$job-0.$subdomain" -- "$prog"
pid0=$!
waitpods matrix
for i in 0 1; do
    grep -q "launcher kubernetes: rank $i of 2, job k8s-$job, store $job-0.$subdomain:29500" "$logs/matrix.$i" ||
        { echo "k8s_pods: the pod of index $i did not report rank $i of 2 meeting at $job-0.$subdomain:29500"; exit 1; }
done
grep -q "coll_matrix: all collectives correct on 2 ranks" "$logs/matrix.0" ||
    { echo "k8s_pods: the collective matrix did not report success"; exit 1; }

# 2. The manifest as written: chorus-run in each pod starts its ranks; pod 0's serves the store.
for i in 0 1; do
    # shellcheck disable=SC2086 # the manifest's command is words
    pod $i bench -- $command
    eval "pid$i=\$!"
done
waitpods bench
world=$((2 * ranks))
for i in 0 1; do
    for r in $(seq $((i * ranks)) $((i * ranks + ranks - 1))); do
        grep -q "^\[$r\] .*launcher chorus-run: rank $r of $world, job nodes-${master%:*}-${master##*:}, store $master" "$logs/bench.$i" ||
            { echo "k8s_pods: the pod of index $i did not start rank $r of $world meeting at $master"; exit 1; }
    done
done
grep -q "($world ranks, 2 hosts): hierarchical allreduce, broadcast and allgather (shared memory within each host, TCP between hosts" "$logs/bench.0" ||
    { echo "k8s_pods: the ranks did not choose the hierarchical collectives"; exit 1; }
grep -q "# Out of bounds values : 0 OK" "$logs/bench.0" || { echo "k8s_pods: chorus-bench found wrong results"; exit 1; }

# 3. A pod whose name has no subdomain, and no MASTER_ADDR: told what to set.
# Without a subdomain Kubernetes writes only "IP <pod>" for the pod's own name.
cluster_alias 2 nosub-1
ip netns exec "$(cluster_host 2)" unshare --uts sh -c 'hostname nosub-1 && exec "$@"' - \
    env -i JOB_COMPLETION_INDEX=1 WORLD_SIZE=2 "$BUILD/bin/chorus-bench" > "$logs/nosub" 2>&1 &&
    { echo "k8s_pods: a pod with no way to find rank 0 started"; exit 1; }
cat "$logs/nosub"
grep -q "kubernetes: MASTER_ADDR is not set and rank 0's name cannot be derived: the pod's own DNS name 'nosub-1' has no subdomain" "$logs/nosub" ||
    { echo "k8s_pods: no clear error for a pod with no subdomain"; exit 1; }
grep -q "set spec.template.spec.subdomain to the headless Service's name, or MASTER_ADDR=<job>-0.<service>" "$logs/nosub" ||
    { echo "k8s_pods: the error does not say what to set"; exit 1; }

# 4. A manifest that forgot WORLD_SIZE.
env -i JOB_COMPLETION_INDEX=0 "$BUILD/bin/chorus-bench" > "$logs/nosize" 2>&1 &&
    { echo "k8s_pods: a pod with no world size started"; exit 1; }
cat "$logs/nosize"
grep -q "kubernetes: JOB_COMPLETION_INDEX=0 makes this a pod of an Indexed Job, but WORLD_SIZE is not set: set it in the container's env to the Job's completions" "$logs/nosize" ||
    { echo "k8s_pods: no clear error for a missing WORLD_SIZE"; exit 1; }
# 5. A rank 0 name that never resolves: the pod says so when its timeout ends.
ip netns exec "$(cluster_host 2)" env -i JOB_COMPLETION_INDEX=1 WORLD_SIZE=2 \
    MASTER_ADDR="$job-9.$subdomain" CHORUS_TIMEOUT_S=2 "$BUILD/bin/chorus-bench" > "$logs/noname" 2>&1 &&
    { echo "k8s_pods: a pod whose rank 0 has no name started"; exit 1; }
cat "$logs/noname"
grep -q "cannot resolve the host name '$job-9.$subdomain' (of $job-9.$subdomain:29500) before the timeout: is it right, and is its DNS record published yet?" "$logs/noname" ||
    { echo "k8s_pods: no clear error for a rank 0 name that never resolves"; exit 1; }
echo "k8s_pods: OK (2 pods of $manifest as namespace hosts: one rank per pod, the collective matrix through MASTER_ADDR, waiting for rank 0's name; the manifest's command, chorus-run starting $ranks ranks in each pod, hierarchical; the three errors)"
