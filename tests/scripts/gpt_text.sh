# shellcheck shell=sh
# gpt_text.sh - what the GPT's test scripts share, sourced with $d set to the script's scratch
# directory: fail MESSAGE; a few of Debian's fortune databases copied into $d/text (small, so
# that a step and an evaluation take a moment); run NAME ARGS...: chorus-train on 2 ranks,
# its output in $d/NAME.log, failing the test (with the output) when it fails.
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$d/text"
for f in fortunes goedel kids love; do
    cp /usr/share/games/fortunes/$f "$d/text/" || fail "the fortune databases are not installed (sudo apt-get install fortunes)"
done
run() {
    log=$d/$1.log
    shift
    chorus-run -np 2 chorus-train "$@" > "$log" 2>&1 || { cat "$log"; fail "$(basename "$log" .log)"; }
}
