#!/bin/sh
# libchorus_nn uses only the public API of libchorus: its objects reference no internal
# chorus__* symbol, and chorus-train linked against libchorus_nn.so and libchorus.so (which
# exports chorus_* only) trains on two ranks, checkpoints and resumes.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

internal=$(nm -u "$BUILD"/obj/nn/*.o | grep ' chorus__' | sort -u)
[ -z "$internal" ] || fail "libchorus_nn references internal symbols of libchorus: $internal"
nm -u "$BUILD"/obj/nn/*.o | grep -q ' chorus_checkpoint_save' || fail "nn does not save through chorus_checkpoint_save"

bin=$BUILD/tests/nn/chorus-train-shared
deps=$(ldd "$bin") || fail "ldd $bin"
echo "$deps"
for lib in libchorus_nn.so.0 libchorus.so.0; do
    got=$(echo "$deps" | sed -n "s/.*$lib => \([^ ]*\) .*/\1/p")
    [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "$BUILD/lib/$lib")" ] ||
        fail "$bin does not load $lib from $BUILD/lib (it loads '$got')"
done

opts="--model mlp --batch 1000 --epochs 1 --seed 4 --no-eval --log-every 1000 --checkpoint-dir $tmp/ck"
chorus-run -np 2 "$bin" $opts --max-steps 3 > "$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "training through the shared libraries"; }
cat "$tmp/a.log"
grep -q "done: 3 steps" "$tmp/a.log" || fail "first run did not finish 3 steps"
[ -f "$tmp/ck/train.00000000000000000003.ckpt" ] || fail "no checkpoint of step 3"
chorus-run -np 2 "$bin" $opts --max-steps 5 --resume > "$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; fail "resuming through the shared libraries"; }
cat "$tmp/b.log"
grep -q "resumed from $tmp/ck/train.00000000000000000003.ckpt: epoch 1, step 3" "$tmp/b.log" || fail "did not resume from step 3"
grep -q "done: 5 steps" "$tmp/b.log" || fail "resumed run did not reach step 5"
echo "ok: nn uses public symbols only; chorus-train runs on the shared libraries"
