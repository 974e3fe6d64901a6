"""pod_args.py - what podman needs to run the pod of one completion index of an Indexed Job,
read from the manifests that `kubectl kustomize deploy/kubernetes/` renders (on stdin).

    python3 pod_args.py facts < rendered.yaml
        shell assignments: job, subdomain, pods, ranks (PET_NPROC_PER_NODE), image, timeout
        (CHORUS_TIMEOUT_S)
    python3 pod_args.py run INDEX IP HOSTS_FILE SECRET_FILE NETWORK RUN_ID SUBNET_HOSTS \\
            [--image IMG] [--mount SRC:DST[:ro]]... [--env VAR=VALUE]... [-- COMMAND...]
            < rendered.yaml
        the arguments of `podman run` (NUL-separated, for xargs -0 or a bash array) for the pod
        of index INDEX with the address IP, and HOSTS_FILE written as the kubelet writes a pod's
        /etc/hosts. SUBNET_HOSTS is "IP0,IP1,..." (every pod's address: the cluster DNS's
        answers for the headless Service, which the network's DNS gives as aliases).

What a pod of the Job gets, and how it is played here:
  hostname <job>-I, subdomain      --hostname, and /etc/hosts with the kubelet's line
                                   "IP <job>-I.<subdomain>.<ns>.svc.<domain> <job>-I"
  the Service's DNS names           --network-alias <job>-I.<subdomain> and the full name on a
                                   podman network with DNS; the pod's resolver searches
                                   <ns>.svc.<domain>, svc.<domain>, <domain> with ndots:5
  labels (the Job controller's)    --label job-name=<job>, batch.kubernetes.io/job-name,
                                   batch.kubernetes.io/job-completion-index=I, controller-uid
                                   (the run's id), and the template's labels
  environment                      the container's env as written, a secretKeyRef from
                                   SECRET_FILE, plus JOB_COMPLETION_INDEX=I (the controller's)
                                   and HOSTNAME (the kubelet's)
  resources                        limits: --cpus, --memory
  emptyDir medium Memory           tmpfs of sizeLimit (at /dev/shm: --shm-size)
  command, args, image             as written (IMG, COMMAND: the container test's workloads;
                                   --mount and --env add what a workload needs, after the
                                   manifest's own)
  restartPolicy Never              podman's default (no restart)
Anything else in the pod or container spec is refused by name: the container test must not
pass for a manifest it does not play.
"""
import sys

import yaml

NAMESPACE, DOMAIN = "default", "cluster.local"
POD_KEYS = {"subdomain", "restartPolicy", "enableServiceLinks", "containers", "volumes"}
CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
                  "resources", "volumeMounts"}


def load():
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    jobs = [d for d in docs if d.get("kind") == "Job"]
    if len(jobs) != 1:
        sys.exit("pod_args: the manifests have %d Jobs, not 1" % len(jobs))
    job = jobs[0]
    pod = job["spec"]["template"]["spec"]
    if job["spec"].get("completionMode") != "Indexed":
        sys.exit("pod_args: the Job is not Indexed")
    for k in pod:
        if k not in POD_KEYS:
            sys.exit("pod_args: the pod template's %s is not played by the container test" % k)
    if pod.get("restartPolicy") != "Never":
        sys.exit("pod_args: restartPolicy %s is not played (Never is)" % pod.get("restartPolicy"))
    if len(pod["containers"]) != 1:
        sys.exit("pod_args: the container test plays pods of one container")
    c = pod["containers"][0]
    for k in c:
        if k not in CONTAINER_KEYS:
            sys.exit("pod_args: the container's %s is not played by the container test" % k)
    return job, pod, c


def env_of(c):
    return {v["name"]: v.get("value") for v in c.get("env", [])}


def quantity_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for u, m in units.items():
        if q.endswith(u):
            return int(float(q[:-len(u)]) * m)
    return int(q)


def cpus(q):
    return str(int(q[:-1]) / 1000) if q.endswith("m") else q


