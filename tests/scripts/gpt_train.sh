#!/bin/sh
# gpt_train.sh - chorus-train --model gpt with real ranks, on real text: a few of Debian's
# fortune databases copied into a directory of their own (small, so that a step and an
# evaluation take a moment), and a small shape of the GPT.
#   sync      2 ranks: --grad-sync fused, layer and engine (with buckets) end with the same
#             parameters, to the bit, on both ranks; --accum 2 trains too; the validation line,
#             tokens/s, the sampled text and OpenBLAS's kernels are printed; under
#             OPENBLAS_CORETYPE=Haswell on a CPU with AVX-512, a note on the AVX-512 kernels
#   resume    8 steps straight and 4 + --resume 4 (checkpoints every 4 steps, 2 ranks) end
#             with the same parameters, to the bit; a resume with another shape or another
#             --clip-grad is refused naming both
#   learns    250 steps on 2 ranks bring the validation loss below the unigram model's
#   tp        --tensor-parallel 2 (heads and MLP split over 2 ranks) follows one rank's losses
#             for 10 steps within 1e-4 (the row-parallel sums run in another order) and
#             prints its sample; so does a 2x2 grid (2 replicas x 2 shards, --grad-sync
#             engine), whose replicas end bitwise identical; heads that do not divide are
#             refused
#   zero      --zero 1 and --zero 2 on 2 ranks end 4 steps with the same parameters, to the bit,
#             as plain data parallelism, without clipping and with it (ZeRO-1 clips by the norm
#             of every rank's whole summed gradient, as data parallelism does; ZeRO-2 by the
#             norm from its shards, added in another order, so its losses are only held to
#             1e-6 of data parallelism's there, the bits compared without clipping); the
#             per-rank gradient and optimizer bytes shrink; --accum 2 with --zero 2 and
#             --zero with --tensor-parallel are refused with their reasons
#   tp_resume --tensor-parallel 2: 8 steps straight = 4 + --resume 4, to the bit, on both
#             shards (rank 0 gathers the shards' parameters and AdamW state into a checkpoint
#             of the whole model; a resume gives each shard its part); plain data parallelism
#             goes on from that checkpoint within 1e-4 of the split run's losses; a 2x2 grid
#             (2 replicas x 2 shards) resumes to the bit on all 4 ranks
#   zero_resume  --zero 1 and --zero 2 (clipping on): 8 steps straight = 4 + --resume 4, to
#             the bit, on both ranks (rank 0 gathers the optimizer state's chunks into a
#             checkpoint of the whole model; a resume gives each rank its chunks back); a
#             --zero 2 checkpoint resumes under --zero 1 and under plain data parallelism
#   zero3     --zero 3 (parameters sharded too, gathered per group just in time) on 2 ranks ends
#             4 steps with the parameters of plain data parallelism, to the bit, without
#             clipping, with --recompute, and with its validation loss and sampled text; with
#             --clip-grad 1 (the norm from the shards' squares, added in another order) its
#             losses are held to 1e-6 of data parallelism's and its parameters to 1e-6
#   zero_tail  an epoch whose short last step has one window, so that rank 1 has none: --zero 2
#             and --zero 3 (whose reduce-scatters and gathers run inside forward and backward)
#             end it with the parameters of plain data parallelism, to the bit, on both ranks
#   zero3_resume  --zero 3: 8 steps straight = 4 + --resume 4, to the bit, on both ranks; its
#             checkpoint (the whole model, gathered by rank 0) resumes under plain data
#             parallelism to the same bits, and on one rank
#   zero3_memory  the memory report of --zero 3 at 2 ranks (8 blocks): parameters, gradients
#             and optimizer state within 10% of their formulas (each rank's chunks of the
#             model, 1/2, plus one group's gather buffer and gradient buffer), about half of
#             plain data parallelism's bytes in all
#   zero3_refused  what --zero 3 does not combine with is refused with its reason
#   zero3_kill  under --zero 3 a rank killed mid-run stops the other with an error naming it
#             and the collective it was in (mostly ZeRO's: a group's all-gather, its
#             gradient's reduce-scatter, the norm's sum; else the step's sum of the loss), no
#             hang
#   recompute --recompute (each block's inner activations dropped after forward and computed
#             again in backward) ends 4 steps with the parameters of the run that keeps them,
#             to the bit, on its own, with --zero 2 and with --tensor-parallel 2, holding fewer
#             activation bytes per rank; --recompute=2 is refused
#   compress  --compress topk:0.1 (error feedback) on 2 ranks: 30 steps with --grad-sync fused,
#             layer and engine bring the training loss below 0.7 of the first step's; 8 steps
#             straight = 4 + --resume 4, to the bit, each rank's error feedback restored from
#             its checkpoint
#   powersgd  --compress powersgd:2 on 2 ranks (each weight matrix its own rank-2 factors, the
#             1-D tensors dense): 30 steps with --grad-sync fused, layer and engine bring the
#             training loss below 0.7 of the first step's, the replicas bitwise identical, the
#             three modes the same bits; 8 steps straight = 4 + --resume 4, to the bit (each
#             rank's residuals and Q restored), fused and engine; a resume without a rank's
#             compressor state is refused with its reason
#   pipe      --pipeline-stages 2 (the embeddings and block 0 on rank 0; blocks 1-2, the final
#             LayerNorm and the tied output layer on rank 1) follows one rank's --accum 4 run:
#             losses within 1e-5 relative and every parameter within 1e-5 after 4 steps, with
#             GPipe and with 1F1B (which end with the same parameters, to the bit, and print
#             one rank's last gradient norm: every stage's squares, the tie once), and so do 3
#             stages of one block each (the middle one holds neither end); a 2x2 grid
#             (2 replicas x 2 stages) follows 2 ranks' --accum 4 as closely, its replicas
#             bitwise identical. Only the tied token embedding's gradient is added in another
#             order (each stage sums its part over the micro-batches, then the two parts are
#             added, where one rank adds both parts micro-batch by micro-batch), so the runs
#             part by float32 rounding (2.5e-7 measured), not by bits
#   pipe_resume  the pipelined GPT: 8 steps straight and 4 + --resume 4 end with the same
#             parameters, to the bit; one rank with --accum 4 resumes from its checkpoint (the
#             whole model's) and ends within 1e-5 of it; with --recompute (2 blocks a stage)
#             it ends with the same parameters, to the bit, holding fewer activation bytes on
#             each stage; what it does not combine with is refused with the reason
#   pipe_kill 3 stages of one block each; the middle stage's rank is killed mid-run: both
#             neighbours fail naming it
#   refused   the splits the GPT does not have yet, and GPT options given to another model,
#             are refused with their reason
set -u
PATH=${BUILD:-build}/bin:$PATH
d=$(mktemp -d)
run=""
trap '[ -n "$run" ] && kill "$run" 2>/dev/null; rm -rf "$d"' EXIT INT TERM
. tests/scripts/gpt_text.sh # fail, $d/text, run
small="--model gpt --data $d/text --layers 2 --d-model 64 --heads 4 --context 32 --batch 16 --log-every 2 --seed 4"
same() { # a b: the dumps of both ranks of runs a and b are equal
    for r in 0 1; do
        cmp "$d/$1.$r" "$d/$2.$r" || fail "$1 and $2: rank $r's parameters differ"
    done
}
refused() { # message args...: the run fails saying message
    msg=$1
    shift
    out=$(chorus-train $small --max-steps 1 "$@" 2>&1) && fail "$* was not refused"
    echo "$out" | grep -qF -- "$msg" || { echo "$out"; fail "$*: expected '$msg'"; }
    echo "refused $*: $(echo "$out" | tail -1)"
}
case "$1" in
sync)
    for s in fused layer engine; do
        run $s $small --max-steps 4 --grad-sync $s --bucket-kb 64 --sample 40 --dump-params "$d/$s"
        cmp "$d/$s.0" "$d/$s.1" || fail "--grad-sync $s: the ranks' parameters differ"
    done
    same fused layer
    same fused engine
    echo "--grad-sync fused, layer, engine: the same parameters on both ranks, to the bit"
    run accum $small --max-steps 4 --accum 2 --dump-params "$d/accum"
    cmp "$d/accum.0" "$d/accum.1" || fail "--accum 2: the ranks' parameters differ"
    cat "$d/engine.log"
    grep -q "validation after step 4: loss [0-9.]* nats per token (perplexity [0-9.]*; unigram [0-9.]*), next-byte accuracy" "$d/engine.log" || fail "no validation line"
    grep -q "gpt: [0-9]* tokens/s over" "$d/engine.log" || fail "no tokens/s line"
    grep -q "sample (40 bytes at temperature 0.8" "$d/engine.log" || fail "no sample"
    grep -q "gpt: OpenBLAS runs its [A-Za-z0-9]* kernels" "$d/engine.log" || fail "no kernels line"
    # OpenBLAS's AVX2 kernels on a CPU with AVX-512: rank 0 names them and says how to do better
    out=$(OPENBLAS_CORETYPE=Haswell chorus-train $small --max-steps 1 --no-eval --sample 0 2>&1) ||
        { echo "$out"; fail "OPENBLAS_CORETYPE=Haswell"; }
    line=$(echo "$out" | grep "gpt: OpenBLAS runs its") || { echo "$out"; fail "no kernels line"; }
    echo "$line"
    avx512=1
    for f in avx512f avx512cd avx512bw avx512dq avx512vl; do grep -qw $f /proc/cpuinfo || avx512=0; done
    note="gpt: note: they use no AVX-512, which this CPU has: OPENBLAS_CORETYPE=SkylakeX runs OpenBLAS's AVX-512 kernels"
    case $line in *"runs its Haswell kernels (OPENBLAS_CORETYPE=Haswell)") # a DYNAMIC_ARCH OpenBLAS
        if [ $avx512 = 1 ]; then
            echo "$out" | grep -qF "$note" || { echo "$out"; fail "no note on the AVX2 kernels"; }
            echo "$out" | grep -F "$note"
        elif echo "$out" | grep -qF "gpt: note: they use no AVX-512"; then
            fail "a note on AVX-512 where the CPU has none"
        fi
        ;;
    esac
    ;;
