#!/bin/sh
# multihost.sh - allreduce across hosts on links of a known rate: a namespace cluster
# (tests/net/cluster.sh) of 2 hosts whose links are shaped with tbf, 2 ranks per host, a
# float32 sum of SIZE bytes, for each RATE in turn:
#
#   iperf3   one TCP stream from host 1 to host 2 for 3 s: the rate a host's link gives
#   chorus   chorus-bench (ranks started the torchrun way inside the namespaces), by the rules
#            (hierarchical) and forced flat (CHORUS_ALGO_ALLREDUCE=direct_ring)
#   gloo     bench/gloo_allreduce.py through torch.distributed (Debian python3-torch), ranks
#            started with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
#   ompi     bench/mpi_allreduce under mpirun --mca btl tcp,self, started in host 1's namespace,
#            remote ranks through --mca plm_rsh_agent (a two-line wrapper of "ip netns exec")
#
# and then, at the first RATE, training on 2 hosts x 1 rank: chorus-train --grad-sync fused
# against PyTorch DDP (bench/train_ddp_torch.py --env), samples/s.
#
# The table gives each allreduce's median time and its link use: the bytes that must cross a
# host's link each way, 2(h-1)/h x SIZE for h hosts, divided by the time, as a fraction of
# iperf3's rate; and Chorus's ratios against Gloo and Open MPI.
#
#   sudo sh bench/multihost.sh              RATES="1gbit 10gbit" SIZE=64M ITERS=5 TRAIN=1
#   LANES="2 4": Chorus (by the rules) again with CHORUS_TCP_LANES=2, then 4: rows of their own
# Needs root (namespaces), iperf3, mpicc/mpirun, /usr/bin/python3 with torch; run after make.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
RATES=${RATES:-1gbit 10gbit}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-5}
TRAIN=${TRAIN:-1}
LANES=${LANES:-}
STEPS=${STEPS:-100}
PYTHON=${PYTHON:-/usr/bin/python3}
BENCH=$ROOT/$BUILD/bin/chorus-bench
[ -x "$BENCH" ] || { echo "multihost: $BENCH is missing (make)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "multihost: needs root (network namespaces)" >&2; exit 1; }
for t in iperf3 mpicc mpirun; do
    command -v $t > /dev/null || { echo "multihost: $t not found (apt-get install iperf3 openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done
RES=$(mktemp -d "${TMPDIR:-/tmp}/multihost.XXXXXX")
mpicc -O2 -o "$RES/mpi_allreduce" bench/mpi_allreduce.c || exit 1
# mpirun's remote shell: "ip netns exec HOST" given the command line as one string, as ssh
# would pass it to the remote shell (ip netns exec alone would exec it as one word).
printf '#!/bin/sh\nns=$1\nshift\nexec ip netns exec "$ns" sh -c "$*"\n' > "$RES/netns-rsh"
chmod +x "$RES/netns-rsh"
bytes=$("$PYTHON" -c "import sys; s=sys.argv[1].lower(); m={'k':1<<10,'m':1<<20,'g':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$SIZE")
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# multihost: 2 hosts x 2 ranks, allreduce float32 sum of $bytes B, $ITERS timed iterations; $(nproc) cores; load before: $(load)"
echo "# $(git describe --always --dirty 2>/dev/null), $(mpirun --version 2>/dev/null | head -n 1), torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

# One rate: a cluster of its own, removed when the subshell ends (cluster.sh's trap).
one_rate() (
    rate=$1
    . tests/net/cluster.sh
    cluster_up mh 2 "$rate"
    h1=$(cluster_host 1) h2=$(cluster_host 2) a1=$(cluster_addr 1) a2=$(cluster_addr 2)

    # iperf3: the server answers one test and exits.
    ip netns exec "$h2" iperf3 -s -1 -p 5201 > "$logs/iperf-s" 2>&1 &
    pids="$pids $!"
    sleep 0.5
    ip netns exec "$h1" iperf3 -c "$a2" -p 5201 -t 3 -f m > "$logs/iperf" 2>&1
    iperf=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") print $i }' "$logs/iperf")

    # ranks R..: 0,1 on host 1 and 2,3 on host 2, started the torchrun way; $1 = log name
    four() {
        name=$1
        shift
        set -- "$@"
        p4=""
        for r in 0 1 2 3; do
            ns=$h1
            [ $r -ge 2 ] && ns=$h2
            ip netns exec "$ns" env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 \
                MASTER_ADDR="$a1" MASTER_PORT=29600 GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
                CHORUS_JOB_ID="mh-$name-$tag" "$@" > "$logs/$name.$r" 2>&1 &
            p4="$p4 $!"
            pids="$pids $!"
        done
        for p in $p4; do wait "$p" || echo "multihost: $name: a rank failed, see below" >&2; done
        grep -q . "$logs/$name.0" || true
    }
    # median time in ms of an nccl-tests style row (chorus-bench: column 6; baselines: 3)
    ms_of() { awk -v c="$2" -v b="$bytes" '!/^#/ && $1 == b { printf "%.1f", $c / 1000 }' "$1"; }

    four chorus "$BENCH" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -a 3 -c 0
    four flat env CHORUS_ALGO_ALLREDUCE=direct_ring "$BENCH" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -a 3 -c 0
    lane_ms=""
    for l in $LANES; do
        four "lanes$l" env CHORUS_TCP_LANES="$l" "$BENCH" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -a 3 -c 0
        lane_ms="$lane_ms chorus (hier, $l TCP lanes)=$(ms_of "$logs/lanes$l.0" 6)"
    done
    four gloo "$PYTHON" bench/gloo_allreduce.py -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -k 0
    ip netns exec "$h1" mpirun --allow-run-as-root --oversubscribe -H "$h1:2,$h2:2" -np 4 \
        --mca plm_rsh_agent "$RES/netns-rsh" --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
        "$RES/mpi_allreduce" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 > "$logs/ompi.0" 2>&1 ||
        { echo "multihost: mpirun failed:" >&2; tail -5 "$logs/ompi.0" >&2; }
    for n in chorus flat gloo ompi; do
        [ -s "$logs/$n.0" ] || continue
        if ! grep -q "^ *$bytes " "$logs/$n.0"; then
            echo "multihost: no result from $n:" >&2
            tail -5 "$logs/$n."* >&2
        fi
    done
    c=$(ms_of "$logs/chorus.0" 6) f=$(ms_of "$logs/flat.0" 6)
    g=$(ms_of "$logs/gloo.0" 3) o=$(ms_of "$logs/ompi.0" 3)
    "$PYTHON" - "$rate" "$bytes" "$iperf" "$c" "$f" "$g" "$o" "$(load)" "$lane_ms" << 'PY'
import re
import sys
rate, S, iperf = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = dict(zip(("chorus (hier)", "chorus (flat, direct_ring)", "gloo", "open mpi"), sys.argv[4:8]))
for k, v in re.findall(r"(chorus \(hier, \d+ TCP lanes\))=([0-9.]*)", sys.argv[9]):
    t[k] = v
need = 2 * (2 - 1) / 2 * S  # bytes each way over a host's link, h = 2
ip = float(iperf) * 1e6 / 8 if iperf else 0.0
print(f"\n## {rate}: iperf3 {ip / 1e9:.3f} GB/s (one stream), load {sys.argv[8]}\n")
print("| allreduce 2x2, %d MiB | time (ms) | link use (GB/s) | of iperf3 | chorus speed-up |" % (S >> 20))
print("|---|---|---|---|---|")
c = float(t["chorus (hier)"] or 0)
for k, v in t.items():
    if not v:
        print(f"| {k} | failed | | | |")
        continue
    ms = float(v)
    bw = need / (ms / 1e3)
    ratio = "" if k.startswith("chorus (hier)") or not c else f"{ms / c:.2f}x"
    print(f"| {k} | {ms:.1f} | {bw / 1e9:.3f} | {100 * bw / ip if ip else 0:.0f}% | {ratio} |")
PY
    [ "$TRAIN" = 1 ] || exit 0
    # Training, 2 hosts x 1 rank: samples/s over STEPS steps after 10 of warm-up.
    pt=""
    for r in 0 1; do
        ns=$h1
        [ $r = 1 ] && ns=$h2
        ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
            MASTER_ADDR="$a1" MASTER_PORT=29601 CHORUS_JOB_ID="mh-train-$tag" \
            "$ROOT/$BUILD/bin/chorus-train" --model mlp --batch 256 --epochs 1 --threads 1 --no-eval \
            --max-steps $((STEPS + 10)) --grad-sync fused --log-every 1000000 \
            --metrics "$logs/train.$r.jsonl" > "$logs/train.$r" 2>&1 &
        pt="$pt $!"
    done
    for p in $pt; do wait "$p"; done
    ct=$("$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l][10:]
print("%.0f" % (sum(r["samples_per_s"] * r["step_s"] for r in rows) / sum(r["step_s"] for r in rows)))
' "$logs/train.0.jsonl" 2>/dev/null)
    pt=""
    for r in 0 1; do
        ns=$h1
        [ $r = 1 ] && ns=$h2
        ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 MASTER_ADDR="$a1" MASTER_PORT=29602 \
            GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
            "$PYTHON" bench/train_ddp_torch.py --env --batch 256 --steps "$STEPS" --warmup 10 \
            > "$logs/ddp.$r" 2>&1 &
        pt="$pt $!"
    done
    for p in $pt; do wait "$p"; done
    dt=$(sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$logs/ddp.0" | tail -n 1)
    echo
    echo "| training, 2 hosts x 1 rank at $rate, MLP, global batch 256 | samples/s |"
    echo "|---|---|"
    echo "| chorus-train --grad-sync fused | ${ct:-failed} |"
    echo "| PyTorch DDP (gloo) | ${dt:-failed} |"
    [ -n "$ct" ] && [ -n "$dt" ] && echo "chorus-train / DDP: $(echo "$ct $dt" | awk '{printf "%.2f", $1 / $2}')x"
    [ -n "$ct" ] || tail -5 "$logs/train.0" >&2
    [ -n "$dt" ] || tail -5 "$logs/ddp.0" >&2
)

first=1
for rate in $RATES; do
    if [ $first = 1 ]; then one_rate "$rate"; else TRAIN=0 one_rate "$rate"; fi
    first=0
done
echo
echo "# load after: $(load)"
rm -rf "$RES"