def facts():
    job, pod, c = load()
    env = env_of(c)
    print("job=%s" % job["metadata"]["name"])
    print("subdomain=%s" % pod.get("subdomain", ""))
    print("pods=%s" % job["spec"]["completions"])
    print("ranks=%s" % env.get("PET_NPROC_PER_NODE", 1))
    print("image=%s" % c["image"])
    print("timeout=%s" % env.get("CHORUS_TIMEOUT_S", 300))


def run(argv):
    index, ip, hosts_file, secret_file, network, run_id = argv[:6]
    rest = argv[6:]
    image, mounts, extra_env, command = None, [], [], None
    while rest:
        a = rest.pop(0)
        if a == "--image":
            image = rest.pop(0)
        elif a == "--mount":
            mounts.append(rest.pop(0))
        elif a == "--env":
            extra_env.append(tuple(rest.pop(0).split("=", 1)))
        elif a == "--":
            command = rest
            break
        else:
            sys.exit("pod_args: unknown argument %s" % a)
    job, pod, c = load()
    i = int(index)
    name, sub = job["metadata"]["name"], pod.get("subdomain")
    host = "%s-%d" % (name, i)
    fqdn = "%s.%s.%s.svc.%s" % (host, sub, NAMESPACE, DOMAIN) if sub else host
    with open(hosts_file, "w") as f:  # as the kubelet writes it
        f.write("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
                "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
                "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
        f.write("%s\t%s\t%s\n" % (ip, fqdn, host) if sub else "%s\t%s\n" % (ip, host))
    a = ["--name", "%s-%s" % (run_id, host), "--hostname", host,
         "--network", network, "--ip", ip, "--no-hosts",
         "--volume", "%s:/etc/hosts:ro" % hosts_file,
         "--dns-search", "%s.svc.%s" % (NAMESPACE, DOMAIN), "--dns-search", "svc." + DOMAIN,
         "--dns-search", DOMAIN, "--dns-option", "ndots:5",
         "--label", "chorus-test=" + run_id,
         "--label", "job-name=" + name, "--label", "batch.kubernetes.io/job-name=" + name,
         "--label", "batch.kubernetes.io/job-completion-index=%d" % i,
         "--label", "controller-uid=" + run_id,
         "--annotation", "batch.kubernetes.io/job-completion-index=%d" % i,
         "--pull", "never"]
    if sub:
        a += ["--network-alias", "%s.%s" % (host, sub), "--network-alias", fqdn]
    for k, v in job["spec"]["template"].get("metadata", {}).get("labels", {}).items():
        a += ["--label", "%s=%s" % (k, v)]
    env = [("JOB_COMPLETION_INDEX", str(i)), ("HOSTNAME", host)]
    for v in c.get("env", []):
        if "value" in v:
            env.append((v["name"], str(v["value"])))
        elif "secretKeyRef" in v.get("valueFrom", {}):
            env.append((v["name"], open(secret_file).read().strip()))
        else:
            sys.exit("pod_args: env %s: only values and secretKeyRef are played" % v["name"])
    for k, v in env + extra_env:
        a += ["--env", "%s=%s" % (k, v)]
    limits = c.get("resources", {}).get("limits", {})
    if "cpu" in limits:
        a += ["--cpus", cpus(str(limits["cpu"]))]
    if "memory" in limits:
        a += ["--memory", str(quantity_bytes(str(limits["memory"])))]
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"], {})
        ed = v.get("emptyDir")
        if ed is None or ed.get("medium") != "Memory" or set(v) - {"name", "emptyDir"}:
            sys.exit("pod_args: volume %s: only emptyDir of medium Memory is played" % m["name"])
        size = quantity_bytes(str(ed.get("sizeLimit", "64Mi")))
        if m["mountPath"] == "/dev/shm":
            a += ["--shm-size", str(size)]
        else:
            a += ["--mount", "type=tmpfs,destination=%s,tmpfs-size=%d" % (m["mountPath"], size)]
    for m in mounts:
        a += ["--volume", m]
    a.append(image or c["image"])
    a += command if command else c.get("command", []) + c.get("args", [])
    sys.stdout.write("\0".join(a) + "\0")


if __name__ == "__main__":
    if sys.argv[1] == "facts":
        facts()
    elif sys.argv[1] == "run":
        run(sys.argv[2:])
    else:
        sys.exit(__doc__)