resume)
    run straight $small --max-steps 8 --no-eval --sample 0 --dump-params "$d/straight"
    run half $small --max-steps 4 --no-eval --sample 0 --checkpoint-dir "$d/ck" --checkpoint-every 4
    run rest $small --max-steps 8 --no-eval --sample 0 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume --dump-params "$d/rest"
    same straight rest
    echo "8 steps straight = 4 steps + --resume 4 steps, to the bit, on both ranks"
    out=$(chorus-run -np 2 chorus-train $small --layers 3 --max-steps 8 --no-eval --checkpoint-dir "$d/ck" --resume 2>&1) &&
        fail "a resume with another shape was not refused"
    echo "$out" | grep -q "are of a model built with --model gpt --layers 2 --d-model 64 --heads 4 --context 32 --vocab 256; this run asks for --model gpt --layers 3" ||
        { echo "$out"; fail "no message naming both shapes"; }
    echo "a resume with --layers 3 over --layers 2 is refused naming both"
    out=$(chorus-run -np 2 chorus-train $small --clip-grad 0.5 --max-steps 8 --no-eval --checkpoint-dir "$d/ck" --resume 2>&1) &&
        fail "a resume with another --clip-grad was not refused"
    echo "$out" | grep -qF -- "--clip-grad was 1 in the checkpoint, now 0.5" || { echo "$out"; fail "no message naming --clip-grad"; }
    echo "a resume with --clip-grad 0.5 over 1 is refused naming both"
    ;;
