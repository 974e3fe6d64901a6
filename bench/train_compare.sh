#!/bin/sh
# chorus-train against PyTorch DDP (gloo) on the same MLP, global batch and rank count, one
# BLAS/intra-op thread per rank, in one run (the machine is shared and noisy: compare the
# two lines of one run, not numbers from different runs).
#   sh bench/train_compare.sh [ranks] [global-batch]
set -e
NP=${1:-2}
BATCH=${2:-256}
BUILD=${BUILD:-build}
echo "== chorus-train mlp: $NP ranks, global batch $BATCH, 1 thread each, 1 epoch"
"$BUILD/bin/chorus-run" -np "$NP" "$BUILD/bin/chorus-train" --model mlp --batch "$BATCH" \
    --epochs 1 --threads 1 --log-every 100000 | grep -E 'done|epoch 1/1:'
echo "== PyTorch DDP (gloo) mlp: $NP ranks, global batch $BATCH, 1 thread each"
/usr/bin/python3 "$(dirname "$0")/train_ddp_torch.py" --np "$NP" --batch "$BATCH" --steps 200
