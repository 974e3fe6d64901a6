#!/bin/sh
# k8s_manifests.sh - checks deploy/kubernetes/ offline, with no cluster and nothing contacted
# (HOME and KUBECONFIG point at an empty directory; every kubectl call is --local):
#   - kubectl decodes the Job and the Service into their typed API objects (wrong types and bad
#     quantities fail there), and a field the typed objects do not have (a misspelt one, which
#     the decoder drops silently) is reported;
#   - every file parses as Kubernetes objects (kubectl annotate --local);
#   - the objects agree with each other the way Chorus needs (docs/KUBERNETES.md): an Indexed
#     Job, WORLD_SIZE = completions = parallelism, the pods' subdomain is the headless Service,
#     MASTER_ADDR (where set) is <job>-0.<service>[.<namespace>...], MASTER_PORT is the Service's port, the selectors of the
#     Service and the PodDisruptionBudget match the pods, the secret comes from a Secret.
# Then it shows that the check can fail: broken copies are rejected with the expected message.
# `kubectl apply --dry-run=client` itself cannot run here: even with --validate=false it asks
# an API server for the resource mapping. When no kubectl is on PATH, Debian's
# kubernetes-client is installed where root can (tools/deps.sh); otherwise one SKIP line.
dir=deploy/kubernetes
if ! command -v kubectl > /dev/null 2>&1; then
    sh tools/deps.sh "the Kubernetes manifest check" kubernetes-client > /dev/null 2>&1 &&
        command -v kubectl > /dev/null 2>&1 ||
        { echo "SKIP k8s_manifests: no kubectl (install Debian's kubernetes-client)"; exit 0; }
fi
# python3-yaml reads the manifests; as root it is installed when missing (tools/deps.sh).
python3 -c 'import yaml' 2> /dev/null || sh tools/deps.sh "the Kubernetes tests" python3-yaml > /dev/null 2>&1
python3 -c 'import yaml' 2> /dev/null ||
    { echo "SKIP k8s_manifests: python3 with yaml (python3-yaml) is not installed"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'rm -rf "$work"; exit 1' INT TERM HUP
export HOME="$work" KUBECONFIG="$work/no-cluster"
minor=$(kubectl version --client -o json 2> /dev/null |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin)["clientVersion"]["minor"].rstrip("+")))')
echo "kubectl $(kubectl version --client 2> /dev/null | head -n 1)"

