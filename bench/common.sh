# shellcheck shell=sh disable=SC2034  # FAILED and the knobs are read by the sourcing scripts
# Shared by bench/compare_*.sh: paths, knobs, building the baselines, running each library.
# Sourced, not run. Every knob is an environment variable with a default:
#
#   BUILD=build          Chorus build dir (relative paths are relative to the repository root)
#   MIN=4 MAX=64M FACTOR=4    sweep, bytes (K/M/G = 1024-based)
#   REPEAT=1             runs of every benchmark, interleaved; tables show per-size medians
#   OUT=<new temp dir>   where the baselines are built and the raw outputs are kept
#   PYTHON=/usr/bin/python3   a Python with torch (Debian python3-torch)
#   MPICC=mpicc MPIRUN=mpirun  MPIRUN_FLAGS=   extra flags for every mpirun
#   CHORUS_ARGS=         extra arguments for chorus-bench
#   CHORUS_COLS=         column override for chorus-bench's output, e.g. size=1,time=6,busbw=8
#                        (default: found by name from its '#' header; see bench/benchtab.py)

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
MIN=${MIN:-4}
MAX=${MAX:-64M}
FACTOR=${FACTOR:-4}
REPEAT=${REPEAT:-1}
PYTHON=${PYTHON:-/usr/bin/python3}
MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_FLAGS=${MPIRUN_FLAGS:-}
CHORUS_ARGS=${CHORUS_ARGS:-}
CHORUS_COLS=${CHORUS_COLS:-}
CHORUS_RUN=$BUILD/bin/chorus-run
CHORUS_BENCH=$BUILD/bin/chorus-bench
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/chorus-compare.XXXXXX")}
mkdir -p "$OUT"
NCPU=$(nproc 2>/dev/null || echo 1)
FAILED=0

# Open MPI refuses to start as root without this flag; --oversubscribe lets np exceed cores.
# pml ob1 is forced so the --mca btl choice is honoured (the ucx pml would bypass the btls).
MPI_BASE="--allow-run-as-root --oversubscribe --mca pml ob1"

say() { printf '%s\n' "$*" >&2; }

# Builds bench/mpi_allreduce.c and bench/membw.c into $OUT.
build_baselines() {
    command -v "$MPICC" >/dev/null 2>&1 || {
        say "bench: $MPICC not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
        exit 1
    }
    "$MPICC" -O2 -o "$OUT/mpi_allreduce" "$BENCH_DIR/mpi_allreduce.c" || exit 1
    ${CC:-cc} -O2 -pthread -o "$OUT/membw" "$BENCH_DIR/membw.c" || exit 1
}

have_chorus() { [ -x "$CHORUS_BENCH" ] && [ -x "$CHORUS_RUN" ]; }

# run_logged NAME CMD...: stdout to $OUT/NAME.txt, stderr to $OUT/NAME.err; a failure is noted
# (table still printed, exit status 1 at the end).
run_logged() {
    _log=$1
    shift
    say "bench: $_log: $*"
    _status=0
    "$@" >"$OUT/$_log.txt" 2>"$OUT/$_log.err" || _status=$?
    if [ "$_status" -ne 0 ]; then
        say "bench: $_log FAILED (exit $_status), see $OUT/$_log.err:"
        tail -n 5 "$OUT/$_log.err" >&2
        FAILED=1
    fi
}

# run_chorus NAME NP [VAR=value...]: chorus-bench allreduce sweep under chorus-run; -a 3 times
# each iteration by its slowest rank, as the baselines do.
run_chorus() {
    _name=$1 _np=$2
    shift 2
    # shellcheck disable=SC2086  # CHORUS_ARGS is a list of words
    run_logged "$_name" env "$@" "$CHORUS_RUN" -np "$_np" -- "$CHORUS_BENCH" --coll allreduce -a 3 \
        -d float32 -o sum -b "$MIN" -e "$MAX" -f "$FACTOR" $CHORUS_ARGS
}

# run_ompi NAME NP MCA-FLAGS...: bench/mpi_allreduce under mpirun.
run_ompi() {
    _name=$1 _np=$2
    shift 2
    # shellcheck disable=SC2086
    run_logged "$_name" "$MPIRUN" $MPI_BASE "$@" $MPIRUN_FLAGS -np "$_np" "$OUT/mpi_allreduce" \
        -b "$MIN" -e "$MAX" -f "$FACTOR"
}

# run_gloo NAME NP: bench/gloo_allreduce.py (torch.distributed, gloo, CPU tensors).
run_gloo() {
    run_logged "$1" "$PYTHON" "$BENCH_DIR/gloo_allreduce.py" -np "$2" -b "$MIN" -e "$MAX" \
        -f "$FACTOR"
}

# files NAME: the comma-separated outputs of runs 1..REPEAT of NAME (for benchtab).
files() {
    _list=""
    _r=1
    while [ "$_r" -le "$REPEAT" ]; do
        _list="$_list${_list:+,}$OUT/$1.$_r.txt"
        _r=$((_r + 1))
    done
    printf '%s' "$_list"
}

chorus_spec() { printf 'chorus=%s%s' "$(files "$1")" "${CHORUS_COLS:+@$CHORUS_COLS}"; }

# The host (bench/topology.sh: CPU, which CPUs share which cache, NUMA, memory bandwidth, load,
# BLAS, commit) and the versions, for the record. DESCRIBE_MEMBW=FILE: a bench/membw output
# already taken (else topology.sh measures the bandwidth itself).
describe_env() {
    TOPO_MEMBW=${DESCRIBE_MEMBW:-} BUILD=$BUILD sh "$BENCH_DIR/topology.sh"
    echo "# open mpi: $("$MPIRUN" --version 2>/dev/null | head -n 1)"
    if have_chorus; then
        echo "# chorus: $CHORUS_BENCH ($(git -C "$ROOT" describe --always --dirty 2>/dev/null))"
    else
        echo "# chorus: $CHORUS_BENCH is MISSING (build it with make); baselines only"
    fi
}
