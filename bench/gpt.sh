#!/bin/sh
# gpt.sh - chorus-train's GPT (--model gpt) against the same model trained by PyTorch 2.x and by
# llm.c, in one invocation: tokens per second and model FLOPs utilisation.
#   1. chorus-train --model gpt under chorus-run -np NP, one OpenBLAS thread per rank
#      (--threads 1): --grad-sync fused (the default: one allreduce after backward) and
#      --grad-sync engine (each block's gradient sent while backward goes on); CHORUS_ARGS adds
#      options to both. Their OPENBLAS_CORETYPE is CORETYPE, unset by default whatever the
#      environment says: the kernels OpenBLAS picks for the CPU by itself (Debian's 0.3.21 picks
#      its AVX-512 Cooperlake kernels on AMD's Zen 5). On a CPU with AVX-512, also
#      --grad-sync engine on OpenBLAS's other family of kernels (row chorus-other):
#      OPENBLAS_CORETYPE=$AVX2_CORE (AVX2) where it picked AVX-512 ones, $AVX512_CORE where it
#      picked ones without AVX-512;
#   2. the same model in PyTorch with DistributedDataParallel over Gloo, and 3. with FSDP2
#      (fully_shard per block, then the whole model) over Gloo: bench/gpt_train_torch.py,
#      whose torch model is the one the py_gpt_torch test holds nn/gpt.c against; NP ranks
#      started by that script (env://), each with torch.set_num_threads(1);
#   4. llm.c's CPU trainer (train_gpt2.c of the checkout LLMC=DIR, built here into
#      $BUILD/llmc, never part of Chorus; skipped with a note when LLMC is not given), one
#      process with LLMC_THREADS OpenMP threads (2): the reference for one process using the
#      cores that the NP ranks use. bench/llmc_gpt.c is its training loop with our batch.
# All four start from chorus-train's initial parameters for PRESET and SEED and train on the
# byte tokens of the same fortune text (bench/gpt_prep.c writes the parameters, llm.c's
# checkpoint and token file of them): the same shape, BATCH windows of the context per rank
# per step (llm.c: NP x BATCH per step, the same global batch), AdamW (betas 0.9, 0.999, eps
# 1e-8, weight decay 0.01) at the constant rate LR; chorus-train and torch clip the gradient's
# global norm to 1 (llm.c's CPU trainer has no clipping). Each rate is the global batch's tokens
# over the sum of the times of the steps after the first WARMUP (rank 0's steps; each ends in
# the gradient's collective), the run's STEPS in all. The optimizers' state, the loss's value
# and the data order play no part in the time.
#
# The peak: bench/gemm_peak.c, OpenBLAS's sgemm of square float32 matrices of side GEMM_N on 1
# thread and on NP threads, the best of 5 in each round, the best of all rounds, with the
# kernel OpenBLAS picks and (where the row above runs) with its AVX-512 kernel: the machine's
# peak is the higher. Model FLOPs
# per token: 6 (P - context x width) + 12 layers x width x context (PaLM's and nanoGPT's
# estimate: 2 flops per weight and token forward, 4 backward, over the weights that multiply,
# the tied output layer counted once in the token embedding, the position embedding, which
# only adds, left out; plus attention's two T x T products per layer, masked half included,
# as the kernels compute it). MFU = that x tokens/s / the NP-thread peak.
#
# Each run is repeated REPEAT times, interleaved; the table shows the median, the spread (min -
# max, (max - min) / median), MFU at the median and the ratio to DDP's median. The load
# average is printed before and after: numbers mean something only on a quiet machine. HIPRI=1
# (root): each run in a session of its own whose scheduling group has nice -19
# (bench/hipri.sh). Every run is stopped after LIMIT seconds.
#
# Knobs (environment, with defaults):
#   BUILD=build        Chorus build dir (make trainer); relative to the repository root
#   PYTHON=~/.cache/chorus/torch2-venv/bin/python if it exists, else /usr/bin/python3: a Python
#                      with torch 2.x (FSDP2 needs torch.distributed.fsdp.fully_shard; without
#                      it that row says so)
#   LLMC=              a checkout of karpathy/llm.c (its train_gpt2.c and llmc/)
#   LLMC_THREADS=2     OpenMP threads of llm.c's trainer
#   PRESET=tiny        the shape: tiny or gpt2-124m (chorus-train --preset)
#   NP=2 BATCH=16      ranks; windows per rank per step (chorus-train --batch NP x BATCH)
#   STEPS=30 WARMUP=5  steps per run; the first WARMUP untimed
#   REPEAT=3 LR=0.0005 SEED=1 GEMM_N=2048 LIMIT=600 HIPRI=0
#   RUNS="chorus chorus-engine chorus-other ddp fsdp2 llmc"   which rows to run
#   CORETYPE=          OPENBLAS_CORETYPE of the chorus rows and the peak (unset: OpenBLAS's choice)
#   AVX2_CORE=Haswell AVX512_CORE=SkylakeX   OPENBLAS_CORETYPE of the chorus-other row
#   CHORUS_ARGS=       extra chorus-train options (e.g. --grad-sync engine)
#
#   bench/gpt.sh
#   LLMC=/path/to/llm.c REPEAT=5 HIPRI=1 bench/gpt.sh
#   PRESET=gpt2-124m BATCH=1 STEPS=4 WARMUP=1 REPEAT=1 bench/gpt.sh
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
venv=$HOME/.cache/chorus/torch2-venv/bin/python
[ -x "$venv" ] || venv=/usr/bin/python3
PYTHON=${PYTHON:-$venv}
LLMC=${LLMC:-}
LLMC_THREADS=${LLMC_THREADS:-2}
PRESET=${PRESET:-tiny}
NP=${NP:-2}
BATCH=${BATCH:-16}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
REPEAT=${REPEAT:-3}
LR=${LR:-0.0005}
SEED=${SEED:-1}
GEMM_N=${GEMM_N:-2048}
LIMIT=${LIMIT:-600}
RUNS=${RUNS:-chorus chorus-engine chorus-other ddp fsdp2 llmc}
CORETYPE=${CORETYPE:-}
AVX2_CORE=${AVX2_CORE:-Haswell}
AVX512_CORE=${AVX512_CORE:-SkylakeX}
CHORUS_ARGS=${CHORUS_ARGS:-}
. "$ROOT/bench/hipri.sh"
[ "$STEPS" -gt "$WARMUP" ] || { echo "gpt.sh: STEPS must exceed WARMUP" >&2; exit 2; }
for f in chorus-run chorus-train; do
    [ -x "$BUILD/bin/$f" ] || { echo "gpt.sh: $BUILD/bin/$f not found: run make trainer" >&2; exit 1; }