learns)
    run learn $small --epochs 5 --max-steps 250 --lr 0.004 --sample 200
    cat "$d/learn.log"
    python3 - "$d/learn.log" <<'PY' || fail "the validation loss is not below the unigram model's"
import re, sys
m = re.findall(r"validation after step 250: loss ([0-9.]+) .*unigram ([0-9.]+)",
               open(sys.argv[1], encoding="latin-1").read())  # the sample is bytes
loss, unigram = map(float, m[-1])
print(f"validation loss {loss:.4f}, unigram {unigram:.4f}")
sys.exit(0 if loss < unigram else 1)
PY
    ;;
tp)
    chorus-run -np 1 chorus-train $small --max-steps 10 --metrics "$d/one.jsonl" > "$d/one.log" 2>&1 || { cat "$d/one.log"; fail "one rank"; }
    run tp $small --max-steps 10 --tensor-parallel 2 --metrics "$d/tp.jsonl" --sample 40
    cat "$d/tp.log"
    grep -q "2 ranks = 1 data-parallel replica x 2 tensor-parallel shards" "$d/tp.log" || fail "no grid line"
    grep -q "sample (40 bytes" "$d/tp.log" || fail "no sample"
    python3 - "$d/one.jsonl" "$d/tp.jsonl" <<'PY' || fail "the tensor-parallel losses leave one rank's"
import json, sys
rows = [[json.loads(l) for l in open(f) if l.startswith('{"step"')] for f in sys.argv[1:]]
assert len(rows[0]) == len(rows[1]) == 10, [len(r) for r in rows]
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(*rows))
print(f"10 steps: largest loss difference between one rank and --tensor-parallel 2: {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
    # 4 ranks = 2 data replicas x 2 shards, the replicas' gradients summed by the engine
    chorus-run -np 4 chorus-train $small --max-steps 10 --tensor-parallel 2 --grad-sync engine --no-eval \
        --sample 0 --metrics "$d/grid.jsonl" --dump-params "$d/grid" > "$d/grid.log" 2>&1 || { cat "$d/grid.log"; fail "2x2 grid"; }
    for t in 0 1; do
        cmp "$d/grid.tp$t.0" "$d/grid.tp$t.1" || fail "2x2 grid: the replicas of shard $t differ"
    done
    python3 - "$d/one.jsonl" "$d/grid.jsonl" <<'PY' || fail "the 2x2 grid's losses leave one rank's"
import json, sys
rows = [[json.loads(l) for l in open(f) if l.startswith('{"step"')] for f in sys.argv[1:]]
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(*rows))
print(f"2x2 grid, --grad-sync engine: replicas identical; largest loss difference from one rank {worst:.2e}")
sys.exit(0 if len(rows[1]) == 10 and worst <= 1e-4 else 1)
PY
    refused "--tensor-parallel 3: the GPT's 4 heads do not divide among 3 ranks" --tensor-parallel 3
    ;;
zero)
    for z in 0 1 2; do
        for c in 0 1; do
            run z$z.c$c $small --max-steps 4 --no-eval --sample 0 --zero $z --clip-grad $c \
                --metrics "$d/z$z.c$c.jsonl" --dump-params "$d/z$z.c$c"
        done
    done
    for c in 0 1; do
        same z0.c$c z1.c$c
        echo "--zero 1 --clip-grad $c: the parameters of plain data parallelism, to the bit"
    done
    same z0.c0 z2.c0
    echo "--zero 2 --clip-grad 0: the parameters of plain data parallelism, to the bit"
    grep -q "last gradient norm [0-9.]* before clipping to 1$" "$d/z2.c1.log" || fail "no norm line"
    python3 - "$d" <<'PY' || fail "ZeRO's losses or memory leave plain data parallelism's"
import json, re, sys
d = sys.argv[1]
rows = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if l.startswith('{"step"')]
plain, z2 = rows("z0.c1"), rows("z2.c1")
worst = max(abs(a - b) for a, b in zip(plain, z2))
print(f"--zero 2 --clip-grad 1: {len(z2)} steps, largest loss difference from plain {worst:.2e}")
assert len(plain) == len(z2) == 4 and worst <= 1e-6
mem = {}
for z in range(3):
    m = re.search(r"memory rank 0: params ([0-9.]+) MiB, grads ([0-9.]+) MiB, optimizer ([0-9.]+) MiB",
                  open(f"{d}/z{z}.c1.log", encoding="latin-1").read())
    mem[z] = tuple(map(float, m.groups()))
    print(f"--zero {z}: rank 0 params {mem[z][0]} MiB, grads {mem[z][1]} MiB, optimizer {mem[z][2]} MiB")
assert mem[1][2] < 0.6 * mem[0][2] and mem[2][2] == mem[1][2], "the optimizer state is not sharded"
assert mem[2][1] < mem[1][1] == mem[0][1], "ZeRO-2 does not hold fewer gradient bytes"
PY
    refused "--zero 2 keeps no full gradient buffer to accumulate in" --zero 2 --accum 2
    refused "--zero with --tensor-parallel: the gradient norm for clipping" --zero 1 --tensor-parallel 2
    ;;
