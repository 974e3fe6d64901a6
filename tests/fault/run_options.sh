#!/bin/sh
# run_options.sh - chorus-run's elastic options and their error messages.
set -u
fail() { echo "FAILED: $*"; exit 1; }
check() { # check EXPECTED_STATUS MESSAGE args...
    want=$1; msg=$2; shift 2
    out=$(chorus-run "$@" 2>&1); rc=$?
    echo "$out" | head -3
    [ $rc = "$want" ] || fail "chorus-run $*: exit $rc, expected $want"
    echo "$out" | grep -qF -- "$msg" || fail "chorus-run $*: no '$msg'"
}
check 2 "--min-np, --max-np and --host-discovery-script need --elastic" -np 2 --min-np 2 true
check 2 "--elastic needs --min-np (3) <= -np (2) <= --max-np (2)" --elastic -np 2 --min-np 3 true
check 2 "--elastic needs --min-np (1) <= -np (4) <= --max-np (2)" --elastic -np 4 --max-np 2 true
check 2 "--max-np needs a number from 1 to 4096, not 'x'" --elastic -np 2 --max-np x true
check 2 "chorus-run: not enough slots: -np 5 needs 5, but the hosts have 4 (a:2,b:2)" -H a:2,b:2 -np 5 true
check 2 "chorus-run: -H a:x: 'a:x': the slots after ':' must be a number from 0 to 4096" -H a:x true
check 2 "chorus-run: --elastic takes its hosts from --host-discovery-script, not -H or --hostfile" --elastic -H a:2 -np 2 true
check 1 "chorus-run: --rsh ' ' names no command" -H 192.0.2.1:1 --rsh ' ' true
check 2 "chorus-run: --hostfile: /nonexistent/hosts: No such file or directory" --hostfile /nonexistent/hosts true
check 2 "the host discovery script gives no slots; pass -np N" --elastic --host-discovery-script "echo somehost:0" true
check 0 "" --elastic -np 2 --max-np 3 true
chorus-run --help | grep -q -- "--host-discovery-script PATH" || fail "--help does not list the elastic options"
# workers that keep failing: replaced --max-restarts times, then the job stops
check 3 "chorus-run: elastic: no worker is left; stopping" --elastic -np 2 --max-restarts 2 sh -c 'exit 3'
echo "ok: chorus-run's elastic options"
