#!/bin/sh
# train_split.sh - chorus-train's model splits with real ranks.
#   zero OPTIM NP    --zero 1 and --zero 2 on NP ranks end with the same parameters, to the
#                    bit, as plain data parallelism (the reduce-scatter and the allreduce both
#                    fold in rank order; the update is element-wise); ZeRO-1's optimizer
#                    memory per rank is at most 1/NP of data parallel's plus 64 KiB; the
#                    line on the all-gather behind the forward pass is printed
#   grid             4 ranks = 2 data replicas x 2 tensor shards: the replicas of each shard
#                    end bitwise identical, the losses of 30 steps follow those of plain data
#                    parallelism on the same samples (within 1e-4: the row-parallel layers sum
#                    in a different order), and the run reaches test accuracy 0.7; with
#                    --zero 2 the grid ends with the same parameters, to the bit
#   recompute        --model large --recompute: the same parameters, to the bit, with fewer
#                    activation bytes in the memory report
#   budget           --model large --max-memory-mb 120 on 2 ranks: data parallelism is refused
#                    with the message naming the parts and the options that split; --zero 1
#                    fits and trains
#   bad              option combinations that cannot work get clear messages
#   kill             a tensor-parallel shard killed mid-run: its partner stops naming it
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }
run() { # name np args...: runs chorus-train, its output in $d/name.log
    name=$1 np=$2
    shift 2
    chorus-run -np "$np" chorus-train "$@" > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; fail "$name"; }
}
# bytes of part $2 of rank $3 from the memory line of metrics file $1
membytes() {
    python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{\"memory\"")]
print(rows[-1]["memory"][int(sys.argv[3])][sys.argv[2]])' "$1" "$2" "$3"
}
case "$1" in
zero)
    OPT=$2 NP=$3
    common="--model mlp --max-steps 5 --no-eval --batch 96 --optim $OPT --seed 5"
    run dp "$NP" $common --dump-params "$d/dp" --metrics "$d/dp.jsonl"
    for z in 1 2; do
        run z$z "$NP" $common --zero $z --dump-params "$d/z$z" --metrics "$d/z$z.jsonl"
        r=0
        while [ $r -lt "$NP" ]; do
            cmp "$d/dp.$r" "$d/z$z.$r" || fail "--zero $z rank $r: parameters differ from data parallelism"
            r=$((r + 1))
        done
        echo "--zero $z ($OPT, $NP ranks): parameters identical to data parallelism"
    done
    grep "memory rank 0" "$d/dp.log" "$d/z1.log" "$d/z2.log"
    grep -q "ZeRO-2: the parameter all-gather took .* ms per step; the next forward pass waited .* ms of it, the rest ran behind it" "$d/z2.log" ||
        fail "no all-gather line"
    dp=$(membytes "$d/dp.jsonl" optimizer 0) z1=$(membytes "$d/z1.jsonl" optimizer 0)
    [ "$z1" -le $((dp / NP + 65536)) ] || fail "ZeRO-1 optimizer bytes $z1 > $dp / $NP + 64 KiB"
    echo "ZeRO-1 optimizer memory per rank: $z1 bytes, data parallel: $dp bytes"
    ;;
grid)
    common="--model mlp --max-steps 30 --batch 64 --seed 3 --lr 0.05 --log-every 10"
    run dp 2 $common --metrics "$d/dp.jsonl" --no-eval
    run grid 4 $common --tensor-parallel 2 --metrics "$d/grid.jsonl" --dump-params "$d/g"
    cat "$d/grid.log"
    grep -q "4 ranks = 2 data-parallel replicas x 2 tensor-parallel shards" "$d/grid.log" || fail "grid line"
    for t in 0 1; do
        cmp "$d/g.tp$t.0" "$d/g.tp$t.1" || fail "shard $t: the two replicas differ"
    done
    python3 -c 'import json,sys
a=[json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l]
b=[json.loads(l) for l in open(sys.argv[2]) if "\"step\"" in l]
assert len(a) == len(b) == 30, (len(a), len(b))
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
print("largest loss difference to data parallelism over 30 steps: %.2e" % worst)
assert worst < 1e-4, worst' "$d/dp.jsonl" "$d/grid.jsonl" || fail "losses"
    acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$d/grid.log")
    python3 -c "import sys; sys.exit(0 if float('$acc') >= 0.7 else 1)" || fail "accuracy $acc < 0.7"
    [ "$(grep -c 'memory rank' "$d/grid.log")" = 4 ] || fail "one memory line per rank"
    # ZeRO inside the grid shards each shard's optimizer state over its replicas: the same bits
    run gz 4 $common --tensor-parallel 2 --zero 2 --no-eval --dump-params "$d/gz"
    for f in tp0.0 tp0.1 tp1.0 tp1.1; do
        cmp "$d/g.$f" "$d/gz.$f" || fail "--zero 2 in the grid changed the parameters ($f)"
    done
    echo "2x2 grid with --zero 2: parameters identical to the grid without it"
    ;;