done
out=$(mktemp -d "${TMPDIR:-/tmp}/chorus-gpt.XXXXXX")
trap 'rm -rf "$out"' EXIT
trap 'exit 130' INT TERM HUP PIPE # through the EXIT trap
say() { printf '%s\n' "$*" >&2; }

# The tools: the inputs' writer and the GEMM peak against the build's libraries and OpenBLAS.
tools=$BUILD/bench-gpt
mkdir -p "$tools"
${CC:-cc} -O2 -I"$ROOT/include" -o "$tools/gpt_prep" "$ROOT/bench/gpt_prep.c" -L"$BUILD/lib" \
    -Wl,-rpath,"$BUILD/lib" -lchorus_nn -lchorus -lm
${CC:-cc} -O2 -o "$tools/gemm_peak" "$ROOT/bench/gemm_peak.c" -lopenblas
shape=$("$tools/gpt_prep" "$out" "$PRESET" "$SEED")
# shellcheck disable=SC2086  # the words of gpt_prep's line:
# gpt_prep: layers L d_model C heads H context T vocab V params P tokens N
set -- $shape
L=$3 C=$5 H=$7 T=$9 V=${11} P=${13}
# The chorus rows' OPENBLAS_CORETYPE: CORETYPE, or none (the environment's is not passed on)
env_coretype=${OPENBLAS_CORETYPE:-}
unset OPENBLAS_CORETYPE
blas="env ${CORETYPE:+OPENBLAS_CORETYPE=$CORETYPE}"
env_note=
[ -n "$CORETYPE" ] || [ -z "$env_coretype" ] || env_note=", not $env_coretype as in the environment"
# The other kernels' row (where the CPU has AVX-512): AVX2 ones where OpenBLAS picked AVX-512
# ones, AVX-512 ones where it did not
core=$($blas "$tools/gemm_peak" 64 1 1 | sed -n 's/.* core \([^ ]*\).*/\1/p')
other=
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
    case $core in SkylakeX | Cooperlake | SapphireRapids) other=$AVX2_CORE ;; *) other=$AVX512_CORE ;; esac
fi
flops=$(echo "$P $T $C $L" | awk '{printf "%.0f", 6 * ($1 - $2 * $3) + 12 * $4 * $3 * $2}')

