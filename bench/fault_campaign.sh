#!/bin/bash
# fault_campaign.sh - many short fault and bad-input trials against chorus-train under
# chorus-run, each judged by what a user must get: the right parameters or a clear error, the
# right culprit, and no hang. Not part of make test (it runs for minutes); see
# docs/FAULT_TOLERANCE.md ("A fault campaign").
#
#   bench/fault_campaign.sh [-s SEED] [-n TRIALS] [-o DIR] [CATEGORY...]
#
# Categories (all by default; -n trials each):
#   kill      kill -9 of a random rank at a random moment, in a random mode (allreduce,
#             --zero, --pipeline-stages, --tensor-parallel, ps-sync/async/ssp, --compress,
#             --balance dynamic)
#   stop      the same with SIGSTOP (a hung rank)
#   ckpt      a random checkpoint file flipped at a random byte or truncated, then --resume;
#             the result is compared with a run that went straight through
#   disk      each output (--metrics, --tensorboard, --dump-params, --checkpoint-dir,
#             CHORUS_TIMELINE) on a small tmpfs (mounted here, needs root) that is too small,
#             or --metrics /dev/full
#   mismatch  rank 1 started with another value of one option than rank 0
#   envmismatch  rank 1 started with one CHORUS_* variable that rank 0 does not have
#   fuzz      one option with a random, often invalid, value
#   env       one CHORUS_* variable with a random, often invalid, value
#
# Each trial gets a verdict: ok, or one of
#   wrong-state      exit 0 but the parameters differ from the reference (or between ranks)
#   success-after-failure  exit 0 although a rank was lost, or an output could not be written
#   no-message       non-zero exit without a line that says why
#   wrong-culprit    the launcher's "failed first" line names another rank than the victim
#   hang             the trial ran past its deadline (derived from CHORUS_TIMEOUT_S, below)
#   crash            a process died of a signal nobody sent (SIGSEGV, SIGABRT, ...)
#   orphan           a process of the trial outlived it
# The table of verdicts is DIR/results.tsv (one line a trial, with its log); the exit status is
# 1 when any trial is not ok. SEED replays the same trials.
set -u
seed=$RANDOM
trials=10
out=""
while getopts s:n:o: o; do
    case $o in
        s) seed=$OPTARG ;;
        n) trials=$OPTARG ;;
        o) out=$OPTARG ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
cats=${*:-kill stop ckpt disk mismatch envmismatch fuzz env}
BUILD=${BUILD:-build} # the build to try (another tree's, to compare: BUILD=/path/to/build)
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
PATH=$BUILD/bin:$PATH
[ -x "$BUILD/bin/chorus-train" ] || { echo "build first: make trainer" >&2; exit 2; }
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/fault_campaign.XXXXXX")}
mkdir -p "$out"
RANDOM=$seed
echo "fault campaign: seed $seed, $trials trials each of: $cats; logs in $out"
res="$out/results.tsv"
: > "$res"

# Every wait on a peer ends after CHORUS_TIMEOUT_S; a silent (stopped) peer is found after
# CHORUS_HEARTBEAT_TIMEOUT_S; the launcher stops the others --grace seconds after a failure.
# A trial's deadline is the sum of what it may wait for, twice over, plus the time to start
# and train its few steps on a loaded machine (RUN_S): past it, the trial hangs.
export CHORUS_TIMEOUT_S=${CHORUS_TIMEOUT_S:-30} CHORUS_HEARTBEAT_TIMEOUT_S=${CHORUS_HEARTBEAT_TIMEOUT_S:-5}
GRACE=5
RUN_S=${RUN_S:-120}
deadline=$((2 * (CHORUS_TIMEOUT_S + CHORUS_HEARTBEAT_TIMEOUT_S + GRACE) + RUN_S))
common="--model mlp --batch 200 --no-eval --log-every 1000 --lr 0.05 --seed 3"