recompute)
    common="--model large --max-steps 2 --batch 32 --no-eval --seed 9 --optim adamw"
    [ -n "${SANITIZE:-}" ] && common="$common --max-steps 1"
    run keep 1 $common --dump-params "$d/keep" --metrics "$d/keep.jsonl"
    run rc 1 $common --recompute --dump-params "$d/rc" --metrics "$d/rc.jsonl"
    cmp "$d/keep.0" "$d/rc.0" || fail "--recompute changed the parameters"
    a=$(membytes "$d/keep.jsonl" activations 0) b=$(membytes "$d/rc.jsonl" activations 0)
    grep "memory rank" "$d/keep.log" "$d/rc.log"
    [ "$b" -lt "$a" ] || fail "activations $b bytes with --recompute, $a without"
    echo "--recompute: same parameters, activations $b bytes instead of $a"
    ;;
budget)
    common="--model large --max-steps 1 --batch 32 --no-eval --optim adamw --max-memory-mb 120"
    chorus-run -np 2 chorus-train $common > "$d/dp.log" 2>&1 && fail "data parallelism was not refused"
    cat "$d/dp.log"
    grep -q "the model does not fit --max-memory-mb 120: rank 0 would need .* MiB (params .* MiB, grads .* MiB, optimizer .* MiB, activations .* MiB). Split it: --zero 1|2 .*--tensor-parallel T .*--recompute" "$d/dp.log" ||
        fail "message"
    run z1 2 $common --zero 1
    grep "memory rank" "$d/z1.log"
    ;;
bad)
    check() { # expected-text args...
        want=$1
        shift
        out=$(chorus-train "$@" 2>&1) && fail "accepted: $*"
        echo "$* -> $out"
        echo "$out" | grep -qF -- "$want" || fail "$*: the message does not say '$want'"
    }
    check "splits the linear layers of --model mlp or large, not cnn" --tensor-parallel 2 --model cnn
    check "use --accum 1 (or --zero 1)" --zero 2 --accum 2
    check "leave --grad-sync at fused, not engine" --zero 1 --grad-sync engine
    check "bad value '4' for --zero" --zero 4
    check "--zero 3 shards the parameters too, gathered layer by layer just before each pass reads them: that is built for --model gpt; --model mlp takes --zero 1|2" --zero 3
    check "does not support --dropout" --tensor-parallel 2 --dropout 0.1
    check "do not write checkpoints yet" --zero 1 --checkpoint-dir "$d/ck"
    check "does not support --time-limit" --tensor-parallel 2 --time-limit 5
    check "--max-memory-mb works with --mode allreduce" --max-memory-mb 100 --mode ps-sync
    out=$(chorus-run -np 3 chorus-train --tensor-parallel 2 --max-steps 1 2>&1) && fail "3 ranks, T=2"
    echo "$out" | grep -q "tensor-parallel 2 does not divide the 3 ranks" || { echo "$out"; fail "grid message"; }
    echo "$out" | grep "does not divide"
    ;;
kill)
    # a tensor-parallel shard that dies stops its partner with an error naming it, no hang
    chorus-run -np 2 chorus-train --model mlp --tensor-parallel 2 --max-steps 1000000 --no-eval \
        --batch 64 --log-every 1 --metrics "$d/m.jsonl" > "$d/log" 2>&1 &
    job=$!
    victim=""
    for i in $(seq 100); do
        victim=$(ps -e -o pid=,args= | grep "chorus-train .*$d/m.jsonl" | grep -v "chorus-run\|grep" |
            awk 'NR == 2 {print $1}')
        [ -n "$victim" ] && [ -s "$d/m.jsonl" ] && break
        sleep 0.1
    done
    [ -n "$victim" ] || { kill "$job"; fail "rank 1 did not start"; }
    kill -9 "$victim"
    wait "$job" && fail "the job succeeded after a shard was killed"
    cat "$d/log"
    grep -q "chorus-train\[0\]: tensor parallel .*linear .*(2 ranks): rank 1 (pid $victim) was lost" "$d/log" ||
        fail "rank 0 does not name the lost shard"
    ;;
*) echo "usage: $0 zero OPTIM NP | grid | recompute | budget | bad | kill"; exit 2 ;;
esac
