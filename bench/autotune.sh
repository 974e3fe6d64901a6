#!/bin/sh
# CHORUS_AUTOTUNE=1 against the defaults on the engine's step benchmark (bench/engine_step.c:
# ResNet-50's 161 gradients, 102 MB, np=2). The tuned run warms up for long enough that both of
# the benchmark's engines (one started with fusion on, one with fusion off) finish tuning
# before anything is timed; each engine tunes on its own, so in that run the two "engine" lines
# are two tuned engines that started from different fusion thresholds. Prints the load first:
# the numbers mean little on a busy machine.
#   make autotune-bench      (or: BUILD=build sh bench/autotune.sh [--steps N])
#   STEPS_PER_TRIAL=2 (CHORUS_AUTOTUNE_STEPS)   ROUNDS=2 (runs of each, interleaved)
set -e
BUILD=${BUILD:-build}
export PATH="$PWD/$BUILD/bin:$PATH"
per=${STEPS_PER_TRIAL:-2}
rounds=${ROUNDS:-2}
# warm-up: 2 steps, then at most 3 + 5 + 5 candidates of 1 + $per steps each, and a margin
warm=$((2 + 13 * (1 + per) + 5))
echo "load: $(cat /proc/loadavg)"
r=1
while [ $r -le "$rounds" ]; do
    echo "round $r, defaults:"
    chorus-run -np 2 "$BUILD/bin/engine_step" --warmup "$warm" "$@" | sed 's/^\[0\] //'
    echo "round $r, CHORUS_AUTOTUNE=1 CHORUS_AUTOTUNE_STEPS=$per:"
    CHORUS_AUTOTUNE=1 CHORUS_AUTOTUNE_STEPS=$per chorus-run -np 2 "$BUILD/bin/engine_step" \
        --warmup "$warm" "$@" 2>&1 |
        sed -e 's/^\[0\] //' -e 's/^CHORUS rank 0: /  /' \
            -e 's/engine, fusion on (64 MiB)      /engine tuned, from fusion on   /' \
            -e 's/engine, fusion off              /engine tuned, from fusion off  /'
    r=$((r + 1))
done
echo "load: $(cat /proc/loadavg)"