llmc_note=
llmc_bin=
case " $RUNS " in *" llmc "*)
    if [ -z "$LLMC" ]; then
        llmc_note="llm.c: skipped (give a checkout of karpathy/llm.c as LLMC=DIR)"
    elif [ ! -f "$LLMC/train_gpt2.c" ]; then
        llmc_note="llm.c: skipped ($LLMC/train_gpt2.c not found)"
    else
        mkdir -p "$BUILD/llmc"
        llmc_bin=$BUILD/llmc/llmc_gpt
        # llm.c's Makefile's flags for train_gpt2.c (-march=native where the compiler has it)
        if ! ${CC:-cc} -Ofast -march=native -Wno-unused-result -fopenmp -DOMP -I"$LLMC" \
            -o "$llmc_bin" "$ROOT/bench/llmc_gpt.c" -lm 2> "$out/llmc.build"; then
            llmc_note="llm.c: skipped (its build failed: $(head -n 1 "$out/llmc.build"))"
            llmc_bin=
        fi
        rev=$(git -C "$LLMC" rev-parse --short HEAD 2> /dev/null || echo "not a git checkout")
    fi
    ;;
esac
has_fsdp2=$("$PYTHON" -c 'from torch.distributed.fsdp import fully_shard; print(1)' 2> /dev/null || true)

echo "# $(date -u '+%F %T') UTC, $(uname -n), load $(cut -d' ' -f1-3 /proc/loadavg)$HIPRI_NOTE"
# The host: CPUs, which share which cache, NUMA, memory bandwidth, BLAS (bench/topology.sh).
BUILD=$BUILD sh "$ROOT/bench/topology.sh"
echo "# chorus $(git -C "$ROOT" describe --always --dirty 2> /dev/null): OpenBLAS" \
    "$(readlink -f "$(ldd "$BUILD/bin/chorus-train" | awk '/openblas/ {print $3}')" 2> /dev/null)," \
    "kernels $core (OPENBLAS_CORETYPE ${CORETYPE:-unset}$env_note)"
torch_blas=$("$PYTHON" -c 'import re, torch; m = re.search("BLAS_INFO=([^,]*)", torch.__config__.show()); print(m.group(1) if m else "?")' 2> /dev/null || echo "?")
echo "# torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2> /dev/null) (BLAS $torch_blas) at $PYTHON"
[ -n "$llmc_bin" ] && echo "# llm.c $LLMC ($rev), $LLMC_THREADS OpenMP threads"
echo "# GPT $PRESET: $L layers, width $C, $H heads, context $T, vocab $V, $P parameters;" \
    "$flops model FLOPs per token; $NP ranks x $BATCH windows per step, $STEPS steps ($WARMUP untimed), lr $LR"

# run NAME CMD...: the command's output into $out/NAME.<round>, its exit noted
run() {
    _name=$1
    shift
    say "gpt.sh: round $round: $_name"
    if ! hipri timeout -k 5 "$LIMIT" "$@" > "$out/$_name.$round" 2>&1; then
        say "gpt.sh: $_name FAILED in round $round:"
        tail -n 5 "$out/$_name.$round" >&2
        failed=1
    fi
}
# run_chorus NAME SYNC [VAR=value...]: chorus-train, its rate from its metrics (the steps after
# the first WARMUP)
run_chorus() {
    _name=$1 _sync=$2
    shift 2
    # shellcheck disable=SC2086  # CHORUS_ARGS and $blas are lists of words
    run "$_name" $blas "$@" "$BUILD/bin/chorus-run" -np "$NP" "$BUILD/bin/chorus-train" --model gpt \
        --preset "$PRESET" --seed "$SEED" --batch $((NP * BATCH)) --max-steps "$STEPS" \
        --threads 1 --grad-sync "$_sync" --lr "$LR" --lr-schedule const --warmup-epochs 0 \
        --weight-decay 0.01 --clip-grad 1 --no-eval --sample 0 --metrics "$out/$_name.json" \
        $CHORUS_ARGS
    awk -v w="$WARMUP" -v tok=$((NP * BATCH * T)) -F'[:,]' '/"step_s"/ {
        for (i = 1; i < NF; i++) { if ($i == "{\"step\"") s = $(i + 1); if ($i == "\"step_s\"") d = $(i + 1) }
        if (s > w) { sum += d; n++ } }
        END { if (n && sum > 0) printf "%.1f\n", n * tok / sum }' "$out/$_name.json" \
        >> "$out/rate.$_name" || true
}
failed=0
round=1
while [ "$round" -le "$REPEAT" ]; do
    for r in $RUNS; do
        case $r in
        chorus) run_chorus chorus fused ;;
        chorus-engine) run_chorus chorus-engine engine ;;
        chorus-other) [ -z "$other" ] || run_chorus chorus-other engine OPENBLAS_CORETYPE="$other" ;;
        ddp | fsdp2)
            if [ "$r" = fsdp2 ] && [ -z "$has_fsdp2" ]; then continue; fi
            run "$r" "$PYTHON" "$ROOT/bench/gpt_train_torch.py" --mode "$r" --np "$NP" \
                --params "$out/params.f32" --tokens "$out/train.bin" --layers "$L" --d-model "$C" \
                --heads "$H" --context "$T" --vocab "$V" --batch "$BATCH" --steps "$STEPS" \
                --warmup "$WARMUP" --lr "$LR" --weight-decay 0.01 --clip 1 --limit "$LIMIT"
            sed -n 's/^gpt_train_torch: .*tokens_per_s \([0-9.]*\).*/\1/p' "$out/$r.$round" >> "$out/rate.$r"
            ;;
        llmc)
            [ -n "$llmc_bin" ] || continue
            run llmc env OMP_NUM_THREADS="$LLMC_THREADS" "$llmc_bin" "$out/gpt2.bin" "$out/train.bin" \
                $((NP * BATCH)) "$T" "$STEPS" "$WARMUP" "$LR" 0.01
            sed -n 's/^llmc_gpt: .*tokens_per_s \([0-9.]*\).*/\1/p' "$out/llmc.$round" >> "$out/rate.llmc"
            ;;
        *) say "gpt.sh: unknown run '$r' in RUNS (chorus chorus-engine chorus-other ddp fsdp2 llmc)" && exit 2 ;;
        esac
    done
    for t in 1 "$NP"; do
        # shellcheck disable=SC2086  # $blas is a list of words
        hipri $blas "$tools/gemm_peak" "$GEMM_N" "$t" 5 >> "$out/peak.$t"
        [ -z "$other" ] || hipri env OPENBLAS_CORETYPE="$other" "$tools/gemm_peak" "$GEMM_N" "$t" 5 >> "$out/peak.$t"
    done
    round=$((round + 1))
