#!/bin/sh
# topology.sh - the host a benchmark ran on, as '# ' lines to print above its table: CPU model,
# CPUs (sockets, cores, threads), for each cache level its size and which CPUs share each
# instance, NUMA nodes, memory, memory bandwidth (bench/membw.c), kernel, load, BLAS, commit.
#
#   sh bench/topology.sh                 measures the memory bandwidth (about 2-10 s)
#   TOPO_MEMBW=FILE sh bench/topology.sh uses a bench/membw output already taken
#   TOPO_MEMBW=skip sh bench/topology.sh no bandwidth line (the caller prints its own)
#   BUILD=build                          chorus-train there names the BLAS it links
#
# Every bench/ script that prints a table prints this above it (bench/common.sh describe_env
# for the compare_* scripts); bench/summary.sh keeps it with docs/PERFORMANCE.md's summary.
# Reads only /proc and /sys (Linux); a missing file leaves its line out, never fails.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
SYS=/sys/devices/system

first() { sed -n "s/^$1[[:space:]]*: *//p" /proc/cpuinfo | head -n 1; }

echo "# host: $(uname -n), $(uname -srm)$(grep -qw hypervisor /proc/cpuinfo && echo ', under a hypervisor')"
cpus=$(nproc --all 2>/dev/null || getconf _NPROCESSORS_ONLN)
online=$(cat $SYS/cpu/online 2>/dev/null || echo "?")
sockets=$(cat $SYS/cpu/cpu*/topology/physical_package_id 2>/dev/null | sort -u | wc -l)
cores=$(for c in "$SYS"/cpu/cpu[0-9]*; do
    [ -r "$c/topology/core_id" ] &&
        echo "$(cat "$c/topology/physical_package_id").$(cat "$c/topology/core_id")"
done | sort -u | wc -l)
echo "# cpu: $(first 'model name') (family $(first 'cpu family'), model $(first 'model')), $cpus CPUs (online $online): $sockets socket(s)," \
    "$cores core(s), $((cpus / (cores > 0 ? cores : 1))) thread(s) per core; this process may use $(nproc) CPUs"

# Caches: per (level, type, size) the distinct shared_cpu_list values, i.e. its instances.
for c in "$SYS"/cpu/cpu[0-9]*; do
    for i in "$c"/cache/index*; do
        [ -r "$i/level" ] || continue
        t=$(cat "$i/type")
        case $t in Data) t=d ;; Instruction) t=i ;; *) t="" ;; esac
        printf '%s\t%s\t%s\n' "L$(cat "$i/level")$t" "$(cat "$i/size")" "$(cat "$i/shared_cpu_list")"
    done
done | sort -u | awk -F '\t' '
    { k = $1 " " $2; if (!(k in g)) { order[++n] = k; g[k] = "" }
      g[k] = g[k] " [" $3 "]"; cnt[k]++ }
    END { for (i = 1; i <= n; i++) { k = order[i]; split(k, p, " ")
          printf "# cache %s %s: %d instance(s), CPUs sharing each:%s\n", p[1], p[2], cnt[k], g[k] } }' |
    sort -k3,3

nodes=""
for n in "$SYS"/node/node[0-9]*; do
    [ -r "$n/cpulist" ] && nodes="$nodes ${n##*/} [$(cat "$n/cpulist")]"
done
echo "# numa:${nodes:- not reported}; memory $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"

membw=${TOPO_MEMBW:-}
if [ "$membw" != skip ]; then
    if [ -z "$membw" ]; then
        tmp=$(mktemp -d "${TMPDIR:-/tmp}/topology.XXXXXX")
        # shellcheck disable=SC2064  # expand now: the path is fixed
        trap "rm -rf '$tmp'" EXIT
        if ${CC:-cc} -O2 -pthread -o "$tmp/membw" "$HERE/membw.c" 2>"$tmp/cc.err"; then
            "$tmp/membw" -t "1,$(nproc)" >"$tmp/membw.txt" 2>&1 || :
        fi
        membw=$tmp/membw.txt
    fi
    echo "# memory bandwidth (bench/membw, GB/s, 256 MiB arrays, best of 7 runs):" \
        "$(awk 'NF == 3 && !/^#/ { printf "%s%s %st %s", s, $1, $2, $3; s = ", " }' "$membw" 2>/dev/null)"
fi

echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"

blas=$(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null ||
    dpkg-query -W -f='${Version}' libopenblas0 2>/dev/null || echo "not installed as a Debian package")
lib=""
[ -x "$BUILD/bin/chorus-train" ] &&
    lib=$(ldd "$BUILD/bin/chorus-train" 2>/dev/null | sed -n 's/.*\(libopenblas[^ ]*\|libblas[^ ]*\) => \([^ ]*\).*/\2/p' | head -n 1)
echo "# blas: OpenBLAS $blas${lib:+ (chorus-train links $lib)};" \
    "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset}"
echo "# commit: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)" \
    "($(git -C "$ROOT" log -1 --format=%cd --date=short 2>/dev/null || echo '?'))"
