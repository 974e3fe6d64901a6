#!/bin/sh
# container-base.sh IMAGE [MIRROR] - makes the Debian 12 base image IMAGE in podman's storage
# when it is not there: `debootstrap --variant=minbase bookworm` (essential packages and apt:
# about 200 MB, a minute or two) from MIRROR, imported with `podman import`. An image already
# there is kept (remove it with `podman rmi IMAGE` to make it again, e.g. for Debian's
# updates). Needs root (debootstrap). $PODMAN is the podman command (mk/containers.mk).
set -eu
image=$1
mirror=${2:-http://deb.debian.org/debian}
podman=${PODMAN:-podman}
if $podman image exists "$image"; then exit 0; fi
[ "$(id -u)" = 0 ] || { echo "container-base: debootstrap needs root: run make images as root" >&2; exit 1; }
root=$(mktemp -d /var/tmp/chorus-base.XXXXXX)
trap 'rm -rf "$root"' EXIT INT TERM
echo "container-base: debootstrap --variant=minbase bookworm from $mirror (log: $root.log)"
if ! debootstrap --variant=minbase bookworm "$root/rootfs" "$mirror" > "$root.log" 2>&1; then
    tail -n 5 "$root.log" >&2
    echo "container-base: debootstrap failed; its log is $root.log" >&2
    exit 1
fi
rm -f "$root.log"
rm -rf "$root"/rootfs/var/cache/apt/archives/*.deb "$root"/rootfs/var/lib/apt/lists/*
tar -C "$root/rootfs" -c . | $podman import --change 'CMD ["/bin/bash"]' - "$image" > /dev/null
echo "container-base: $image imported"