zero3)
    for v in "z0c0 --zero 0 --clip-grad 0" "z3c0 --zero 3 --clip-grad 0" \
        "z3r --zero 3 --clip-grad 0 --recompute" "z0c1 --zero 0 --clip-grad 1" \
        "z3c1 --zero 3 --clip-grad 1"; do
        n=${v%% *}
        run $n $small --max-steps 4 --sample 40 --metrics "$d/$n.jsonl" --dump-params "$d/$n" ${v#"$n"}
    done
    cat "$d/z3c0.log"
    same z0c0 z3c0
    same z0c0 z3r
    echo "--zero 3, without clipping and with --recompute: the parameters of plain data parallelism, to the bit"
    for f in "0:validation after step 4: loss" "1:sample (40 bytes"; do # lines after it: the text
        a=$(grep -a -A${f%%:*} -F "${f#*:}" "$d/z0c0.log") b=$(grep -a -A${f%%:*} -F "${f#*:}" "$d/z3c0.log")
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "--zero 3: '${f#*:}' differs from plain data parallelism's: '$a' / '$b'"
    done
    echo "--zero 3: the validation line and the sampled text of plain data parallelism"
    python3 - "$d" <<'PY' || fail "--zero 3 --clip-grad 1 leaves plain data parallelism"
import array, json, sys
d = sys.argv[1]
rows = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if l.startswith('{"step"')]
plain, z3 = rows("z0c1"), rows("z3c1")
worst = max(abs(a - b) for a, b in zip(plain, z3))
print(f"--zero 3 --clip-grad 1: {len(z3)} steps, largest loss difference from plain {worst:.2e}")
assert len(plain) == len(z3) == 4 and worst <= 1e-6
for r in (0, 1):
    a, b = (array.array("f", open(f"{d}/{n}.{r}", "rb").read()) for n in ("z0c1", "z3c1"))
    diff = max(abs(x - y) for x, y in zip(a, b))
    print(f"rank {r}: {len(b)} parameters, largest difference from plain {diff:.2e}")
    assert len(a) == len(b) == 118528 and diff <= 1e-6
PY
    ;;
zero_tail)
    # one fortune file and a context whose window count leaves 1 over a global batch of 32
    mkdir "$d/one"
    cp "$d/text/goedel" "$d/one/"
    pick=$(chorus-train --model gpt --data "$d/one" --layers 1 --d-model 16 --heads 1 --context 32 --max-steps 1 --no-eval --sample 0 2>&1 |
        sed -n 's/.* \([0-9]*\) training bytes.*/\1/p')
    [ -n "$pick" ] || fail "no training byte count in chorus-train's first line"
    T=$(python3 -c "import sys; b = int(sys.argv[1]); print(next(t for t in range(24, 129) if (b // t) % 32 == 1))" "$pick") ||
        fail "no context leaves one window over 32 for $pick bytes"
    one="--model gpt --data $d/one --layers 2 --d-model 64 --heads 4 --context $T --batch 32 --seed 4 --epochs 1 --clip-grad 0 --no-eval --sample 0"
    for z in 0 2 3; do run tail$z $one --zero $z --dump-params "$d/tail$z"; done
    grep -a "windows)" "$d/tail0.log"
    same tail0 tail2
    same tail0 tail3
    echo "an epoch's last step of one window (none on rank 1): --zero 2 and 3 end with plain data parallelism's parameters, to the bit"
    ;;
tp_resume)
    tp="--tensor-parallel 2 --no-eval --sample 0"
    run straight $small $tp --max-steps 8 --metrics "$d/straight.jsonl" --dump-params "$d/straight"
    run half $small $tp --max-steps 4 --checkpoint-dir "$d/ck" --checkpoint-every 4
    cp -r "$d/ck" "$d/ckplain"
    run rest $small $tp --max-steps 8 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume --dump-params "$d/rest"
    grep -a "resumed from" "$d/rest.log"
    for t in 0 1; do
        cmp "$d/straight.tp$t.0" "$d/rest.tp$t.0" || fail "--tensor-parallel 2: shard $t differs after 4 + --resume 4"
    done
    echo "--tensor-parallel 2: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both shards"
    # the checkpoint is of the whole model: plain data parallelism goes on from it, its losses
    # those of the split run within what the row-parallel sums' order allows
    run plain $small --max-steps 8 --no-eval --sample 0 --checkpoint-dir "$d/ckplain" --resume --metrics "$d/plain.jsonl"
    grep -aq "resumed from .*step 4" "$d/plain.log" || { cat "$d/plain.log"; fail "plain data parallelism did not resume the tensor-parallel checkpoint"; }
    python3 - "$d/straight.jsonl" "$d/plain.jsonl" <<'PY' || fail "plain data parallelism resumed from the tensor-parallel checkpoint leaves its losses"
import json, sys
rows = [{r["step"]: r["loss"] for r in map(json.loads, open(f)) if "step" in r and "loss" in r} for f in sys.argv[1:]]
steps = sorted(set(rows[0]) & set(rows[1]) & set(range(5, 9)))
worst = max(abs(rows[0][k] - rows[1][k]) for k in steps)
print(f"plain data parallelism from the --tensor-parallel 2 checkpoint: steps {steps}, largest loss difference {worst:.2e}")
sys.exit(0 if len(steps) == 4 and worst <= 1e-4 else 1)
PY
    # a 2x2 grid (2 replicas x 2 shards): the first replica's shards write, every replica resumes
    grid="--tensor-parallel 2 --batch 32 --no-eval --sample 0"
    chorus-run -np 4 chorus-train $small $grid --max-steps 8 --dump-params "$d/gs" > "$d/gs.log" 2>&1 || { cat "$d/gs.log"; fail "2x2 grid"; }
    chorus-run -np 4 chorus-train $small $grid --max-steps 4 --checkpoint-dir "$d/gck" --checkpoint-every 4 > "$d/gh.log" 2>&1 || { cat "$d/gh.log"; fail "2x2 grid, 4 steps"; }
    chorus-run -np 4 chorus-train $small $grid --max-steps 8 --checkpoint-dir "$d/gck" --checkpoint-every 4 --resume --dump-params "$d/gr" > "$d/gr.log" 2>&1 || { cat "$d/gr.log"; fail "2x2 grid, resumed"; }
    for f in tp0.0 tp0.1 tp1.0 tp1.1; do
        cmp "$d/gs.$f" "$d/gr.$f" || fail "2x2 grid: $f differs after 4 + --resume 4"
    done
    echo "2x2 grid: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on all 4 ranks"
    ;;
