#!/bin/sh
# demo.sh - what `make demo` runs: trains the CNN on Fashion-MNIST with 2 local workers through
# the training engine (gradients averaged while backward runs), after a short 1-worker run of
# the same model to measure single-worker speed, then prints a summary of measured numbers:
# test accuracy, samples/s, scaling efficiency, and how much of the gradient communication
# was hidden behind computation.
#
#   BUILD=build sh tools/demo.sh          (make demo builds first, then runs this)
#   DEMO_EPOCHS=3 DEMO_NP=2 DEMO_DATA=/usr/share/datasets/fashion-mnist
set -u
BUILD=${BUILD:-build}
EPOCHS=${DEMO_EPOCHS:-3}
NP=${DEMO_NP:-2}
DATA=${DEMO_DATA:-/usr/share/datasets/fashion-mnist}
SOLO_STEPS=${DEMO_SOLO_STEPS:-40}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run

for f in "$TRAIN" "$RUN"; do
    [ -x "$f" ] || { echo "demo: $f is missing; build it first with: make trainer" >&2; exit 1; }
done
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
    if [ ! -r "$DATA/$f" ]; then
        echo "demo: the Fashion-MNIST data set is not installed ($DATA/$f is missing)." >&2
        echo "demo: install it with:  sudo apt-get install dataset-fashion-mnist" >&2
        echo "demo: (or point DEMO_DATA at a directory holding the four .gz files)" >&2
        exit 1
    fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-demo.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM
BATCH=256
PER=$((BATCH / NP)) # samples per worker per step
ARGS="--model cnn --epochs $EPOCHS --threads 1 --data $DATA"
cores=$(nproc 2>/dev/null || echo "?")
load() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
cpu=$(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)

# Copies the trainer's lines to the terminal and to $1. On a terminal the progress lines
# ("epoch E/N step ...") are rewritten in place; elsewhere every line is kept.
show() {
    tty=0
    [ -t 1 ] && tty=1
    prev=0
    while IFS= read -r line; do
        printf '%s\n' "$line" >> "$1"
        case "$line" in
        "exit status "*) ;;
        "epoch "*" step "*)
            if [ $tty = 1 ]; then printf '\r  %s\033[K' "$line"; prev=1; else printf '  %s\n' "$line"; fi ;;
        *)
            [ $prev = 1 ] && printf '\n'
            prev=0
            printf '  %s\n' "$line" ;;
        esac
    done
    [ $prev = 1 ] && printf '\n'
    return 0
}

# field LOG PATTERN SED-EXPR: the value a sed expression takes out of the last matching line.
field() { grep "$2" "$1" | tail -n 1 | sed -n "$3"; }

start=$(date +%s)
load0=$(load)
echo "Chorus demo: data-parallel training of a small CNN on Fashion-MNIST"
echo "  machine: $cores cores${cpu:+ ($cpu)}, load average $load0; OpenBLAS, 1 thread per worker"
echo

echo "[1/2] 1 worker alone: $SOLO_STEPS steps of $PER samples (what each of the $NP workers will take per step)"
"$TRAIN" $ARGS --batch $PER --max-steps "$SOLO_STEPS" --no-eval --log-every 1000000 > "$TMP/solo.log" 2>&1 || {
    cat "$TMP/solo.log" >&2
    echo "demo: the 1-worker run failed" >&2
    exit 1
}
solo=$(field "$TMP/solo.log" '^done:' 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p')
echo "  1 worker: $solo samples/s"
echo

echo "[2/2] $NP workers (chorus-run -np $NP), $EPOCHS epochs, $BATCH samples per step ($PER per worker);"
echo "      each layer's gradient is summed by the Chorus engine while backward goes on below it"
every=47 # 5 progress lines per epoch in a log; on a terminal one line, updated often
[ -t 1 ] && every=4
t0=$(date +%s)
{
    "$RUN" -np "$NP" --no-prefix "$TRAIN" $ARGS --batch $BATCH --grad-sync engine --log-every $every 2>&1
    echo "exit status $?"
} | show "$TMP/run.log"
t1=$(date +%s)
if ! grep -q '^exit status 0$' "$TMP/run.log"; then
    echo "demo: the $NP-worker run failed (see the messages above)" >&2
    exit 1
fi

acc=$(field "$TMP/run.log" '^done:' 's/.*test accuracy \([0-9.]*\).*/\1/p')
sps=$(field "$TMP/run.log" '^done:' 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p')
# chorus-train's line: "communication (--grad-sync M, N ranks): averaging the gradients took
# A ms per step, of which training waited W ms; H ms (P%) of it ran behind the backward pass.
# Waiting on other ranks in all collectives: Q% of training time"
comm='^communication ('
avg=$(field "$TMP/run.log" "$comm" 's/.*averaging the gradients took \([0-9.]*\) ms per step.*/\1/p')
waited=$(field "$TMP/run.log" "$comm" 's/.*of which training waited \([0-9.]*\) ms.*/\1/p')
hidden=$(field "$TMP/run.log" "$comm" 's/.*(\([0-9]*\)%) of it ran behind the backward pass.*/\1/p')
waitp=$(field "$TMP/run.log" "$comm" 's/.*in all collectives: \([0-9.]*\)% of training time.*/\1/p')
if [ -z "$avg" ] || [ -z "$waited" ] || [ -z "$waitp" ]; then
    echo "demo: chorus-train printed no communication summary; the end of its output:" >&2
    tail -n 5 "$TMP/run.log" >&2
    exit 1
fi
echo
echo "Summary (measured in this run)"
awk -v acc="$acc" -v sps="$sps" -v solo="$solo" -v np="$NP" -v ep="$EPOCHS" -v per="$PER" \
    -v avg="$avg" -v waited="$waited" -v hid="${hidden:-0}" -v waitp="$waitp" \
    -v wall="$((t1 - t0))" -v total="$(($(date +%s) - start))" 'BEGIN {
    printf "  test accuracy       %.1f%% after %d epochs (10,000 test images)\n", 100 * acc, ep
    printf "  throughput          %d samples/s with %d workers; 1 worker alone: %d\n", sps, np, solo
    if (solo > 0)
        printf "  scaling efficiency  %.0f%% = %d / (%d x %d), %d samples per worker per step\n", \
            100 * sps / (np * solo), sps, np, solo, per
    printf "  communication       averaging the gradients took %.2f ms per step, of which\n", avg
    printf "                      training waited %.2f ms (%d%% ran behind the backward pass);\n", waited, hid
    printf "                      waiting on other ranks: %.1f%% of the training time\n", waitp
    printf "  wall time           %d s for the %d-worker training, %d s in all\n", wall, np, total
}'
if awk -v l="$load0" 'BEGIN { exit !(l + 0 > 1) }'; then
    echo "  note: other work was running (load average $load0 before the demo), so the speed numbers"
    echo "        are lower and noisier than on a quiet machine"
fi
