#!/bin/sh
# k8s_manifests.sh - checks deploy/kubernetes/ offline, with no cluster and nothing contacted
# (HOME and KUBECONFIG point at an empty directory; every kubectl call is --local):
#   - kubectl decodes the Job and the Service into their typed API objects (wrong types and bad
#     quantities fail there), and a field the typed objects do not have (a misspelt one, which
#     the decoder drops silently) is reported;
#   - every file parses as Kubernetes objects (kubectl annotate --local);
#   - the objects agree with each other the way Chorus needs (docs/KUBERNETES.md): an Indexed
#     Job, PET_NNODES = completions = parallelism, PET_NPROC_PER_NODE ranks per pod, the pods'
#     subdomain is the headless Service, PET_MASTER_ADDR (and MASTER_ADDR where set) is
#     <job>-0.<service>[.<namespace>...], PET_MASTER_PORT is the Service's port, the selectors
#     of the Service and the PodDisruptionBudget match the pods, the secret comes from a Secret;
#   - the same for what `kubectl kustomize` renders from kustomization.yaml (the job's shape
#     in one place), and a shape changed there reaches every field it sets.
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
    kubectl annotate --local --dry-run=client -f "$1/job.yaml" -f "$1/service.yaml" \
        -f "$1/pdb.yaml" checked=yes -o name || return 1
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
if not (str(spec.get("completions")) == str(spec.get("parallelism")) == str(val("PET_NNODES"))):
    bad.append("job.yaml: completions (%s), parallelism (%s) and PET_NNODES (%s) must be equal"
               % (spec.get("completions"), spec.get("parallelism"), val("PET_NNODES")))
if not str(val("PET_NPROC_PER_NODE")).isdigit() or int(val("PET_NPROC_PER_NODE")) < 1:
    bad.append("job.yaml: PET_NPROC_PER_NODE (%s) must be the ranks of a pod, 1 or more"
               % val("PET_NPROC_PER_NODE"))
if c.get("command", [None])[0] != "chorus-run":
    bad.append("job.yaml: the container's command must start chorus-run (it starts the pod's ranks)")
if pod.get("subdomain") != svcname:
    bad.append("job.yaml: the pods' subdomain (%s) must be the headless Service's name (%s)"
               % (pod.get("subdomain"), svcname))
if svc["spec"].get("clusterIP") != "None":
    bad.append("service.yaml: the Service must be headless (clusterIP: None)")
if not svc["spec"].get("publishNotReadyAddresses"):
    bad.append("service.yaml: publishNotReadyAddresses must be true (names resolve while pods start)")
rank0 = "%s-0.%s" % (jobname, svcname)
for var in ("PET_MASTER_ADDR", "MASTER_ADDR"):
    if (val(var) is not None or var == "PET_MASTER_ADDR") and \
            not (str(val(var)) + ".").startswith(rank0 + "."):
        bad.append("job.yaml: %s (%s) must be rank 0's name %s-0.%s"
                   % (var, val(var), jobname, svcname))
ports = [p["port"] for p in svc["spec"].get("ports", [])]
if str(val("PET_MASTER_PORT") or 29500) not in [str(p) for p in ports]:
    bad.append("job.yaml: PET_MASTER_PORT (%s) is not a port of the Service (%s)"
               % (val("PET_MASTER_PORT") or 29500, ports))
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

# kustomized DIR OUT: what kubectl kustomize renders from DIR, one file per kind in OUT.
kustomized() {
    mkdir -p "$2" && kubectl kustomize "$1" > "$2/all.yaml" || return 1
    python3 - "$2" << 'EOF' || return 1
import sys, yaml
out = sys.argv[1]
docs = [x for x in yaml.safe_load_all(open(out + "/all.yaml")) if x]
names = {"Job": "job.yaml", "Service": "service.yaml", "PodDisruptionBudget": "pdb.yaml"}
kinds = sorted(d["kind"] for d in docs)
if kinds != sorted(names):
    sys.exit("kubectl kustomize renders %s, not a Job, a Service and a PodDisruptionBudget" % kinds)
for d in docs:
    yaml.safe_dump(d, open("%s/%s" % (out, names[d["kind"]]), "w"))
EOF
}
# kubectl before 1.24 bundles a kustomize without replacements (Debian's 1.20 among them).
if [ "${minor:-0}" -lt 24 ]; then
    echo "note: kubectl 1.${minor:-0} bundles a kustomize without replacements: kustomization.yaml not checked"
else
kustomized "$dir" "$work/kust" && check "$work/kust" ||
    { echo "k8s_manifests: what kubectl kustomize $dir renders has problems (above)"; exit 1; }
echo "kubectl kustomize $dir: the rendered Job, Service and PodDisruptionBudget pass the same checks"
# A shape changed in kustomization.yaml reaches every field it sets.
rm -rf "$work/shape" && cp -r "$dir" "$work/shape"
sed -i 's/- pods=[0-9]*/- pods=5/; s/- ranksPerPod=[0-9]*/- ranksPerPod=3/; s/- cpu=[0-9]*/- cpu=7/; s/- memory=[0-9A-Za-z]*/- memory=9Gi/; s/- shmSize=[0-9A-Za-z]*/- shmSize=3Gi/; s/- image=.*/- image=chorus-torch:1/' \
    "$work/shape/kustomization.yaml"
kustomized "$work/shape" "$work/shape-out" && check "$work/shape-out" ||
    { echo "k8s_manifests: a changed shape renders manifests with problems (above)"; exit 1; }
python3 - "$work/shape-out/job.yaml" << 'EOF' || exit 1
import sys, yaml
job = yaml.safe_load(open(sys.argv[1]))
s, c = job["spec"], job["spec"]["template"]["spec"]["containers"][0]
env = {v["name"]: v.get("value") for v in c["env"]}
got = (s["completions"], s["parallelism"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"],
       c["resources"]["requests"]["cpu"], c["resources"]["limits"]["cpu"],
       c["resources"]["requests"]["memory"], c["resources"]["limits"]["memory"],
       job["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"], c["image"])
want = (5, 5, "5", "3", "7", "7", "9Gi", "9Gi", "3Gi", "chorus-torch:1")
if got != want:
    sys.exit("k8s_manifests: the shape pods=5 ranksPerPod=3 cpu=7 memory=9Gi shmSize=3Gi "
             "image=chorus-torch:1 rendered %s, not %s" % (got, want))
print("kustomization.yaml: pods, ranksPerPod, cpu, memory, shmSize and image reach every field they set")
EOF
fi

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
broken "PET_NNODES 3" '/name: PET_NNODES/{n;s/"2"/"3"/}' \
    'completions (2), parallelism (2) and PET_NNODES (3) must be equal'
broken "a store port the Service has not" '/name: PET_MASTER_PORT/{n;s/"29500"/"29600"/}' \
    'PET_MASTER_PORT (29600) is not a port of the Service'
if [ "${minor:-0}" -ge 24 ]; then
    broken "a misspelt field" 's/subdomain: chorus/subdomian: chorus/' \
        "subdomian is not a field of batch/v1 Job"
fi
broken "a memory request that is no quantity" 's/memory: 4Gi/memory: eight/' \
    "quantities must match"
echo "k8s_manifests: OK ($dir, and what kubectl kustomize renders from it, decode into typed objects with no unknown field, and their objects agree)"