zero_resume)
    for z in 1 2; do
        zz="--zero $z --no-eval --sample 0"
        run straight$z $small --max-steps 8 $zz --dump-params "$d/straight$z"
        run half$z $small --max-steps 4 $zz --checkpoint-dir "$d/ck$z" --checkpoint-every 4
        [ $z = 2 ] && cp -r "$d/ck2" "$d/ck2one" && cp -r "$d/ck2" "$d/ck2plain"
        run rest$z $small --max-steps 8 $zz --checkpoint-dir "$d/ck$z" --checkpoint-every 4 --resume --dump-params "$d/rest$z"
        grep -a "resumed from" "$d/rest$z.log"
        same straight$z rest$z
        echo "--zero $z: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both ranks"
    done
    # ZeRO-1 computes plain data parallelism's bits (ZeRO-2's clipping norm adds in another
    # order), so a --zero 2 checkpoint resumed under either ends where ZeRO-1 straight does
    run z1 $small --max-steps 8 --zero 1 --no-eval --sample 0 --checkpoint-dir "$d/ck2one" --resume --dump-params "$d/z1"
    run plain $small --max-steps 8 --no-eval --sample 0 --checkpoint-dir "$d/ck2plain" --resume --dump-params "$d/plain"
    same z1 plain
    echo "a --zero 2 checkpoint resumes under --zero 1 and under plain data parallelism to the same bits"
    ;;
zero3_resume)
    z3="--zero 3 --no-eval --sample 0"
    run straight $small --max-steps 8 $z3 --dump-params "$d/straight"
    run half $small --max-steps 4 $z3 --checkpoint-dir "$d/ck" --checkpoint-every 4
    cp -r "$d/ck" "$d/ckplain"
    cp -r "$d/ck" "$d/ckone"
    run rest $small --max-steps 8 $z3 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume --dump-params "$d/rest"
    cat "$d/rest.log"
    same straight rest
    echo "--zero 3: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both ranks"
    run plain $small --max-steps 8 --no-eval --sample 0 --checkpoint-dir "$d/ckplain" --resume --dump-params "$d/plain"
    same straight plain
    echo "a --zero 3 checkpoint (the whole model) resumes under plain data parallelism to the same bits"
    chorus-run -np 1 chorus-train $small --max-steps 8 $z3 --checkpoint-dir "$d/ckone" --resume > "$d/one.log" 2>&1 ||
        { cat "$d/one.log"; fail "a --zero 3 checkpoint of 2 ranks on 1 rank"; }
    grep -q "resumed from .*train.00000000000000000004.ckpt: epoch 1, step 4" "$d/one.log" || { cat "$d/one.log"; fail "no resume line"; }
    grep -qF -- "-np was 2 in the checkpoint, now 1" "$d/one.log" || { cat "$d/one.log"; fail "no note on the number of ranks"; }
    grep -q "done: 8 steps" "$d/one.log" || { cat "$d/one.log"; fail "the one-rank resume did not finish"; }
    echo "a --zero 3 checkpoint of 2 ranks resumes on 1 rank (its chunks cut anew), with the note on the summation order"
    ;;
zero3_memory)
    for z in 0 3; do
        run mem$z $small --layers 8 --max-steps 2 --no-eval --sample 0 --zero $z --metrics "$d/mem$z.jsonl"
    done
    grep "memory rank" "$d/mem3.log"
    grep -q "ZeRO-3: the parameter all-gathers, layer by layer before each pass reads them (20.0 per step" "$d/mem3.log" ||
        fail "no gather line (8 blocks: forward 11 gathers, the embeddings twice for the tied output layer; backward 9, the output layer's kept from forward)"
    python3 - "$d" <<'PY' || fail "the memory report of --zero 3 leaves its formula"
import json, sys
d = sys.argv[1]
mem = lambda n: [json.loads(l) for l in open(f"{d}/{n}.jsonl") if l.startswith('{"memory"')][-1]["memory"]
V, T, C, L, N = 256, 32, 64, 8, 2
groups = [(V + T) * C] + [12 * C * C + 13 * C] * L + [2 * C]  # embeddings, blocks, final LayerNorm
P, G = sum(groups), max(groups)
want = {0: {"params": 4 * P, "grads": 4 * P, "optimizer": 8 * P},
        3: {"params": 4 * (P / N + G), "grads": 4 * (P / N + G), "optimizer": 8 * P / N}}
total = {}
for z in (0, 3):
    for r in mem(f"mem{z}"):
        for part, w in want[z].items():
            got = r[part]
            print(f"--zero {z} rank {r['rank']} {part}: {got} bytes, formula {w:.0f} ({got / w:.3f})")
            assert abs(got - w) <= 0.1 * w, f"--zero {z} {part}"
        total[z] = sum(r[p] for p in want[z])
ratio, formula = total[3] / total[0], (P / N * 16 + 8 * G) / (16 * P)
print(f"parameters + gradients + optimizer per rank: --zero 3 {total[3]} bytes, plain {total[0]}: "
      f"{ratio:.3f} of plain (formula {formula:.3f}: 1/{N} + one group's two buffers)")