done

# best FILE [CORE]: the best rate in FILE (of kernel CORE)
best() { sed -n "s/.* core ${2:-[^ ]*} best_gflops \([0-9.]*\).*/\1/p" "$1" | sort -g | tail -n 1; }
peakn=$(best "$out/peak.$NP")
ddp=$(median < "$out/rate.ddp" 2> /dev/null || true)
# row LABEL RATEFILE: | label | median | min - max | spread | MFU | / DDP |
row() {
    [ -s "$2" ] || { printf '| %s | (no result) | | | | |\n' "$1"; return; }
    sort -g "$2" | awk -v l="$1" -v f="$flops" -v p="$peakn" -v d="$ddp" '{v[NR] = $1} END {
        m = v[int((NR + 1) / 2)]
        printf "| %s | %.0f | %.0f - %.0f | %.1f%% | %.1f%% | %s |\n", l, m, v[1], v[NR],
            100 * (v[NR] - v[1]) / m, 100 * m * f / (p * 1e9), (d > 0 ? sprintf("%.2fx", m / d) : "") }'
}
printf '\n| GPT %s, %s ranks x %s windows of %s tokens per step, median of %s runs | tokens/s | min - max | spread | MFU | / DDP |\n|---|---|---|---|---|---|\n' \
    "$PRESET" "$NP" "$BATCH" "$T" "$REPEAT"
for r in $RUNS; do
    case $r in
    chorus) row "chorus-train, $NP ranks x 1 OpenBLAS thread ($core), --grad-sync fused" "$out/rate.chorus" ;;
    chorus-engine) row "chorus-train, $NP ranks x 1 OpenBLAS thread ($core), --grad-sync engine" "$out/rate.chorus-engine" ;;
    chorus-other)
        [ -z "$other" ] ||
            row "chorus-train, $NP ranks x 1 OpenBLAS thread (OPENBLAS_CORETYPE=$other), --grad-sync engine" "$out/rate.chorus-other"
        ;;
    ddp) row "PyTorch DDP (Gloo), $NP ranks x 1 thread" "$out/rate.ddp" ;;
    fsdp2)
        if [ -n "$has_fsdp2" ]; then
            row "PyTorch FSDP2 (Gloo), $NP ranks x 1 thread" "$out/rate.fsdp2"
        else
            printf '| PyTorch FSDP2 | (skipped: this torch has no torch.distributed.fsdp.fully_shard) | | | | |\n'
        fi
        ;;
    llmc) [ -z "$llmc_bin" ] || row "llm.c train_gpt2.c, 1 process x $LLMC_THREADS OpenMP threads" "$out/rate.llmc" ;;
    esac
done
echo
peaks() { # the best of each kernel on 1 and NP threads
    for k in $core ${other:+$other}; do
        printf '%s %s GFLOP/s on 1 thread, %s on %s; ' "$k" "$(best "$out/peak.1" "$k")" \
            "$(best "$out/peak.$NP" "$k")" "$NP"
    done
}
echo "# GEMM peak (OpenBLAS sgemm, float32, side $GEMM_N, best of $((5 * REPEAT)) per kernel): $(peaks)MFU against the best on $NP threads, $peakn GFLOP/s"
[ -n "$llmc_note" ] && echo "# $llmc_note"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
