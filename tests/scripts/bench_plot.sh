#!/bin/sh
# bench_plot.sh - chorus-bench --plot on 2 ranks: a PNG (its signature checked) with one line
# per algorithm given to --algo; an unwritable path and a missing gnuplot are refused with a
# message before anything is measured. Without gnuplot (and when make plot-deps cannot install
# it) the drawing case says SKIP and why; the refusals are checked anyway.
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}
# an unwritable path
out=$(chorus-run -np 2 chorus-bench -b 1K -e 4K --plot "$d/no-such-dir/busbw.png" 2>&1)
rc=$?
echo "$out"
if command -v gnuplot > /dev/null 2>&1; then
    [ $rc = 2 ] || fail "exit $rc for an unwritable --plot path, want 2"
    echo "$out" | grep -q "chorus-bench: --plot $d/no-such-dir/busbw.png: cannot write it: No such file or directory" ||
        fail "no message naming the unwritable path"
fi
# no gnuplot in PATH (only Chorus's tools)
out=$(PATH="$(cd "$BUILD/bin" && pwd)" chorus-run -np 2 chorus-bench -b 1K -e 4K --plot "$d/x.png" 2>&1)
rc=$?
echo "$out"
[ $rc = 2 ] || fail "exit $rc without gnuplot, want 2"
echo "$out" | grep -q "gnuplot, which is not installed.*sudo apt-get install -y gnuplot-nox" ||
    fail "no message naming gnuplot and how to install it"
[ ! -e "$d/x.png" ] || fail "a file was written without gnuplot"
# drawing
if ! command -v gnuplot > /dev/null 2>&1; then
    make --no-print-directory plot-deps > "$d/deps.log" 2>&1
    command -v gnuplot > /dev/null 2>&1 || {
        echo "SKIP: drawing: gnuplot is not installed and make plot-deps could not install it:"
        cat "$d/deps.log"
        exit 0
    }
fi
chorus-run -np 2 chorus-bench -b 1K -e 64K -f 8 -n 3 -w 1 --algo auto,direct_ring \
    --plot "$d/busbw.png" > "$d/log" 2>&1 || { cat "$d/log"; fail "chorus-bench --plot failed"; }
cat "$d/log"
grep -q "# plot: $d/busbw.png (2 lines)" "$d/log" || fail "no plot line"
grep -q "# CHORUS_ALGO_ALLREDUCE=direct_ring" "$d/log" || fail "no section per algorithm"
[ -s "$d/busbw.png" ] || fail "empty PNG"
sig=$(head -c 8 "$d/busbw.png" | od -An -tx1 | tr -d ' \n')
[ "$sig" = 89504e470d0a1a0a ] || fail "not a PNG (signature $sig)"
echo "PNG of $(wc -c < "$d/busbw.png") bytes"
# a bad --algo name
out=$(chorus-run -np 2 chorus-bench --algo auto,warp --plot "$d/y.png" 2>&1)
rc=$?
echo "$out"
[ $rc = 2 ] || fail "exit $rc for --algo warp, want 2"
echo "$out" | grep -q "chorus-bench: --algo: CHORUS_ALGO_ALLREDUCE=warp is not an algorithm of allreduce; valid:" ||
    fail "no message for --algo warp"