assert abs(ratio - formula) <= 0.1 * formula and ratio < 0.6
PY
    ;;
zero3_refused)
    refused "--zero with --tensor-parallel: the gradient norm for clipping is not yet taken over shards of both kinds" --zero 3 --tensor-parallel 2
    refused "--zero reduces the gradients itself: leave --grad-sync at fused, not engine" --zero 3 --grad-sync engine
    refused "--zero 3 keeps no full gradient buffer to accumulate in: use --accum 1" --zero 3 --accum 2
    refused "--check-divergence compares the replicas' whole parameters; under --zero 3 each rank holds only its chunks of them" --zero 3 --check-divergence 2
    refused "--compress does not combine with --zero (its reduce-scatter shards the gradients)" --zero 3 --compress topk:0.1
    refused "--pipeline-stages with --zero: a stage's optimizer state is not sharded over its replicas yet" --zero 3 --pipeline-stages 2
    out=$(chorus-train --model mlp --zero 3 2>&1) && fail "--zero 3 with --model mlp was not refused"
    echo "$out" | grep -qF -- "--zero 3 shards the parameters too, gathered layer by layer just before each pass reads them: that is built for --model gpt; --model mlp takes --zero 1|2" ||
        { echo "$out"; fail "--zero 3 with mlp"; }
    echo "refused --model mlp --zero 3: $out"
    ;;
zero3_kill)
    . tests/scripts/ranks.sh
    chorus-run -np 2 chorus-train $small --zero 3 --max-steps 1000000 --no-eval --sample 0 \
        --log-every 1 --metrics "$d/m.jsonl" > "$d/kill.log" 2>&1 &
    run=$!
    wait_line "$d/m.jsonl" '"step"' || { cat "$d/kill.log"; fail "no step was recorded"; }
    victim=$(rank_pid $run 1)
    [ -n "$victim" ] || fail "rank 1 did not start"
    kill -9 "$victim"
    wait $run && fail "the job succeeded after a rank was killed"
    run=""
    cat "$d/kill.log"
    # the pid when rank 0 saw it go in shared memory, its host when over its connection
    grep -q "chorus-train\[0\]: .*rank 1 (\(pid $victim\|host [^)]*\)) was lost" "$d/kill.log" ||
        fail "rank 0 does not name the lost rank"
    ;;
recompute)
    for v in "keep" "again --recompute" "z2 --zero 2 --recompute" "tp --tensor-parallel 2" \
        "tpagain --tensor-parallel 2 --recompute"; do
        n=${v%% *}
        run $n $small --layers 3 --max-steps 4 --no-eval --sample 0 --dump-params "$d/$n" ${v#"$n"}
    done
    same keep again
    same keep z2
    for t in 0 1; do
        cmp "$d/tp.tp$t.0" "$d/tpagain.tp$t.0" || fail "--tensor-parallel 2 --recompute: shard $t differs"
    done
    echo "--recompute, alone, with --zero 2 and with --tensor-parallel 2: the same parameters, to the bit"
    python3 - "$d" <<'PY' || fail "--recompute does not hold fewer activation bytes"
import re, sys
act = {n: float(re.search(r"memory rank 0: .*activations ([0-9.]+) MiB", open(f"{sys.argv[1]}/{n}.log", encoding="latin-1").read()).group(1))
       for n in ("keep", "again", "tp", "tpagain")}
print("rank 0's activations (MiB):", act)
assert act["again"] < act["keep"] and act["tpagain"] < act["tp"]
PY
    refused "--recompute=K keeps every K-th layer of a stack; the GPT recomputes every block" --recompute=2
    ;;
compress)
    for s in fused layer engine; do
        run tk$s $small --max-steps 30 --no-eval --sample 0 --compress topk:0.1 --grad-sync $s \
            --metrics "$d/tk$s.jsonl"
        python3 - "$d/tk$s.jsonl" <<'PY' || fail "--compress topk:0.1 --grad-sync $s does not train"
import json, sys
rows = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith('{"step"')]
print(f"topk:0.1: {len(rows)} steps, training loss {rows[0]:.4f} -> {rows[-1]:.4f}")
sys.exit(0 if len(rows) == 30 and rows[-1] < 0.7 * rows[0] else 1)
PY
    done
    grep -q "gradient compression topk:0.1 (--grad-sync fused): a rank sends 20.00% of the dense gradient bytes" \
        "$d/tkfused.log" || fail "no compression line"
    tk="--no-eval --sample 0 --compress topk:0.1 --checkpoint-dir $d/tkck --checkpoint-every 4"
    run tkstraight $small --max-steps 8 --no-eval --sample 0 --compress topk:0.1 --dump-params "$d/tkstraight"
    run tkhalf $small --max-steps 4 $tk
    run tkrest $small --max-steps 8 $tk --resume --dump-params "$d/tkrest"
    same tkstraight tkrest
    echo "--compress topk:0.1: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both ranks"
    ;;
powersgd)
    for s in fused layer engine; do
        run ps$s $small --max-steps 30 --no-eval --sample 0 --compress powersgd:2 --grad-sync $s \
            --metrics "$d/ps$s.jsonl" --dump-params "$d/ps$s"
        python3 - "$d/ps$s.jsonl" <<'PY' || fail "--compress powersgd:2 --grad-sync $s does not train"
