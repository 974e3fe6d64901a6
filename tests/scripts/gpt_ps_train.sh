#!/bin/sh
# gpt_ps_train.sh - chorus-train --model gpt under the parameter server (--mode ps-*), real
# processes over real sockets and shared memory, on a few of Debian's fortune databases and a
# tiny shape of the GPT (2 blocks, width 32, 4 heads, context 16: 34,176 parameters).
#   equal    ps-sync with 2 workers ends 6 steps with the same parameters, to the bit, as 2 ranks
#            of data-parallel allreduce, with gradient clipping cutting every step (--clip-grad
#            0.05 against norms of 1.4 to 1.8): with 1 server, and with 2 servers, which take
#            the norm from both slices' sums of squares. The summed gradient is the same bits
#            (the server adds the workers' in worker order, as the allreduce adds the ranks');
#            the norm is added in another order (one flat slice per server against the
#            model's segments), in double precision, and the factor clip/norm is rounded to
#            float: the bits agree unless that last-digit difference of a double falls on a
#            float's rounding boundary, which it does not in these steps
#   async    ps-async (and ps-ssp) with 2 workers: the training loss falls below 0.8 of the
#            first step's in 50 steps, each worker cutting its own gradient (its norm above
#            --clip-grad, as printed); the validation line, tokens/s and the sample are printed
#   resume   ps-sync: 8 steps straight = 4 + --resume 4 (the servers' shards and worker 0's
#            checkpoint every 4 steps), to the bit, on both workers; its checkpoint resumed
#            under allreduce is refused naming --mode; ps-async with one worker resumes to the
#            bit too
#   refused  what the GPT does not run with under the parameter server is refused with the
#            reason: --tensor-parallel, --zero, --pipeline-stages; and a ps-sync checkpoint
#            resumed under allreduce
set -u
PATH=${BUILD:-build}/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$d/text"
for f in fortunes goedel kids love; do
    cp /usr/share/games/fortunes/$f "$d/text/" || fail "the fortune databases are not installed (sudo apt-get install fortunes)"
done
small="--model gpt --data $d/text --layers 2 --d-model 32 --heads 4 --context 16 --batch 16 --log-every 2 --seed 4"
run() { # name np args...: chorus-train on np ranks, its output in $d/name.log
    log=$d/$1.log
    np=$2
    shift 2
    chorus-run -np "$np" chorus-train "$@" > "$log" 2>&1 || { cat "$log"; fail "$(basename "$log" .log)"; }
}
same() { # a b: the dumps of ranks (workers) 0 and 1 of runs a and b are equal
    for r in 0 1; do
        cmp "$d/$1.$r" "$d/$2.$r" || fail "$1 and $2: rank $r's parameters differ"
    done
}
case "$1" in
equal)
    q="$small --sample 0 --no-eval --max-steps 6 --clip-grad 0.05"
    run dp 2 $q --dump-params "$d/dp"
    run ps1 3 $q --mode ps-sync --servers 1 --dump-params "$d/ps1"
    run ps2 4 $q --mode ps-sync --servers 2 --dump-params "$d/ps2"
    grep "last gradient norm" "$d/dp.log"
    grep "server" "$d/ps2.log" | grep -v "^\[[0-9]*\] chorus-train"
    grep -q "last gradient norm 1\.[0-9]* before clipping to 0.05" "$d/dp.log" || fail "allreduce did not clip"
    for s in 0 1; do
        grep -q "server $s (ps-sync): .*; 6 of its rounds' summed gradients cut to norm 0.05, the last norm 1\.[0-9]*" "$d/ps2.log" ||
            fail "server $s did not clip every round"
    done
    same dp ps1
    same dp ps2
    echo "ps-sync (1 and 2 servers) = allreduce after 6 clipped steps, to the bit, on both workers"
    ;;
async)
    for m in ps-async ps-ssp; do
        run $m 3 $small --mode $m --max-steps 50 --clip-grad 0.05 --sample 40
        python3 - "$d/$m.log" <<'PY' || { cat "$d/$m.log"; fail "$m: the loss did not fall"; }
