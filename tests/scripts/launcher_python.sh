#!/bin/sh
# launcher_python.sh - `chorus-run -np 2 train.py` runs the script with Python, as torchrun
# does: with python3 beside chorus-run when there is one (an environment pip installed into:
# a copy of chorus-run and a python3 link in one bin/, off PATH), else with python3 from PATH
# (a python3 link put first on PATH); its arguments follow it. --no-python runs a *.py
# program as it is; a script that is not there is said before anything starts.
set -u
BUILD=${BUILD:-build}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAILED: $*"; exit 1; }
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
cat > "$d/show.py" << 'EOF2'
import os, sys
print("rank %s of %s: %s %s" % (os.environ["RANK"], os.environ["WORLD_SIZE"], sys.executable,
                                " ".join(sys.argv[1:])))
EOF2

# An environment: chorus-run and python3 side by side, neither on PATH.
mkdir -p "$d/env/bin" "$d/path"
cp "$BUILD/bin/chorus-run" "$d/env/bin/"
ln -s /usr/bin/python3 "$d/env/bin/python3"
out=$(cd "$d" && "$d/env/bin/chorus-run" -np 2 show.py a "b c" 2>&1) || { echo "$out"; fail "env: exit $?"; }
echo "$out"
for r in 0 1; do
    echo "$out" | grep -qxF "[$r] rank $r of 2: $d/env/bin/python3 a b c" ||
        fail "rank $r did not run show.py with the environment's python3"
done

# No python3 beside chorus-run: python3 from PATH.
ln -s /usr/bin/python3 "$d/path/python3"
run=$(cd "$BUILD/bin" && pwd)/chorus-run
out=$(cd "$d" && PATH="$d/path:$PATH" "$run" -np 2 ./show.py x 2>&1) ||
    { echo "$out"; fail "PATH: exit $?"; }
echo "$out"
echo "$out" | grep -qxF "[1] rank 1 of 2: $d/path/python3 x" || fail "rank 1 did not run ./show.py with PATH's python3"

# --no-python: the program as it is (here an executable shell script named *.py).
printf '#!/bin/sh\necho "as it is: $RANK"\n' > "$d/run.py"
chmod +x "$d/run.py"
out=$("$BUILD/bin/chorus-run" -np 1 --no-python "$d/run.py" 2>&1) || { echo "$out"; fail "--no-python: exit $?"; }
echo "$out"
[ "$out" = "[0] as it is: 0" ] || fail "--no-python did not run the program as it is"

# A script that is not there: one line, exit 127, nothing started.
out=$("$BUILD/bin/chorus-run" -np 2 "$d/nope.py" 2>&1)
rc=$?
echo "$out"
[ $rc = 127 ] || fail "missing script: exit $rc, expected 127"
[ "$out" = "chorus-run: cannot run '$d/nope.py': No such file or directory" ] || fail "missing script: message"
echo "launcher_python: OK"
