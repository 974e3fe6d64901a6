#!/bin/sh
# multihost.sh CASE - chorus-run across the hosts of a namespace cluster (tests/net/cluster.sh),
# started through `ip netns exec` as the remote shell (--rsh). The launcher runs inside host
# 1, which it recognises as this machine (its address is one of the namespace's), so host 1's
# ranks start directly and the other hosts' through an agent each. Cases:
#   basic     2 hosts x 2 ranks of tests/mp/coll_select: correct over TCP between hosts and
#             shared memory within each, every line prefixed with its rank; placement by slot
#             and the torchrun variables of each rank; too few slots is an error; the default
#             remote shell is ssh with -p and -i (an ssh of the test's first in PATH); a
#             remote shell that fails is named with what to check
#   hostfile  --hostfile with "host slots=N", "host:N", "host" lines and comments; a bad line
#   secret    the job secret reaches every remote rank, and no command line on any host
#             holds it while the job runs
#   fail      a rank of host 2 fails: every rank on every host is stopped, the launcher names
#             the rank and its host; SIGTERM to the launcher reaches the ranks of every host;
#             the launcher killed with SIGKILL leaves no rank on any host
#   linkcut   host 3's link is cut during allreduces: every other rank fails within the
#             timeout naming a rank of host 3 and its address; the launcher names the host
#   hostkill  every process of host 2 is killed: the others fail, each naming a rank of host 2
#             (also the rank of host 1 that learns of it from its own host's other rank), and
#             the launcher names host 2
#   lostpair  host 2 of two takes its link down: the ranks of each host lose those of the
#             other; the launcher says the two lost each other, that it still reaches host 1
#             (it runs there) but not host 2, and names a rank of host 2 first
#   pslost    the same under chorus-train --mode ps-async (the server and worker 0 on host 1):
#             host 2's workers are lost, the job finishes with worker 0 and exits 0, naming
#             them and saying that the launcher cannot reach host 2
#   stop      a rank of host 2 is stopped (SIGSTOP): the launcher names it as stopped
#   elastic   --elastic with a discovery script naming host 1 and host 2: workers start on
#             both, a third joins on host 2 when it gets a second slot and is retired when
#             it loses it (the workers wait for both at step 50); the finishers' parameters
#             equal the serial reference
#   iface     CHORUS_IFACE (--network-interface) on hosts with a second link: the store and
#             every rank listen on that link's addresses; a launcher on none of the hosts
#             (host 3) serves the store on its CHORUS_IFACE address
# After every case nothing of the job is left on any host (ip netns pids). Needs root and
# `ip netns`; prints SKIP with the reason otherwise.
BUILD=${BUILD:-build}
case=${1:?usage: multihost.sh basic|hostfile|secret|fail|linkcut|hostkill|lostpair|pslost|stop|elastic|iface}
run=$PWD/$BUILD/bin/chorus-run
coll=$PWD/$BUILD/tests/mp/coll_select
bench=$PWD/$BUILD/bin/chorus-bench
for p in "$run" "$coll" "$bench"; do [ -x "$p" ] || { echo "multihost: $p is not built"; exit 1; }; done
. tests/net/cluster.sh

fail() {
    echo "multihost $case: $*"
    [ -f "$logs/out" ] && sed 's/^/  out| /' "$logs/out"
    exit 1
}
expect() { grep -q -- "$1" "$logs/out" || fail "expected: $1"; }
# wait_for PATTERN COUNT: until COUNT lines of the output match (at most 20 s)
wait_for() {
    i=0
    while [ "$(cat "$logs/out" 2> /dev/null | grep -c -- "$1")" -lt "$2" ] && [ $i -lt 200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt 200 ] || fail "timed out waiting for $2 lines like '$1'"
}

# Variables of an enclosing launcher (the test runner may run under one) are not this job's.
unset CHORUS_RANK CHORUS_SIZE CHORUS_STORE_ADDR CHORUS_LOCAL_RANK CHORUS_LOCAL_SIZE \
    CHORUS_JOB_ID CHORUS_SECRET CHORUS_IFACE CHORUS_STATUS_FD RANK WORLD_SIZE MASTER_ADDR \
    MASTER_PORT LOCAL_RANK

# launch HOST1-ARGS...: chorus-run in host 1, output in $logs/out, exit status in $rc.
launch() {
    ip netns exec "$h1" "$run" --rsh "ip netns exec" "$@" > "$logs/out" 2>&1
    rc=$?
}