import json, sys
rows = [json.loads(l)["loss"] for l in open(sys.argv[1]) if l.startswith('{"step"')]
print(f"powersgd:2: {len(rows)} steps, training loss {rows[0]:.4f} -> {rows[-1]:.4f}")
sys.exit(0 if len(rows) == 30 and rows[-1] < 0.7 * rows[0] else 1)
PY
        cmp "$d/ps$s.0" "$d/ps$s.1" || fail "--compress powersgd:2 --grad-sync $s: the replicas differ"
    done
    same psfused pslayer
    same psfused psengine
    echo "--compress powersgd:2: both replicas hold the same parameters, to the bit, fused = layer = engine"
    # every weight matrix its own rank-2 factors, the 1-D tensors dense
    grep -q "gradient compression powersgd:2 (--grad-sync fused): a rank sends 5.68% of the dense gradient bytes" \
        "$d/psfused.log" || { cat "$d/psfused.log"; fail "no compression line"; }
    for s in fused engine; do
        ps="--no-eval --sample 0 --compress powersgd:2 --grad-sync $s --checkpoint-dir $d/psck$s --checkpoint-every 4"
        run psstraight$s $small --max-steps 8 --no-eval --sample 0 --compress powersgd:2 --grad-sync $s \
            --dump-params "$d/psstraight$s"
        run pshalf$s $small --max-steps 4 $ps
        cp -r "$d/psck$s" "$d/psck2$s"
        run psrest$s $small --max-steps 8 $ps --resume --dump-params "$d/psrest$s"
        same psstraight$s psrest$s
        echo "--compress powersgd:2 --grad-sync $s: 8 steps straight = 4 steps + --resume 4 steps, to the bit, on both ranks"
    done
    same psstraightfused psstraightengine
    rm "$d"/psck2fused/compress-rank1-*
    out=$(chorus-run -np 2 chorus-train $small --max-steps 8 --no-eval --sample 0 --compress powersgd:2 \
        --checkpoint-dir "$d/psck2fused" --resume 2>&1) && fail "a resume without rank 1's PowerSGD state was not refused"
    echo "$out" | grep -qF "cannot resume: rank 1's compressor state of step 4: no valid checkpoint" ||
        { echo "$out"; fail "the resume without rank 1's PowerSGD state"; }
    echo "refused: a resume without rank 1's PowerSGD state"
    ;;
pipe)
    chorus-run -np 1 chorus-train $small --layers 3 --max-steps 4 --accum 4 --sample 40 \
        --metrics "$d/one.jsonl" --dump-params "$d/one" > "$d/one.log" 2>&1 || { cat "$d/one.log"; fail "one rank"; }
    for s in gpipe 1f1b; do
        run $s $small --layers 3 --max-steps 4 --pipeline-stages 2 --microbatches 4 --schedule $s \
            --sample 40 --metrics "$d/$s.jsonl" --dump-params "$d/$s"
        cmp "$d/$s.0" "$d/$s.1" || fail "--schedule $s: the stages gathered different parameters"
    done
    same gpipe 1f1b
    echo "--pipeline-stages 2, --schedule gpipe and 1f1b: the same parameters, to the bit"
    cat "$d/1f1b.log"
    grep -q "pipeline: 2 stages x 1 replica (2 ranks), 4 micro-batches of up to 4 windows per step, schedule 1f1b; the GPT's 3 blocks cut 0-0 on stage 0" "$d/1f1b.log" || fail "no pipeline line"
    grep -q "bubble rank 1 (stage 1, layers 1-2)" "$d/1f1b.log" || fail "no bubble line"
    grep -q "validation after step 4: loss" "$d/1f1b.log" || fail "no validation line"
    grep -q "sample (40 bytes" "$d/1f1b.log" || fail "no sample"
    # the clipping norm is the whole model's: every stage's squares, the tied embedding once
    norm=$(sed -n 's/.*last gradient norm \([0-9.]*\) before clipping.*/\1/p' "$d/one.log")
    grep -q "last gradient norm $norm before clipping to 1" "$d/1f1b.log" || fail "the gradient norm is not one rank's ($norm)"
    echo "the last step's gradient norm before clipping is one rank's: $norm"
    chorus-run -np 3 chorus-train $small --layers 3 --max-steps 4 --pipeline-stages 3 --no-eval --sample 0 \
        --metrics "$d/three.jsonl" --dump-params "$d/three" > "$d/three.log" 2>&1 || { cat "$d/three.log"; fail "3 stages"; }
    chorus-run -np 2 chorus-train $small --max-steps 4 --accum 4 --no-eval --sample 0 \
        --metrics "$d/two.jsonl" --dump-params "$d/two" > "$d/two.log" 2>&1 || { cat "$d/two.log"; fail "two ranks"; }
    chorus-run -np 4 chorus-train $small --max-steps 4 --pipeline-stages 2 --no-eval --sample 0 \
        --metrics "$d/grid.jsonl" --dump-params "$d/grid" > "$d/grid.log" 2>&1 || { cat "$d/grid.log"; fail "2x2 grid"; }
    for r in 1 2 3; do
        cmp "$d/grid.0" "$d/grid.$r" || fail "2x2 grid: rank $r gathered other parameters than rank 0"
    done
    echo "2 replicas x 2 stages: both replicas' stages hold the same parameters, to the bit"
    /usr/bin/python3 - "$d" <<'PY' || fail "the pipelined GPT leaves the unsplit one"
import json, sys
import numpy as np
d = sys.argv[1]
loss = lambda n: [json.loads(l)["loss"] for l in open(f"{d}/{n}.jsonl") if l.startswith('{"step"')]
for ref, run in (("one", "gpipe"), ("one", "1f1b"), ("one", "three"), ("two", "grid")):
    a, b = loss(ref), loss(run)
    rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    pa, pb = np.fromfile(f"{d}/{ref}.0", np.float32), np.fromfile(f"{d}/{run}.0", np.float32)
    err = float(np.abs(pa - pb).max())
    print(f"{run} against {ref}: {len(b)} steps, losses within {rel:.2e} relative, "
          f"parameters within {err:.2e} ({np.mean(pa == pb):.1%} equal to the bit)")
    assert len(a) == len(b) == 4 and rel <= 1e-5 and pa.size == pb.size and err <= 1e-5
