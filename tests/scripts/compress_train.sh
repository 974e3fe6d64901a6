#!/bin/sh
# compress_train.sh - chorus-train --compress with real ranks.
#   accuracy     chorus-run -np 2 chorus-train --model mlp --epochs 3, uncompressed, then with
#                --compress topk:0.01 and powersgd:2: each compressed run's test accuracy is
#                within 2 points of the uncompressed run's (under a sanitizer, where CI time is
#                short: 120 steps of one epoch each, same rule)
#   identical    short runs on 2 ranks with top-k (fused), random-k (layer) and PowerSGD (layer
#                and engine): the ranks end with the same parameters, bit for bit; PowerSGD
#                gives the same bits in layer and engine mode (the same per-layer tensors)
#   bad          unknown or out-of-range specs, and --compress with a parameter server or with
#                --zero, get clear messages
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM

# acc LOG: the last test accuracy in a log
acc() { sed -n 's/.*test loss [0-9.]* acc \([0-9.]*\).*/\1/p' "$1" | tail -1; }

case "$1" in
accuracy)
    run="--model mlp --epochs 3"
    [ -n "${SANITIZE:-}" ] && run="--model mlp --epochs 1 --max-steps 120"
    for c in none topk:0.01 powersgd:2; do
        chorus-run -np 2 chorus-train $run --compress $c > "$d/$c.log" 2>&1 ||
            { cat "$d/$c.log"; exit 1; }
        grep -E "compression|epoch" "$d/$c.log" | grep -v " step " | tail -2
    done
    base=$(acc "$d/none.log")
    for c in topk:0.01 powersgd:2; do
        a=$(acc "$d/$c.log")
        awk -v a="$a" -v b="$base" -v c="$c" 'BEGIN {
            d = (b - a) * 100
            printf "%s: test accuracy %.4f, uncompressed %.4f (%.2f points lower)\n", c, a, b, d
            exit !(a != "" && d <= 2.0) }' || { echo "$c: more than 2 points below"; exit 1; }
    done
    ;;
identical)
    common="--model mlp --max-steps 8 --no-eval --seed 3"
    for case in fused:topk:0.01 layer:randomk:0.05 layer:powersgd:2 engine:powersgd:2; do
        sync=${case%%:*} c=${case#*:}
        chorus-run -np 2 chorus-train $common --grad-sync "$sync" --compress "$c" \
            --dump-params "$d/$sync-$c" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        cmp "$d/$sync-$c.0" "$d/$sync-$c.1" ||
            { echo "--grad-sync $sync --compress $c: ranks 0 and 1 differ"; exit 1; }
        echo "--grad-sync $sync --compress $c: both ranks hold the same parameters"
    done
    cmp "$d/layer-powersgd:2.0" "$d/engine-powersgd:2.0" ||
        { echo "powersgd:2: layer and engine mode differ"; exit 1; }
    chorus-run -np 2 chorus-train $common --dump-params "$d/dense" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
    cmp -s "$d/dense.0" "$d/fused-topk:0.01.0" && { echo "topk:0.01 changed nothing"; exit 1; }
    echo "powersgd:2: layer and engine mode give the same bits; top-k differs from dense"
    ;;
bad)
    for c in topk:2 topk:x powersgd:0 powersgd:1.5 zip; do
        chorus-train --compress "$c" --max-steps 1 > "$d/log" 2>&1 && { echo "--compress $c ran"; exit 1; }
        cat "$d/log"
        grep -q "valid: none, fp16, bf16, topk:RATIO" "$d/log" || exit 1
    done
    chorus-train --compress topk:0.1 --mode ps-sync --max-steps 1 > "$d/log" 2>&1 && exit 1
    cat "$d/log"
    grep -q "compress is for --mode allreduce" "$d/log" || exit 1
    chorus-train --compress topk:0.1 --zero 1 --max-steps 1 > "$d/log" 2>&1 && exit 1
    cat "$d/log"
    grep -q "compress does not combine with --zero" "$d/log" || exit 1
    ;;
*)
    echo "usage: compress_train.sh accuracy|identical|bad" >&2
    exit 2
    ;;
esac
