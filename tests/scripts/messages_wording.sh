#!/bin/sh
# Messages a user reads when something is off: a launcher variable missing ("RANK is not set"),
# a port held by a program that is not a Chorus store (said within seconds, not after the
# whole timeout), a clean Python exit (a shutdown, not an error), and counts in good grammar.
set -u
fail() { echo "FAILED: $*"; exit 1; }
bench="chorus-bench -b 8 -e 8 -n 1 -w 0"
tmp=${TMPDIR:-/tmp}/messages_wording.$$
listener=""
cleanup() { [ -n "$listener" ] && kill "$listener" 2>/dev/null; rm -f "$tmp".*; }
trap cleanup EXIT INT TERM

out=$(env -u RANK WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 $bench 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "^  RANK is not set: every process of a torchrun-style job needs RANK and WORLD_SIZE (with MASTER_ADDR and MASTER_PORT); or start the program with a launcher (chorus-run -np N)$" ||
    fail "WORLD_SIZE without RANK"

# MASTER_PORT held by a program that is not a Chorus store: one that accepts and never answers
# (said after 10 s, not the whole timeout), one that answers in another protocol (said at once).
listen() { # MODE: prints the port, serves until killed
    rm -f "$tmp.port"
    python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c = s.accept()[0]
    if sys.argv[1] == "http":
        c.recv(100)
        c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        c.close()
    else:
        conns.append(c)
' "$1" >"$tmp.port" &
    listener=$!
    i=0
    while [ ! -s "$tmp.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    port=$(cat "$tmp.port")
    [ -n "$port" ] || fail "no listener"
}
listen silent
start=$(date +%s)
out=$(CHORUS_TIMEOUT_S=120 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $bench 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
echo "took ${took}s of a 120 s timeout"
[ $rc = 1 ] && echo "$out" | grep -q "rendezvous store at 127.0.0.1:$port accepted the connection but sent no reply in 10 s: it is not a Chorus store" ||
    fail "a port held by a silent program"
[ "$took" -lt 60 ] || fail "it waited ${took}s"
kill "$listener"
listen http
for secret in "" 0123456789abcdef0123; do
    out=$(CHORUS_SECRET=$secret CHORUS_TIMEOUT_S=120 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $bench 2>&1); rc=$?
    echo "$out"
    [ $rc = 1 ] && echo "$out" | grep -q "rendezvous store at 127.0.0.1:$port is not a Chorus store: it answered \"HTTP\" (0x50545448), another protocol; another program listens on that port" ||
        fail "a port held by a program of another protocol (secret '$secret')"
done
kill "$listener"
listener=""

# A clean exit of a Python program: the engine is shut down, nothing reads like an error.
# (Not under a sanitizer: a sanitized libchorus.so cannot load into the plain interpreter.)
if [ -z "${SANITIZE:-}" ]; then
    out=$(cd python && CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=ENGINE chorus-run -np 2 /usr/bin/python3 -c '
import chorus, numpy as np
chorus.init()
print("sum", chorus.allreduce(np.ones(3, dtype=np.float32))[0])' 2>&1); rc=$?
    echo "$out"
    [ $rc = 0 ] || fail "python run: exit $rc"
    [ "$(echo "$out" | grep -c 'CHORUS INFO engine shut down (chorus_engine_shutdown on every rank)')" = 2 ] ||
        fail "the shutdown line on each rank"
    echo "$out" | grep -q "engine stopped\|before this op ran" && fail "a clean exit reads like an error"
fi

# The launcher's summary: the first rank to fail, then each other rank on a line of its own
out=$(chorus-run -np 2 chorus-bench -t 4 2>&1)
echo "$out"
echo "$out" | grep -q "^chorus-run: stopped: rank [01] (pid [0-9]*) exited with status 2$" || fail "the launcher's summary"
out=$(CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,TCP,COLL CHORUS_SHM=0 CHORUS_TCP_LANES=1 chorus-run -np 2 $bench 2>&1)
echo "$out" | grep "peer\|host"
echo "$out" | grep -q "rank 0 connected to 1 peer over 1 TCP lane each$" || fail "1 peer"
echo "$out" | grep -q "rank 0: local rank 0 of 2, 1 host, listening on" || fail "1 host"
echo "$out" | grep -q "(2 ranks, 1 host): TCP;" || fail "1 host (comm)"
echo "messages_wording: ok"
