#!/usr/bin/env bash
# The local Debian base every Rampart image starts FROM: there is no registry to pull debian:bookworm
# from here, so it is made with debootstrap (minbase) and imported into podman's storage once.
#   usage: docker/debian-base.sh IMAGE [MIRROR]      (CONTAINERS_CONF / CONTAINERS_STORAGE_CONF set)
# Production builds pull a digest-pinned debian:bookworm-slim instead (docker/README.md, BASE_IMAGE).
set -euo pipefail
image=${1:?usage: docker/debian-base.sh IMAGE [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
if podman image exists "$image"; then
    echo "$image exists"
    exit 0
fi
rootfs=$(mktemp -d "${TMPDIR:-/tmp}/rampart-rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 ||
    { tail -20 "$rootfs.log"; echo "debootstrap failed (mirror $mirror): see above" >&2; exit 1; }
rm -f "$rootfs.log"
# apt's caches and lists are not part of the base: every RUN that installs fetches fresh lists.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["/bin/bash"]' - "$image"