import re, sys
text = open(sys.argv[1], encoding="latin-1").read()
losses = [float(x) for x in re.findall(r"step \d+/\d+ loss ([0-9.]+)", text)]
print(f"training loss {losses[0]:.4f} at step 2, {losses[-1]:.4f} at step 50")
sys.exit(0 if losses[-1] < 0.8 * losses[0] else 1)
PY
        grep "last gradient norm" "$d/$m.log"
        # the norm is above the clip (0.05), whatever its size: asynchronous steps can leave
        # it anywhere from about 0.1 to a few units
        norm=$(sed -n 's/.*gpt: [0-9]* tokens\/s over .* (2 workers); last gradient norm \([0-9.]*\) before clipping to 0\.05$/\1/p' "$d/$m.log" | head -n 1)
        [ -n "$norm" ] && awk -v x="$norm" 'BEGIN { exit !(x > 0.05) }' ||
            fail "$m: no tokens/s line with a norm above the clip"
        grep -q "validation after step 50: loss [0-9.]* nats per token (perplexity [0-9.]*; unigram [0-9.]*), next-byte accuracy" "$d/$m.log" ||
            fail "$m: no validation line"
        grep -q "sample (40 bytes at temperature 0.8" "$d/$m.log" || fail "$m: no sample"
    done
    ;;
resume)
    q="$small --sample 0 --no-eval --mode ps-sync --clip-grad 0.05"
    run straight 3 $q --max-steps 8 --dump-params "$d/straight"
    run half 3 $q --max-steps 4 --checkpoint-dir "$d/ck" --checkpoint-every 4
    run rest 3 $q --max-steps 8 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume --dump-params "$d/rest"
    grep -q "servers: resumed their shards of step 4" "$d/rest.log" || { cat "$d/rest.log"; fail "the servers did not resume their shards"; }
    same straight rest
    echo "ps-sync: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both workers"
    out=$(chorus-run -np 2 chorus-train $small --sample 0 --no-eval --clip-grad 0.05 --max-steps 8 --checkpoint-dir "$d/ck" --resume 2>&1) &&
        fail "a ps-sync checkpoint resumed under allreduce was not refused"
    echo "$out" | grep -qF -- "cannot resume: --mode was ps-sync in the checkpoint, now allreduce" || { echo "$out"; fail "no message naming --mode"; }
    echo "a ps-sync checkpoint resumed under allreduce is refused naming --mode"
    # ps-async with one worker (its own gradient clipped): the same, to the bit; with several
    # the servers apply pushes in arrival order, and two straight runs differ too
    q="$small --sample 0 --no-eval --mode ps-async --clip-grad 0.05"
    run astraight 2 $q --max-steps 8 --dump-params "$d/astraight"
    run ahalf 2 $q --max-steps 4 --checkpoint-dir "$d/cka" --checkpoint-every 4
    run arest 2 $q --max-steps 8 --checkpoint-dir "$d/cka" --checkpoint-every 4 --resume --dump-params "$d/arest"
    cmp "$d/astraight.0" "$d/arest.0" || fail "ps-async, one worker: the resumed run's parameters differ"
    echo "ps-async, one worker: 8 steps straight = 4 steps + --resume 4 steps, to the bit"
    ;;
refused)
    for o in "--tensor-parallel 2:--tensor-parallel and --zero work with --mode allreduce, not --mode ps-sync" \
        "--zero 1:--tensor-parallel and --zero work with --mode allreduce, not --mode ps-sync" \
        "--pipeline-stages 2:--pipeline-stages works with --mode allreduce only, not 'ps-sync'"; do
        opt=${o%%:*}
        msg=${o#*:}
        out=$(chorus-train $small --mode ps-sync $opt --max-steps 1 2>&1) && fail "--mode ps-sync $opt was not refused"
        echo "$out" | grep -qF -- "$msg" || { echo "$out"; fail "--mode ps-sync $opt: expected '$msg'"; }
        echo "refused --mode ps-sync $opt: $(echo "$out" | tail -1)"
    done
    ;;
*) fail "unknown case $1" ;;
esac
echo "gpt_ps_train $1: ok"
