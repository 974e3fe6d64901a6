#!/bin/sh
# balance_torch.sh - speed-proportional batches in chorus.torch against the even split, in one
# invocation: examples/pytorch_balanced_fashion_mnist.py, np=2, global batch 128, EPOCHS
# epochs on the first LIMIT training images, --balance dynamic and static, with both ranks
# equal and with rank 1 doing SLOW_EXTRA extra forward passes of its batch per step (real
# work: 3 makes its steps about twice as long). Prints seconds per epoch (the mean), the test
# accuracy after the last epoch, the final shares and rank 1's measured ms per sample. The
# numbers mean something only on a quiet machine: the load average is printed with them.
#
#   bench/balance_torch.sh          EPOCHS=2 LIMIT=12000 SLOW_EXTRA=3 BUILD=build
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
EPOCHS=${EPOCHS:-2}
LIMIT=${LIMIT:-12000}
SLOW_EXTRA=${SLOW_EXTRA:-3}
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="${CHORUS_LIB:-$ROOT/$BUILD/lib/libchorus.so}"
[ -x "$ROOT/$BUILD/bin/chorus-run" ] || { echo "balance_torch.sh: run make first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load before $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| workers | balance | s/epoch | test acc after $EPOCHS | final shares | ms/sample (rank 0, 1) |"
echo "|---|---|---|---|---|---|"
for slow in 0 1; do
    for b in static dynamic; do
        log=$out/$slow.$b
        timeout -k 5 300 "$ROOT/$BUILD/bin/chorus-run" -np 2 "$PYTHON" \
            "$ROOT/examples/pytorch_balanced_fashion_mnist.py" --epochs "$EPOCHS" \
            --limit "$LIMIT" --balance $b \
            $([ $slow = 1 ] && echo "--slow-rank 1 --slow-extra $SLOW_EXTRA") > "$log" 2>&1 ||
            { echo "balance_torch.sh: the $b run failed:" >&2; tail -5 "$log" >&2; continue; }
        grep '^\[0\] epoch' "$log" | awk -v w="$([ $slow = 1 ] && echo "rank 1 slowed" || echo equal)" -v b=$b '
            { for (i = 1; i <= NF; i++) { if ($i == "s") t += $(i - 1); if ($i == "accuracy") a = $(i + 1) }
              n++; sh = $0; sub(/.*shares /, "", sh); sub(/  \(.*/, "", sh)
              ms = $0; sub(/.*sample /, "", ms); sub(/\)$/, "", ms) }
            END { printf "| %s | %s | %.1f | %s | %s | %s |\n", w, b, t / n, a, sh, ms }'
    done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
