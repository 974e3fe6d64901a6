#!/bin/sh
# PyTorch DDP (gloo) vs chorus.torch.DistributedOptimizer on the same MLP, side by side.
# Usage: bench/ddp_vs_chorus.sh [extra args for bench/ddp_vs_chorus.py, e.g. --np 2 --repeat 3]
# Needs the library built (make). The numbers mean something only on a quiet machine: the
# script prints the load average before and after; rerun when it is above ~1.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
export CHORUS_LIB="${CHORUS_LIB:-$ROOT/$BUILD/lib/libchorus.so}"
[ -f "$CHORUS_LIB" ] || { echo "ddp_vs_chorus: $CHORUS_LIB not found; run make first" >&2; exit 1; }
echo "# $(uptime)"
echo "# $(nproc) cores, torch $($PYTHON -c 'import torch; print(torch.__version__)'), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
exec "$PYTHON" "$ROOT/bench/ddp_vs_chorus.py" "$@"
