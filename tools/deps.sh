#!/bin/sh
# deps.sh WHAT PACKAGE... - checks that the Debian packages WHAT needs are installed (each make
# target passes its own tier: the library and tools need only a compiler and libsodium; the
# trainer, the tests, Python and the fuzzers add theirs). As root it installs the missing ones
# with apt-get; otherwise it names them, with the exact command, and fails. Nothing is printed
# when everything is there.
# CHORUS_SKIP_DEPS=1 skips the check (another distribution, or packages installed otherwise).
what=$1
shift
[ "${CHORUS_SKIP_DEPS:-0}" = 1 ] && exit 0
command -v dpkg-query >/dev/null 2>&1 || {
    echo "deps: not a Debian system; $what: make sure these (or their equivalents) are installed: $*" >&2
    exit 0
}
# As root, one check-and-install at a time: with make -j several tiers' checks may run at once,
# and the second must see what the first installed (apt-get also waits for dpkg's own lock).
if [ "$(id -u)" = 0 ] && command -v flock >/dev/null 2>&1; then
    exec 9>/tmp/chorus-deps.lock && flock 9
fi
missing=""
for p in "$@"; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
    case "$s" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "deps: $what: installing the missing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt="apt-get -o DPkg::Lock::Timeout=600" # our lock (fd 9) is not handed down to it
    $apt install -y -q $missing >/tmp/chorus-apt.log 2>&1 9>&- || {
        $apt update -q >>/tmp/chorus-apt.log 2>&1 9>&-
        $apt install -y -q $missing >>/tmp/chorus-apt.log 2>&1 9>&-
    } || { echo "deps: apt-get failed, see /tmp/chorus-apt.log" >&2; exit 1; }
else
    echo "deps: $what: these Debian packages are not installed:$missing" >&2
    echo "deps: install them with:  sudo apt-get install -y$missing" >&2
    echo "deps: (or, when they are installed some other way, run make with CHORUS_SKIP_DEPS=1)" >&2
    exit 1
fi
