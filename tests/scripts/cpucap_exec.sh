#!/bin/sh
# cpucap_exec.sh PROGRAM ARGS... - run by chorus-run for every rank: joins the rank's CPU
# group (or CPU) set up by cpucap.sh, then becomes PROGRAM.
r=${CHORUS_RANK:-${RANK:-0}}
if [ -n "${CPUCAP_DIR:-}" ] && [ -d "$CPUCAP_DIR/r$r" ]; then
    echo $$ > "$CPUCAP_DIR/r$r/cgroup.procs" || exit 1
fi
if [ -n "${CPUCAP_PIN_SLOW:-}" ]; then
    case "$CPUCAP_PIN_SLOW" in *" $r "*) exec taskset -c 1 "$@" ;; *) exec taskset -c 0 "$@" ;; esac
fi
exec "$@"