PY
    ;;
pipe_resume)
    p2="$small --pipeline-stages 2 --no-eval --sample 0"
    run straight $p2 --max-steps 8 --dump-params "$d/straight"
    run half $p2 --max-steps 4 --checkpoint-dir "$d/ck" --checkpoint-every 4
    cp -r "$d/ck" "$d/ck1"
    run rest $p2 --max-steps 8 --checkpoint-dir "$d/ck" --checkpoint-every 4 --resume --dump-params "$d/rest"
    same straight rest
    grep -q "resumed from .*step 4" "$d/rest.log" || fail "no resume line"
    echo "--pipeline-stages 2: 8 steps straight = 4 steps + --resume 4 steps, to the bit"
    # the checkpoint is the whole model's: one rank with --accum 4 goes on from it
    chorus-run -np 1 chorus-train $small --no-eval --sample 0 --accum 4 --max-steps 8 --checkpoint-dir "$d/ck1" \
        --resume --dump-params "$d/one" > "$d/one.log" 2>&1 || { cat "$d/one.log"; fail "one rank from the pipeline's checkpoint"; }
    /usr/bin/python3 - "$d" <<'PY' || fail "one rank resumed from the pipeline's checkpoint leaves the pipeline"
import sys
import numpy as np
a, b = (np.fromfile(f"{sys.argv[1]}/{n}.0", np.float32) for n in ("straight", "one"))
err = float(np.abs(a - b).max())
print(f"one rank with --accum 4 resumed from the pipeline's step 4: parameters within {err:.2e} of the pipeline's at step 8")
sys.exit(0 if a.size == b.size and err <= 1e-5 else 1)
PY
    refused "--pipeline-stages with --tensor-parallel: a stage's blocks are not split over tensor-parallel ranks yet" --pipeline-stages 2 --tensor-parallel 2
    refused "--pipeline-stages with --zero: a stage's optimizer state is not sharded over its replicas yet" --pipeline-stages 2 --zero 1
    run keep $p2 --layers 4 --max-steps 4 --dump-params "$d/keep"
    run again $p2 --layers 4 --max-steps 4 --recompute --dump-params "$d/again"
    same keep again
    /usr/bin/python3 - "$d" <<'PY' || fail "--recompute does not hold fewer activation bytes on each stage"
import re, sys
act = {n: [float(a) for a in re.findall(r"memory rank \d: .*activations ([0-9.]+) MiB", open(f"{sys.argv[1]}/{n}.log", encoding="latin-1").read())]
       for n in ("keep", "again")}
print("each stage's activations (MiB), without and with --recompute:", act)
assert len(act["keep"]) == len(act["again"]) == 2 and all(a < k for k, a in zip(act["keep"], act["again"]))
PY
    echo "--pipeline-stages 2 --recompute: the same parameters, to the bit, fewer activation bytes on each stage"
    refused "--recompute=K keeps every K-th layer of a stack; the GPT recomputes every block" --pipeline-stages 2 --recompute=2
    refused "--pipeline-stages 3: the GPT has 2 blocks, and a stage takes at least one" --pipeline-stages 3
    refused "--pipeline-stages cuts each step into --microbatches; drop --accum" --pipeline-stages 2 --accum 2
    refused "--pipeline-stages 2 does not divide the 1 ranks" --pipeline-stages 2
    ;;
pipe_kill)
    . tests/scripts/ranks.sh
    chorus-run -np 3 chorus-train $small --layers 3 --pipeline-stages 3 --epochs 50 --no-eval \
        --sample 0 --log-every 1 > "$d/k.log" 2>&1 &
    run=$!
    wait_line "$d/k.log" "step [5-9]/" || { cat "$d/k.log"; fail "the run never got to step 5"; }
    victim=$(rank_pid $run 1)
    [ -n "$victim" ] || fail "no rank 1 under chorus-run $run"
    kill -9 "$victim"
    wait $run
    rc=$?
    run=""
    grep -v "step [0-9]*/" "$d/k.log" | tail -5
    [ $rc != 0 ] || fail "the pipeline went on without its middle stage"
    for r in 0 2; do
        grep -q "chorus-train\[$r\]: .*rank 1[ )]" "$d/k.log" || fail "rank $r did not name the dead stage"
    done
    echo "the middle stage was killed: both neighbours stopped naming it"
    ;;
refused)
    why="--model gpt trains data parallel, with --tensor-parallel, --zero, --recompute, --compress, --pipeline-stages and the parameter server (--mode ps-*) only for now"
    refused "--d-model 64 is not a multiple of --heads 5" --heads 5
    refused "--vocab 100 is too small for the byte tokens" --vocab 100
    refused "unknown GPT preset 'huge' (the presets: tiny, gpt2-124m)" --preset huge
    refused "the text is too short for --context 8192: 76912 training and 4005 held-out bytes" --context 8192
    out=$(chorus-train --model mlp --layers 3 2>&1) && fail "--layers with --model mlp was not refused"
    echo "$out" | grep -qF -- "--layers is for --model gpt, not --model mlp" || { echo "$out"; fail "--layers with mlp"; }
    out=$(chorus-train $small --data "$d/none" 2>&1) && fail "a missing text directory was not refused"
    echo "$out" | grep -qF "sudo apt-get install fortunes" || { echo "$out"; fail "no install hint"; }
    echo "GPT options with --model mlp and a missing text directory are refused with their reasons"
    ;;
*) fail "unknown case $1" ;;
esac
echo "gpt_train $1: ok"