# check DIR: every check above on the manifests in DIR; the reasons on stdout, non-zero if any.
check() {
    kubectl annotate --local --dry-run=client -f "$1" checked=yes -o name || return 1
    kubectl set env --local -f "$1/job.yaml" ROUNDTRIP=1 -o yaml > "$work/job.typed" || return 1
    kubectl set selector --local -f "$1/service.yaml" app.kubernetes.io/name=chorus -o yaml \
        > "$work/service.typed" || return 1
    python3 - "$1" "$work" "${minor:-0}" << 'EOF'
import sys, yaml
d, work, minor = sys.argv[1], sys.argv[2], int(sys.argv[3])
bad = []
def load(path):
    return [x for x in yaml.safe_load_all(open(path)) if x]
def paths(x, pre=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from paths(v, pre + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from paths(v, pre + (i,))
    else:
        yield pre
def has(x, p):
    for part in p:
        if isinstance(part, int):
            if not isinstance(x, list) or part >= len(x): return False
        elif not isinstance(x, dict) or part not in x: return False
        x = x[part]
    return True
def show(p):
    return "".join("[%d]" % k if isinstance(k, int) else "." + k for k in p).lstrip(".")
job, = load(d + "/job.yaml")
svc, = load(d + "/service.yaml")
pdb, = load(d + "/pdb.yaml")
# Fields the typed objects dropped: not part of the API. Indexed Jobs are batch/v1 from
# Kubernetes 1.24 on; an older kubectl's Job type lacks their fields.
for name, orig, typed in (("service.yaml", svc, load(work + "/service.typed")[0]),
                          ("job.yaml", job, load(work + "/job.typed")[0])):
    if name == "job.yaml" and minor < 24:
        print("note: kubectl 1.%d predates Indexed Jobs: unknown Job fields not checked" % minor)
        continue
    for p in paths(orig):
        if not has(typed, p):
            bad.append("%s: %s is not a field of %s %s" % (name, show(p), orig["apiVersion"], orig["kind"]))
spec = job["spec"]
pod = spec["template"]["spec"]
labels = spec["template"]["metadata"]["labels"]
c = pod["containers"][0]
env = {v["name"]: v for v in c.get("env", [])}
val = lambda n: env.get(n, {}).get("value")
jobname, svcname = job["metadata"]["name"], svc["metadata"]["name"]
if spec.get("completionMode") != "Indexed":
    bad.append("job.yaml: completionMode must be Indexed (the rank is the completion index)")
if not (str(spec.get("completions")) == str(spec.get("parallelism")) == str(val("WORLD_SIZE"))):
    bad.append("job.yaml: completions (%s), parallelism (%s) and WORLD_SIZE (%s) must be equal"
               % (spec.get("completions"), spec.get("parallelism"), val("WORLD_SIZE")))
if pod.get("subdomain") != svcname:
    bad.append("job.yaml: the pods' subdomain (%s) must be the headless Service's name (%s)"
               % (pod.get("subdomain"), svcname))
if svc["spec"].get("clusterIP") != "None":
    bad.append("service.yaml: the Service must be headless (clusterIP: None)")
if not svc["spec"].get("publishNotReadyAddresses"):
    bad.append("service.yaml: publishNotReadyAddresses must be true (names resolve while pods start)")
rank0 = "%s-0.%s" % (jobname, svcname)
if val("MASTER_ADDR") is not None and not (val("MASTER_ADDR") + ".").startswith(rank0 + "."):
    bad.append("job.yaml: MASTER_ADDR (%s) must be rank 0's name %s-0.%s"
               % (val("MASTER_ADDR"), jobname, svcname))
ports = [p["port"] for p in svc["spec"].get("ports", [])]
if str(val("MASTER_PORT") or 29500) not in [str(p) for p in ports]:
    bad.append("job.yaml: MASTER_PORT (%s) is not a port of the Service (%s)"
               % (val("MASTER_PORT") or 29500, ports))
for name, sel in (("service.yaml", svc["spec"].get("selector", {})),
                  ("pdb.yaml", pdb["spec"].get("selector", {}).get("matchLabels", {}))):
    if not sel or any(labels.get(k) != v for k, v in sel.items()):
        bad.append("%s: the selector %s does not match the pods' labels %s" % (name, sel, labels))
if "secretKeyRef" not in env.get("CHORUS_SECRET", {}).get("valueFrom", {}):
    bad.append("job.yaml: CHORUS_SECRET must come from a Secret (valueFrom.secretKeyRef)")
if pod.get("restartPolicy") != "Never":
    bad.append("job.yaml: restartPolicy must be Never (a restarted rank cannot rejoin its job)")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
}

check "$dir" || { echo "k8s_manifests: $dir has problems (above)"; exit 1; }

# broken WHAT SED EXPECTED: a copy of the manifests changed by SED must fail, saying EXPECTED.
broken() {
    rm -rf "$work/copy" && cp -r "$dir" "$work/copy" && sed -i "$2" "$work/copy/job.yaml"
    if check "$work/copy" > "$work/out" 2>&1; then
        echo "k8s_manifests: a copy with $1 passed the check"
        exit 1
    fi
    grep -q "$3" "$work/out" || {
        cat "$work/out"
        echo "k8s_manifests: a copy with $1 was rejected without saying: $3"
        exit 1
    }
    echo "rejected, as it must be, a copy with $1: $(grep "$3" "$work/out")"
}
broken "WORLD_SIZE 3" '/name: WORLD_SIZE/{n;s/"2"/"3"/}' \
    'completions (2), parallelism (2) and WORLD_SIZE (3) must be equal'
if [ "${minor:-0}" -ge 24 ]; then
    broken "a misspelt field" 's/subdomain: chorus/subdomian: chorus/' \
        "subdomian is not a field of batch/v1 Job"
fi
broken "a memory request that is no quantity" 's/memory: 8Gi/memory: eight/' \
    "quantities must match"
echo "k8s_manifests: OK ($dir decodes into typed objects with no unknown field, and its objects agree)"