# launch_bg ARGS...: the same in the background, its pid in $pid.
launch_bg() {
    ip netns exec "$h1" "$run" --rsh "ip netns exec" "$@" > "$logs/out" 2>&1 &
    pid=$!
    pids="$pids $pid"
}

# Nothing of the job may be left on any host.
no_leftovers() {
    for h in $cluster_hosts; do
        left=$(ip netns pids "$h")
        [ -z "$left" ] || fail "processes left on $h: $(for p in $left; do tr '\0' ' ' < /proc/$p/cmdline; echo; done)"
    done
}

n=2
[ "$case" = linkcut ] || [ "$case" = iface ] && n=3
cluster_up "mh$case" "$n"
h1=$(cluster_host 1) h2=$(cluster_host 2)
[ "$n" = 3 ] && h3=$(cluster_host 3)

case $case in
basic)
    launch -H "$h1:2,$h2:2" -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT,SHM "$coll"
    [ $rc = 0 ] || fail "exit $rc"
    for r in 0 1 2 3; do
        expect "^\[$r\] rank $r: world of 4 ranks on 2 hosts (TCP); host-local communicator of 2 ranks (shared memory)"
        expect "^\[$r\] .*rank $r: local rank $((r % 2)) of 2, 2 hosts, listening on $(cluster_addr $((r / 2 + 1))):"
    done
    expect "^\[0\] coll_select: OK on 4 ranks"
    no_leftovers
    # by slot: host 1's one slot, then host 2's three; ip netns exec shows each host's name
    launch -H "$h1:1,$h2:3" -np 4 sh -c 'echo "at $(cat /etc/hostname) rank $RANK local $LOCAL_RANK/$LOCAL_WORLD_SIZE node $GROUP_RANK/$GROUP_WORLD_SIZE master $MASTER_ADDR"'
    [ $rc = 0 ] || fail "exit $rc"
    expect "^\[0\] at $h1 rank 0 local 0/1 node 0/2 master $h1$"
    for r in 1 2 3; do expect "^\[$r\] at $h2 rank $r local $((r - 1))/3 node 1/2 master $h1$"; done
    # -np defaults to the slots, as under mpirun
    launch -H "$h1,$h2" sh -c 'echo "size $WORLD_SIZE"'
    [ $rc = 0 ] && [ "$(grep -c 'size 2' "$logs/out")" = 2 ] || fail "-H a,b did not start 2 ranks"
    launch -H "$h1:1,$h2:2" -np 4 true
    [ $rc = 2 ] || fail "too few slots: exit $rc, not 2"
    expect "chorus-run: not enough slots: -np 4 needs 4, but the hosts have 3 ($h1:1,$h2:2)"
    # the default remote shell is ssh, with horovodrun's -p and --ssh-identity-file: an ssh
    # first in PATH logs its arguments and goes on as `ip netns exec HOST command...`
    mkdir "$logs/bin"
    printf '#!/bin/sh\necho "$*" >> %s/ssh.log\nwhile [ $# -gt 0 ]; do case $1 in -o|-p|-i) shift 2 ;; *) break ;; esac; done\nh=$1\nshift\nexec ip netns exec "$h" "$@"\n' "$logs" > "$logs/bin/ssh"
    chmod +x "$logs/bin/ssh"
    : > "$logs/id" # the key file must exist (chorus-run checks it before anything starts)
    PATH="$logs/bin:$PATH" ip netns exec "$h1" "$run" -H "$h1:1,$h2:1" -p 2222 --ssh-identity-file "$logs/id" sh -c 'echo "at $(cat /etc/hostname)"' > "$logs/out" 2>&1
    rc=$?
    [ $rc = 0 ] || fail "through ssh: exit $rc"
    expect "^\[1\] at $h2$"
    grep -qx -- "-o BatchMode=yes -p 2222 -i $logs/id $h2 $run --agent 1" "$logs/ssh.log" ||
        fail "ssh was run as: $(cat "$logs/ssh.log")"
    # a remote shell that cannot reach the host: the job fails at once and says what to check
    launch --rsh false --grace 1 -H "$h1:1,$h2:1" sh -c 'sleep 30'
    [ $rc = 1 ] || fail "--rsh false: exit $rc, not 1"
    expect "^chorus-run: rank 1 (pid [0-9]* on host $h2) exited with status 1; it failed first"
    expect "^chorus-run: the remote shell never started rank 1 on host $h2 (check that 'false $h2 true' works from here)"
    no_leftovers
    ;;
