#!/usr/bin/env bash
# Podman and buildah of Debian 12 need two settings on these machines, and Rampart keeps every image,
# layer, volume and network of its own under one folder of the project (gitignored), never in
# /var/lib/containers: this writes that folder's containers.conf and storage.conf.
#   usage: docker/podman-setup.sh DIR      then: export CONTAINERS_CONF=DIR/containers.conf
#                                                 CONTAINERS_STORAGE_CONF=DIR/storage.conf
set -euo pipefail
dir=${1:?usage: docker/podman-setup.sh DIR (e.g. .cache/containers)}
mkdir -p "$dir"/storage "$dir"/run "$dir"/tmp "$dir"/networks
abs=$(cd "$dir" && pwd)
hard=$(ulimit -Hn)
# default_ulimits: podman asks for nofile 1048576, above this machine's hard limit ("setrlimit
# RLIMIT_NOFILE: Operation not permitted"); runtime runc: crun refuses hybrid cgroups (v1).
cat >"$abs/containers.conf.new" <<CONF
[containers]
default_ulimits = ["nofile=${hard}:${hard}", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "${abs}/tmp"

[network]
network_config_dir = "${abs}/networks"
CONF
cat >"$abs/storage.conf.new" <<CONF
[storage]
driver = "overlay"
graphroot = "${abs}/storage"
runroot = "${abs}/run"
CONF
mv "$abs/containers.conf.new" "$abs/containers.conf"
mv "$abs/storage.conf.new" "$abs/storage.conf"
echo "$abs"