pick() { # pick WORD...: one of the words at random, in REPLY (not in a subshell, whose
    # RANDOM would not follow the seed)
    local a=("$@")
    REPLY=${a[RANDOM % ${#a[@]}]}
}

verdict() { # verdict CATEGORY TRIAL VERDICT WHAT LOG
    printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$res"
    printf '%-8s %3s %-22s %s\n' "$1" "$2" "$3" "$4"
}

# run LOG CMD...: runs CMD with the deadline; sets rc (124: hang) and secs
run() {
    local log=$1 t0
    shift
    t0=$(date +%s)
    timeout -k 5 "$deadline" "$@" > "$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
}

# The common judgement of a failed run: a signal nobody sent, no reason given, or a hang.
judge_failure() { # LOG -> prints a verdict or nothing
    local log=$1
    [ "$rc" = 124 ] || [ "$rc" = 137 -a "$secs" -ge "$deadline" ] && { echo hang; return; }
    grep -q "AddressSanitizer\|runtime error:\|Segmentation\|signal 11\|signal 6\|signal 7\|signal 8\|Aborted\|core dumped" "$log" && { echo crash; return; }
    # a reason: a line of chorus-train, chorus-run or the library that says what went wrong
    if grep -qi "error\|cannot\|refus\|invalid\|not \|must\|lost\|failed\|unknown\|expected\|no such\|usage" "$log"; then
        echo ok
    else
        echo no-message
    fi
}

same_params() { # same_params PREFIX_A PREFIX_B: the same ranks dumped (a parameter server
    # dumps only its workers' files) and each dump equal
    local f n=0
    for f in "$1".*; do
        [ -e "$f" ] || return 1
        cmp -s "$f" "$2.${f##*.}" || return 1
        n=$((n + 1))
    done
    [ "$n" = "$(ls "$2".* 2> /dev/null | wc -l)" ]
}

# modes: name, ranks, options
modes=("allreduce|3|"
    "zero1|2|--zero 1" "zero2|3|--zero 2"
    "pipeline|2|--pipeline-stages 2" "tp|2|--tensor-parallel 2"
    "ps-sync|3|--mode ps-sync --servers 1" "ps-async|3|--mode ps-async --servers 1"
    "ps-ssp|3|--mode ps-ssp --servers 1" "compress|3|--compress topk:0.1"
    "balance|3|--balance dynamic --balance-every 2")

trial_kill() { # trial_kill CATEGORY N SIGNAL
    local cat=$1 t=$2 sig=$3 m name np opts dir v delay pid alive ps=0
    pick "${modes[@]}"
    m=$REPLY
    IFS='|' read -r name np opts <<< "$m"
    dir="$out/$cat.$t"
    mkdir -p "$dir"
    v=$((RANDOM % np))
    delay=$((RANDOM % 1500)) # milliseconds, drawn here: a subshell's RANDOM ignores the seed
    delay=$(awk -v ms=$delay 'BEGIN { printf "%.3f", ms / 1000 }')
    case $name in ps-async | ps-ssp) ps=1 ;; esac
    # enough steps that the victim is usually still training when the signal comes
    timeout -k 5 "$deadline" chorus-run --grace $GRACE -np "$np" sh -c \
        "echo \$\$ > $dir/pid.\$CHORUS_RANK; exec chorus-train $common $opts --max-steps 600" \
        > "$dir/log" 2>&1 &
    local runner=$! t0
    t0=$(date +%s)
    local i=0
    while [ ! -s "$dir/pid.$v" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    # wait for the first step line so that the signal falls in training, then the delay
    i=0
    while ! grep -q "chorus-train: mlp" "$dir/log" && [ $i -lt 600 ] && kill -0 $runner 2> /dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    sleep "$delay"
    pid=$(cat "$dir/pid.$v" 2> /dev/null)
    alive=0
    [ -n "$pid" ] && kill -s "$sig" "$pid" 2> /dev/null && alive=1
    wait $runner
    rc=$?
    secs=$(($(date +%s) - t0))
    local what="$name -np $np: SIG$sig to rank $v after ${delay}s (rc $rc, ${secs}s)" log="$dir/log"
    local left="" p
    for p in $(cat "$dir"/pid.* 2> /dev/null); do
        kill -0 "$p" 2> /dev/null && left="$left $p"
    done
    if [ -n "$left" ]; then
        for p in $left; do kill -KILL "$p" 2> /dev/null; done
        verdict "$cat" "$t" orphan "$what: left$left" "$log"
        return
    fi
    if [ $alive = 0 ]; then
        if [ $rc = 0 ]; then verdict "$cat" "$t" ok "$what: the job had ended" "$log"; else
            verdict "$cat" "$t" "$(judge_failure "$log")" "$what: the job had ended" "$log"; fi
        return
    fi
    local f
    f=$(judge_failure "$log")
    if [ "$f" = hang ] || [ "$f" = crash ]; then
        verdict "$cat" "$t" "$f" "$what" "$log"
        return
    fi
    if [ $rc = 0 ]; then
        # a parameter-server worker may be lost in ps-async/ps-ssp: the job goes on, naming it
        if [ $ps = 1 ] && [ "$v" -ge 1 ] &&
            grep -q "worker $((v - 1)).*\(lost\|going on without\)\|rank $v.*\(lost\|going on without\)" "$log"; then
            verdict "$cat" "$t" ok "$what: went on without the worker, named" "$log"
        else
            verdict "$cat" "$t" success-after-failure "$what" "$log"
        fi
        return
    fi
    local first
    first=$(grep "^chorus-run: .*failed first" "$log" | head -1)
    if [ -z "$first" ]; then
        verdict "$cat" "$t" no-message "$what: no 'failed first' line" "$log"
    elif ! echo "$first" | grep -q "^chorus-run: rank $v (pid $pid)"; then
        verdict "$cat" "$t" wrong-culprit "$what: $first" "$log"
    else
        verdict "$cat" "$t" ok "$what" "$log"
    fi
}

# the modes that write checkpoints and whose straight runs repeat bit for bit (--zero and
# --tensor-parallel refuse --checkpoint-dir; --balance dynamic splits by measured speed, so no
# two runs repeat; ps-async repeats with one worker only)
ck_modes=("allreduce|2|" "topk|2|--compress topk:0.1" "randomk|2|--grad-sync engine --compress randomk:0.1"
    "powersgd|2|--grad-sync layer --compress powersgd:2" "fp16|2|--compress fp16"
    "pipeline|2|--pipeline-stages 2" "ps-sync|3|--mode ps-sync --servers 1"
    "ps-async|2|--mode ps-async --servers 1" "ps-ssp|2|--mode ps-ssp --servers 1")
trial_ckpt() {
    local cat=ckpt t=$1 m name np opts dir files f size how step newest
    pick "${ck_modes[@]}"
    m=$REPLY
    IFS='|' read -r name np opts <<< "$m"
    dir="$out/ckpt.$t"
    mkdir -p "$dir"
    local cr="chorus-run -np $np chorus-train $common $opts"
    if [ ! -e "$out/ref.$name.0" ]; then
        run "$dir/ref.log" $cr --max-steps 8 --dump-params "$out/ref.$name"
        [ $rc = 0 ] || { verdict $cat "$t" setup-failed "$name: reference run rc $rc" "$dir/ref.log"; rm -f "$out/ref.$name".*; return; }
    fi
    run "$dir/a.log" $cr --max-steps 4 --checkpoint-every 2 --checkpoint-dir "$dir/ck"
    [ $rc = 0 ] || { verdict $cat "$t" setup-failed "$name: first run rc $rc" "$dir/a.log"; return; }
    files=("$dir"/ck/*)
    f=${files[RANDOM % ${#files[@]}]}
    size=$(stat -c %s "$f")
    case $((RANDOM % 3)) in
        0) how="truncated to $((size = RANDOM * 32768 % (size + 1)))"; truncate -s "$size" "$f" ;;
        1) local at=$(((RANDOM * 32768 + RANDOM) % size))
            how="byte $at flipped"
            printf "\\$(printf %o $((($(od -An -tu1 -j "$at" -N1 "$f") ^ 0x5a) & 255)))" |
                dd of="$f" bs=1 seek="$at" conv=notrunc 2> /dev/null ;;
        2) how="emptied"; : > "$f" ;;
    esac
    local what="$name: $(basename "$f") $how"
    run "$dir/log" $cr --max-steps 8 --checkpoint-dir "$dir/ck" --resume --dump-params "$dir/p"
    what="$what (rc $rc, ${secs}s)"
    if [ $rc != 0 ]; then
        verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"
        return
    fi
    if ! same_params "$out/ref.$name" "$dir/p"; then
        verdict $cat "$t" wrong-state "$what: resumed parameters differ from 8 steps straight" "$dir/log"
        return
    fi
    # a damaged file of the newest step must be named when it is skipped
    step=$(basename "$f" | sed 's/.*\.0*\([0-9][0-9]*\)\.ckpt$/\1/')
    newest=4
    case $(basename "$f") in config.* | model.*) step=$newest ;; esac
    if [ "$step" = "$newest" ] && ! grep -q "$(basename "$f")" "$dir/log"; then
        verdict $cat "$t" no-message "$what: the damaged file was skipped silently" "$dir/log"
    else
        verdict $cat "$t" ok "$what" "$dir/log"
    fi
}

trial_disk() {
    local cat=disk t=$1 dir o kb fill need mnt="$out/mnt" big="$out/big" what np=2 env=()
    dir="$out/disk.$t"
    mkdir -p "$dir" "$mnt" "$big"
    pick metrics tensorboard dump-params checkpoint-dir timeline devfull
    o=$REPLY
    local args=(--max-steps 4)
    if [ "$o" = devfull ]; then
        run "$dir/log" chorus-run -np $np chorus-train $common "${args[@]}" --metrics /dev/full
        what="--metrics /dev/full (rc $rc, ${secs}s)"
        if [ $rc = 0 ]; then verdict $cat "$t" success-after-failure "$what" "$dir/log"
        else verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"; fi
        return
    fi
    outarg() { # the option that writes into $1
        case $o in
            metrics) echo "--metrics $1/m.json" ;;
            tensorboard) echo "--tensorboard $1/tb" ;;
            dump-params) echo "--dump-params $1/p" ;;
            checkpoint-dir) echo "--checkpoint-dir $1/ck --checkpoint-every 2" ;;
            timeline) echo "" ;;
        esac
    }
    mountpoint -q "$big" || mount -t tmpfs -o size=64m tmpfs "$big" || { echo "cannot mount a tmpfs (root needed)"; exit 2; }
    rm -rf "${big:?}"/*
    [ "$o" = timeline ] && env=(CHORUS_TIMELINE="$big/tl.%r.json")
    run "$dir/ref.log" env "${env[@]}" chorus-run -np $np chorus-train $common "${args[@]}" $(outarg "$big")
    need=$(du -sk "$big" | cut -f1)
    umount "$big"
    [ $rc = 0 ] || { verdict $cat "$t" setup-failed "$o: reference rc $rc" "$dir/ref.log"; return; }
    # a tmpfs of a random size below what the outputs take; sometimes already full
    kb=$((4 + RANDOM % (need > 8 ? need - 4 : 4)))
    mount -t tmpfs -o size=${kb}k tmpfs "$mnt"
    fill=0
    if [ $((RANDOM % 3)) = 0 ] || [ $(((kb + 3) / 4 * 4)) -ge "$need" ]; then
        dd if=/dev/zero of="$mnt/filler" bs=1k 2> /dev/null
        fill=1
    fi
    [ "$o" = timeline ] && env=(CHORUS_TIMELINE="$mnt/tl.%r.json")
    run "$dir/log" env "${env[@]}" chorus-run -np $np chorus-train $common "${args[@]}" $(outarg "$mnt")
    ls -la "$mnt" > "$dir/mnt.ls" 2>&1
    umount "$mnt"
    what="$o on a ${kb} KiB tmpfs$([ $fill = 1 ] && echo ", full") (the outputs take $need KiB) (rc $rc, ${secs}s)"
    if [ $rc = 0 ]; then
        if [ "$o" = timeline ] && grep -q "cannot write the timeline file $mnt/tl" "$dir/log"; then
            verdict $cat "$t" ok "$what: warned" "$dir/log"   # the timeline is documented as a warning
        else
            verdict $cat "$t" success-after-failure "$what" "$dir/log"
        fi
    else
        verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"
    fi
}

# option, value of rank 0, value of rank 1 (a flag alone: '-' means absent)
mm_opts=("--lr|0.05|0.1" "--batch|200|400" "--optim|sgd|adamw" "--momentum|0.9|0.5"
    "--weight-decay|0|0.01" "--no-nesterov|-|" "--dropout|0|0.2" "--seed|3|4" "--accum|1|2"
    "--lr-schedule|cosine|const" "--warmup-epochs|0|1" "--epochs|10|3" "--max-steps|6|8"
    "--grad-sync|fused|layer" "--compress|none|fp16" "--scale-lr|-|" "--threads|1|2"
    "--balance|static|dynamic" "--check-divergence|0|2" "--bucket-kb|0|64"
    "--grad-sync|engine|fused" "--compress|topk:0.1|topk:0.2" "--zero|0|1"
    "--recompute|-|" "--ps-grad-dtype|float32|float16")
trial_mismatch() {
    local cat=mismatch t=$1 m opt v0 v1 a0 a1 dir
    pick "${mm_opts[@]}"
    m=$REPLY
    IFS='|' read -r opt v0 v1 <<< "$m"
    dir="$out/mismatch.$t"
    mkdir -p "$dir"
    arg() { case $1 in -) echo "" ;; "") echo "$opt" ;; *) echo "$opt $1" ;; esac; }
    a0=$(arg "$v0")
    a1=$(arg "$v1")
    local base="$common --max-steps 6"
    [ "$opt" = --max-steps ] && base="$common"
    run "$dir/log" chorus-run -np 2 sh -c "if [ \$CHORUS_RANK = 1 ]; then x='$a1'; else x='$a0'; fi; exec chorus-train $base \$x --dump-params $dir/p"
    local what="rank 0 '$a0', rank 1 '$a1' (rc $rc, ${secs}s)"
    if [ $rc != 0 ]; then
        verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"
        return
    fi
    # exit 0: both ranks hold the parameters that all ranks with rank 0's options (or all with
    # rank 1's) would hold
    local r
    for r in 0 1; do
        local a
        a=$([ $r = 0 ] && echo "$a0" || echo "$a1")
        run "$dir/ref$r.log" chorus-run -np 2 chorus-train $base $a --dump-params "$dir/ref$r"
    done
    if same_params "$dir/p" "$dir/ref0" || same_params "$dir/p" "$dir/ref1"; then
        verdict $cat "$t" ok "$what: the parameters of one side's options" "$dir/log"
    else
        verdict $cat "$t" wrong-state "$what: parameters match neither side's options" "$dir/log"
    fi
}

# a variable of rank 1 only, and the trainer's options
em_vars=("CHORUS_SHM=0|" "CHORUS_SHM_CMA=0|" "CHORUS_SHM_CMA=1|" "CHORUS_TCP_LANES=2|"
    "CHORUS_ALGO_ALLREDUCE=ring|" "CHORUS_ALGO_ALLREDUCE=rd|" "CHORUS_COMPRESSION=fp16|--grad-sync engine"
    "CHORUS_COMPRESSION=bf16|--grad-sync engine" "CHORUS_FUSION_THRESHOLD=0|--grad-sync engine"
    "CHORUS_CACHE_CAPACITY=0|--grad-sync engine" "CHORUS_CYCLE_TIME_MS=20|--grad-sync engine"
    "CHORUS_AUTOTUNE=1|--grad-sync engine" "CHORUS_ALGO_BROADCAST=chain|" "CHORUS_SHM_CHUNK=262144|"
    "CHORUS_SHM_ONESHOT_MAX=0|" "CHORUS_TCP_ONESHOT_MAX=0|" "CHORUS_PS_SERVERS=2|--mode ps-sync"
    "CHORUS_SHM_CMA_MIN=0|" "CHORUS_SHM_CMA_MAX=0|")
trial_envmismatch() {
    local cat=envmismatch t=$1 var opts dir
    pick "${em_vars[@]}"
    IFS='|' read -r var opts <<< "$REPLY"
    dir="$out/envmismatch.$t"
    mkdir -p "$dir"
    run "$dir/log" chorus-run -np 2 sh -c "[ \$CHORUS_RANK = 1 ] && export $var; exec chorus-train $common --max-steps 4 $opts --dump-params $dir/p"
    local what="rank 1 only: $var $opts (rc $rc, ${secs}s)"
    if [ $rc != 0 ]; then
        verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"
        return
    fi
    # exit 0: the variable changes no result, or both ranks still hold the same parameters
    run "$dir/ref.log" chorus-run -np 2 chorus-train $common --max-steps 4 $opts --dump-params "$dir/ref"
    if cmp -s "$dir/p.0" "$dir/p.1" 2> /dev/null || [ ! -e "$dir/p.1" ]; then
        verdict $cat "$t" ok "$what: the ranks hold the same parameters" "$dir/log"
    else
        verdict $cat "$t" wrong-state "$what: the ranks' parameters differ" "$dir/log"
    fi
}

fuzz_values=("" "-1" "0" "1e999" "nan" "inf" "-inf" "99999999999999999999" "0x10" "1.5" "abc"
    "-" "--" " 1" "1 " "%s%n" "$(printf 'x%.0s' {1..5000})" "/nonexistent/x" "/dev/full" "2147483648"
    "-2147483649" "1e-300" "0.0000001" "3," "topk:" "topk:2" "topk:-1" "powersgd:0"
    "randomk:1e-9" "powersgd:99999" "1:2" "mlp" "large" "cnn" "ps-foo" "1f1b" "gpipe")
fuzz_opts=(--epochs --batch --accum --optim --lr --lr-schedule --warmup-epochs --momentum
    --weight-decay --dropout --seed --threads --data --checkpoint-dir --checkpoint-every
    --metrics --max-steps --dump-params --check-divergence --test-perturb --grad-sync --bucket-kb
    --log-every --mode --servers --staleness --ps-grad-dtype --time-limit --compress --eval-every
    --model --tensor-parallel --zero --recompute= --max-memory-mb --tensorboard --balance
    --balance-every --straggler-timeout --pipeline-stages --microbatches --schedule)
trial_fuzz() {
    local cat=fuzz t=$1 opt val dir np
    pick "${fuzz_opts[@]}"
    opt=$REPLY
    pick "${fuzz_values[@]}"
    val=$REPLY
    dir="$out/fuzz.$t"
    mkdir -p "$dir"
    np=$((1 + RANDOM % 3))
    case $opt in
        *=) set -- "$opt$val" ;;
        *) set -- "$opt" "$val" ;;
    esac
    # run inside the trial's directory: outputs named by the value stay there
    run "$dir/log" sh -c 'cd "$1" && shift && exec "$@"' sh "$dir" chorus-run -np $np \
        chorus-train $common --max-steps 3 --time-limit 60 "$@"
    local what="-np $np $opt '${val:0:40}' (rc $rc, ${secs}s)"
    [ "$opt" = --time-limit ] && what="$what (the trial's own --time-limit 60 is replaced)"
    if [ $rc = 0 ]; then
        # exit 0 with a value that is not a value: accepted garbage
        case "$val" in
            abc | "" | - | -- | "%s%n" | "1e999" | nan | inf | -inf | "3," | x*)
                case $opt in --data | --checkpoint-dir | --metrics | --dump-params | --tensorboard | --test-perturb) ;;
                    *) verdict $cat "$t" accepted-garbage "$what" "$dir/log"; return ;;
                esac ;;
        esac
        verdict $cat "$t" ok "$what" "$dir/log"
    else
        verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"
    fi
}

env_vars=(CHORUS_DEBUG CHORUS_DEBUG_SUBSYS CHORUS_DEBUG_FILE CHORUS_HEARTBEAT_S CHORUS_SPIN_US
    CHORUS_BIND CHORUS_SOCKET_BUF CHORUS_TCP_SEGMENT CHORUS_TCP_LANES CHORUS_ALGO_ALLREDUCE
    CHORUS_ALGO_BROADCAST CHORUS_ALGO_ALLGATHER CHORUS_SHM CHORUS_SHM_CHUNK CHORUS_SHM_ONESHOT_MAX
    CHORUS_SHM_SPIN_US CHORUS_SHM_NT_MIN CHORUS_SHM_CMA CHORUS_SHM_CMA_MIN CHORUS_SHM_CMA_MAX
    CHORUS_SHM_CMA_PIECE CHORUS_TCP_ONESHOT_MAX CHORUS_BCAST_TREE_MAX CHORUS_MAX_MESSAGE
    CHORUS_CYCLE_TIME_MS CHORUS_FUSION_THRESHOLD CHORUS_CACHE_CAPACITY CHORUS_STALL_WARN_S
    CHORUS_DESYNC_S CHORUS_STALL_SHUTDOWN_S CHORUS_TIMELINE CHORUS_TENSORBOARD
    CHORUS_ENGINE_IDLE_MS CHORUS_COMPRESSION CHORUS_AUTOTUNE CHORUS_AUTOTUNE_STEPS
    CHORUS_AUTOTUNE_WARMUP CHORUS_PS_SERVERS CHORUS_IFACE CHORUS_HEARTBEAT_TIMEOUT_S
    CHORUS_TIMEOUT_S CHORUS_START_TIMEOUT_S CHORUS_SECRET CHORUS_BIND_ANY)
trial_env() {
    local cat=env t=$1 var val dir mode
    pick "${env_vars[@]}"
    var=$REPLY
    pick "${fuzz_values[@]}"
    val=$REPLY
    dir="$out/env.$t"
    mkdir -p "$dir"
    pick "" "--grad-sync engine" "--mode ps-sync --servers 1" "--zero 1"
    mode=$REPLY
    case $var in
        CHORUS_TIMEOUT_S | CHORUS_START_TIMEOUT_S | CHORUS_HEARTBEAT_TIMEOUT_S | CHORUS_STALL_*)
            # a long timeout makes a long wait legitimate: keep the deadline above it
            case $val in "" | *[!0-9.]* | *.*.*) ;; *)
                if awk -v v="$val" 'BEGIN { exit !(v > 60) }'; then val=60; fi ;; esac ;;
    esac
    run "$dir/log" sh -c 'cd "$1" && shift && exec "$@"' sh "$dir" env "$var=$val" chorus-run -np 2 \
        chorus-train $common --max-steps 3 $mode
    local what="$var='${val:0:40}' $mode (rc $rc, ${secs}s)"
    if [ $rc = 0 ]; then verdict $cat "$t" ok "$what" "$dir/log"
    else verdict $cat "$t" "$(judge_failure "$dir/log")" "$what" "$dir/log"; fi
}

cleanup() {
    mountpoint -q "$out/mnt" 2> /dev/null && umount "$out/mnt"
    mountpoint -q "$out/big" 2> /dev/null && umount "$out/big"
}
trap cleanup EXIT

for c in $cats; do
    for ((t = 1; t <= trials; t++)); do
        case $c in
            kill) trial_kill kill "$t" KILL ;;
            stop) trial_kill stop "$t" STOP ;;
            ckpt) trial_ckpt "$t" ;;
            disk) trial_disk "$t" ;;
            mismatch) trial_mismatch "$t" ;;
            envmismatch) trial_envmismatch "$t" ;;
            fuzz) trial_fuzz "$t" ;;
            env) trial_env "$t" ;;
            *) echo "unknown category $c" >&2; exit 2 ;;
        esac
    done
done
echo "--- verdicts (category, verdict, trials)"
cut -f1,3 "$res" | sort | uniq -c | awk '{ printf "%-8s %-22s %d\n", $2, $3, $1 }'
! cut -f3 "$res" | grep -qv '^ok$'
