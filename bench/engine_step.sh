#!/bin/sh
# The engine's step benchmark (bench/engine_step.c) at np=2, run twice; prints the load first
# because the numbers mean little on a busy machine.
#   make engine-bench        (or: BUILD=build sh bench/engine_step.sh [--steps N])
set -e
BUILD=${BUILD:-build}
export PATH="$PWD/$BUILD/bin:$PATH"
echo "load: $(uptime)"
for run in 1 2; do
    echo "run $run:"
    chorus-run -np 2 "$BUILD/bin/engine_step" "$@" | sed 's/^\[0\] //'
done