hostfile)
    f=$logs/hosts
    printf '# two hosts\n%s slots=1   # the launcher'"'"'s\n\n%s:2\n%s\n' "$h1" "$h2" "$h2" > "$f"
    launch --hostfile "$f" sh -c 'echo "at $(cat /etc/hostname) rank $RANK of $WORLD_SIZE"'
    [ $rc = 0 ] || fail "exit $rc"
    expect "^\[0\] at $h1 rank 0 of 4$"
    for r in 1 2 3; do expect "^\[$r\] at $h2 rank $r of 4$"; done
    printf '%s slots=1\n%s cpus=2\n' "$h1" "$h2" > "$f"
    launch --hostfile "$f" true
    [ $rc = 2 ] || fail "bad host file: exit $rc, not 2"
    expect "chorus-run: --hostfile: $f:2: 'cpus=2' is not 'slots=N' (lines are 'host slots=N')"
    no_leftovers
    ;;
secret)
    # Each rank writes the secret it got into a file (not on any command line: the shell
    # expands the variable), then waits for the test to look at every process of every host.
    launch_bg -H "$h1:2,$h2:2" sh -c 'printf %s "$CHORUS_SECRET" > '"$logs"'/secret.$RANK; while [ ! -e '"$logs"'/done ]; do sleep 0.1; done'
    i=0
    while [ "$(ls "$logs"/secret.* 2> /dev/null | wc -l)" -lt 4 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 0.2
    secret=$(cat "$logs/secret.0")
    [ ${#secret} -ge 32 ] || fail "rank 0 got no secret"
    for r in 1 2 3; do [ "$(cat "$logs/secret.$r")" = "$secret" ] || fail "rank $r got another secret"; done
    agents=0
    for h in $cluster_hosts; do
        for p in $(ip netns pids "$h"); do
            cmd=$(tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null)
            case "$cmd" in *"--agent"*) agents=$((agents + 1)) ;; esac
            case "$cmd" in *"$secret"*) fail "the secret is on the command line of pid $p on $h: $cmd" ;; esac
        done
    done
    # (the pattern comes from a file: grep's own command line must not hold it either)
    ps -eo args > "$logs/ps"
    grep -qF -f "$logs/secret.0" "$logs/ps" && fail "ps shows the secret"
    [ $agents = 2 ] || fail "expected an agent for each of host 2's ranks, found $agents"
    touch "$logs/done"
    wait $pid || fail "the job failed"
    no_leftovers
    echo "multihost secret: OK (no command line on $n hosts holds the secret; $agents agents)"
    exit 0
    ;;
fail)
    prog='trap "echo got TERM; exit 143" TERM; if [ $RANK = 3 ]; then sleep 1; echo "rank three gives up" >&2; exit 3; fi; sleep 30 & wait'
    t0=$(date +%s)
    launch -H "$h1:2,$h2:2" --grace 1 sh -c "$prog"
    [ $rc = 3 ] || fail "exit $rc, not the failed rank's 3"
    [ $(($(date +%s) - t0)) -lt 20 ] || fail "the job was not stopped at once"
    expect "^chorus-run: rank 3 (pid [0-9]* on host $h2) exited with status 3; it failed first"
    expect "^chorus-run: | rank three gives up"
    grep -q "^chorus-run: host " "$logs/out" && fail "a rank that failed alone was reported as its host failing"
    for r in 0 1 2; do expect "^\[$r\] got TERM"; done
    no_leftovers
    # SIGTERM to the launcher reaches every host's ranks
    launch_bg -H "$h1:2,$h2:2" sh -c "echo up; $prog"
    wait_for '\] up' 4
    kill -TERM $pid
    wait $pid
    rc=$?
    [ $rc = 130 ] || fail "SIGTERM: exit $rc, not 130"
    for r in 0 1 2; do expect "^\[$r\] got TERM"; done
    expect "chorus-run: interrupted; stopped all ranks"
    no_leftovers
    # the launcher killed with SIGKILL: the ranks of every host end with it
    launch_bg -H "$h1:2,$h2:2" sh -c "echo up; exec sleep 30"
    wait_for '\] up' 4
    kill -KILL $pid
    wait $pid
    i=0
    while [ -n "$(ip netns pids "$h1")$(ip netns pids "$h2")" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    no_leftovers
    ;;
linkcut | hostkill | lostpair | stop)
    # allreduces until the job is broken, a second after every rank has logged its address (the
    # benchmark's own lines are block-buffered on the pipe)
    export CHORUS_TIMEOUT_S=3 CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5
    if [ $case = linkcut ]; then hosts="$h1:1,$h2:1,$h3:2" victim=$h3 vi=3 vr="2, 3"; else hosts="$h1:2,$h2:2" victim=$h2 vi=2 vr="2, 3"; fi
    launch_bg -H "$hosts" -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT "$bench" -b 4K -e 4K \
        -n 10000000 -w 1 -c 0
    wait_for 'rank [0-3]: local rank [0-9] of [0-9], [23] hosts, listening on' 4
    sleep 1
    t0=$(date +%s)
    if [ $case = linkcut ]; then
        cluster_link_down $vi
    elif [ $case = lostpair ]; then
        ip -n "$victim" link set eth0 down
    elif [ $case = hostkill ]; then
        # the whole host at once: frozen first, so that no rank of it sees another die and
        # exits on its own before its own SIGKILL
        victims=$(ip netns pids "$victim")
        kill -STOP $victims
        kill -KILL $victims
    else # rank 3, the child of the agent whose command line ends in "--agent 3"
        for p in $(ip netns pids "$victim"); do
            case "$(tr '\0' ' ' < "/proc/$p/cmdline")" in *"--agent 3 ") agent=$p ;; esac
        done
        stopped=$(ps -o pid= --ppid "$agent" | tr -d ' ')
        kill -STOP "$stopped"
    fi
    wait $pid
    rc=$?
    dt=$(($(date +%s) - t0))
    [ $rc != 0 ] || fail "the job did not fail"
    [ $dt -le 15 ] || fail "the job took ${dt}s to fail (CHORUS_TIMEOUT_S=3)"
    if [ $case = stop ]; then
        expect "^chorus-run: rank 3 (pid $stopped on host $victim) stopped responding (it was stopped, SIGSTOP?)"
        no_leftovers
        grep -h '^chorus-run:' "$logs/out"
        echo "multihost $case: OK"
        exit 0
    fi
    if [ $case = lostpair ]; then
        expect "^chorus-run: hosts $h1 and $h2 lost each other (the ranks of each lost the ranks of the other); the launcher reaches $h1 (it runs there) but not $h2 at $(cluster_addr 2): $h2 or its link is down$"
        grep -m1 '^chorus-run: rank' "$logs/out" | grep -q "^chorus-run: rank [23] (pid [0-9]* on host $h2) .*; it failed first$" ||
            fail "a rank of $h1 was named first"
    fi
    expect "^chorus-run: rank [23] (pid [0-9]* on host $victim)"
    expect "^chorus-run: host $victim failed: all its ranks ($vr) failed or were lost"
    # the ranks of the other hosts name the lost rank's host by its address
    expect "^\[[01]\] .*rank [23] (host [^)]* at $(cluster_addr $vi))"
    # every one of them, also a rank whose own host's rank saw the loss first (hostkill: ranks
    # 0 and 1 share host 1, and meet in shared memory inside the hierarchical allreduce)
    if [ $case != lostpair ]; then
        for r in 0 1; do expect "^\[$r\] .*rank [23] (host [^)]* at $(cluster_addr $vi))"; done
    fi
    no_leftovers
    ;;
