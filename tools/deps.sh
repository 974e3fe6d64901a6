#!/bin/sh
# Checks that the Debian packages Chorus needs are installed. As root it installs what is
# missing with apt-get; otherwise it prints the exact command and fails.
# CHORUS_SKIP_DEPS=1 skips the check (for systems that are not Debian).
[ "${CHORUS_SKIP_DEPS:-0}" = 1 ] && exit 0
command -v dpkg-query >/dev/null 2>&1 || {
    echo "deps: not a Debian system; make sure these (or their equivalents) are installed: $*" >&2
    exit 0
}
missing=""
for p in "$@"; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
    case "$s" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: installing missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q $missing >/tmp/chorus-apt.log 2>&1 || {
        apt-get update -q >>/tmp/chorus-apt.log 2>&1
        apt-get install -y -q $missing >>/tmp/chorus-apt.log 2>&1
    } || { echo "deps: apt-get failed, see /tmp/chorus-apt.log" >&2; exit 1; }
else
    echo "deps: missing Debian packages:$missing" >&2
    echo "deps: install them with:  sudo apt-get install -y$missing" >&2
    exit 1
fi