pslost)
    export CHORUS_TIMEOUT_S=3 CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5
    launch_bg -H "$h1:2,$h2:2" --servers 1 "$PWD/$BUILD/bin/chorus-train" --mode ps-async \
        --batch 96 --max-steps 2000 --log-every 1
    # until worker 0 (rank 1) is at step 20: data loading takes what the machine's load makes it.
    # Its 1980 steps left outlast the heartbeat timeout by far, so the server has declared
    # host 2's workers lost before worker 0 ends (its closing sum of the workers' counters would
    # otherwise meet them unknown to the server, and abort it)
    while kill -0 $pid 2> /dev/null && ! grep -q '^\[1\] epoch 1/10 step 2[0-9]/' "$logs/out"; do sleep 0.1; done
    ip -n "$h2" link set eth0 down
    wait $pid
    rc=$?
    grep -v 'step [0-9]*/' "$logs/out" > "$logs/summary"
    mv "$logs/summary" "$logs/out"
    [ $rc = 0 ] || fail "exit $rc, not 0: the job goes on without host 2's workers"
    expect "^\[1\] done: 2000 steps"
    for r in 2 3; do
        expect "^chorus-run: rank $r (pid [0-9]* on host $h2) exited with status 1; the job goes on without it"
        expect "^chorus-run: the job finished without rank $r (pid [0-9]* on host $h2), which exited with status 1"
    done
    expect "^chorus-run: every rank of host $h2 was lost; the launcher cannot reach $h2 at $(cluster_addr 2) (the host or its link is down?)$"
    grep -q "stopped responding\|failed first" "$logs/out" && fail "a rank was named as the job's failure"
    no_leftovers
    ;;
elastic)
    # slots H1 H2: what the discovery script says from now on. The file is replaced whole
    # (rename), so the script never reads it half written: an empty answer would be "no
    # slots" and retire every worker.
    slots() {
        printf '%s:%s\n%s:%s\n' "$h1" "$1" "$h2" "$2" > "$logs/slots.new"
        mv "$logs/slots.new" "$logs/slots"
    }
    slots 1 1
    printf '#!/bin/sh\ncat %s\n' "$logs/slots" > "$logs/discover.sh"
    chmod +x "$logs/discover.sh"
    export CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5
    # The workers wait at step 50 until the job has grown to 3 and shrunk back to 2, however
    # long starting the third worker on host 2 takes on a loaded machine.
    launch_bg --elastic --min-np 1 --max-np 3 --host-discovery-script "$logs/discover.sh" \
        --discovery-interval 0.2 -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT \
        "$PWD/$BUILD/tests/fault/elastic_sgd" --steps 150 --step-ms 20 --dim 300 \
        --hold-at 50 --hold-sizes 3,2 --tag "mh$tag"
    wait_for '\] gen 1 size 2' 2
    wait_for '^\[0\] commit' 2
    slots 1 2
    wait_for '^\[2\] gen [0-9]* size 3 rank 2 step [0-9]* joined$' 1
    slots 1 1
    wait $pid
    rc=$?
    [ $rc = 0 ] || fail "exit $rc"
    expect "^chorus-run: elastic: started worker 2 (pid [0-9]* on host $h2)"
    expect "^\[1\] .*listening on $(cluster_addr 2):"
    expect "^\[2\] .*listening on $(cluster_addr 2):"
    expect "^\[2\] error: CHORUS_ERR_MEMBERSHIP.*retired"
    [ "$(grep -c '^\[[01]\] final step 150 hash [0-9a-f]* ok$' "$logs/out")" = 2 ] || fail "expected workers 0 and 1 to finish"
    no_leftovers
    ;;
iface)
    # a second link between host 1 and host 2 (alt0, 10.232.9.0/24) besides eth0
    ip link add "a$tag" netns "$h1" type veth peer name alt0 netns "$h2" || fail "cannot add the second link"
    ip -n "$h1" link set "a$tag" name alt0
    ip -n "$h1" addr add 10.232.9.1/24 dev alt0
    ip -n "$h2" addr add 10.232.9.2/24 dev alt0
    ip -n "$h1" link set alt0 up
    ip -n "$h2" link set alt0 up
    launch -H "$h1:2,$h2:2" --network-interface alt0 --verbose -x CHORUS_DEBUG_SUBSYS=INIT "$coll"
    [ $rc = 0 ] || fail "exit $rc"
    expect "^chorus-run: job .*rendezvous store 10.232.9.1:"
    for r in 0 1 2 3; do
        expect "^\[$r\] .*rank $r: local rank $((r % 2)) of 2, 2 hosts, listening on 10.232.9.$((r / 2 + 1)):"
    done
    expect "^\[0\] coll_select: OK on 4 ranks"
    launch -H "$h1:2,$h2:2" --network-interface nosuch0 true
    [ $rc = 2 ] || fail "unknown interface: exit $rc, not 2"
    expect "CHORUS_IFACE=nosuch0 is neither an IPv4 address nor an interface with one"
    # a launcher on none of the hosts (host 3): its store on CHORUS_IFACE's address there
    ip netns exec "$h3" "$run" --rsh "ip netns exec" --network-interface eth0 --verbose \
        -x CHORUS_DEBUG_SUBSYS=INIT -H "$h1:2,$h2:2" "$coll" > "$logs/out" 2>&1
    rc=$?
    [ $rc = 0 ] || fail "launcher on host 3: exit $rc"
    expect "^chorus-run: job .*rendezvous store $(cluster_addr 3):"
    expect "^\[3\] .*rank 3: local rank 1 of 2, 2 hosts, listening on $(cluster_addr 2):"
    expect "^\[0\] coll_select: OK on 4 ranks"
    no_leftovers
    ;;
*)
    fail "unknown case"
    ;;
esac
grep -h '^chorus-run:' "$logs/out" # what the user saw last, for the log
echo "multihost $case: OK"
