#!/usr/bin/env bash
# The wheels every image installs, fetched once on the host (pip's ordinary client, PyPI or the index
# pip is configured with) so that image builds run `pip install --no-index` from a local folder: no
# network and no compiler inside a build, and a warm rebuild downloads nothing.
#   usage: docker/wheelhouse.sh DIR [PYTHON]
#   DIR/deps    the runtime dependencies of pyproject.toml (+ botocore for SigV4), pinned by
#               requirements/constraints.txt: the python-base image
#   DIR/ray     ray[serve] and what it adds: the orchestrator image
#   DIR/triton  requirements/triton.txt (tritonserver of nvidia-pytriton, numpy<2): the triton-cpu image
#   DIR/app     the rampart wheel itself (rebuilt on every call: it is the code)
# The dependency folders are refetched only when their pins change (a stamp holds the pins' hash).
set -euo pipefail
dir=${1:?usage: docker/wheelhouse.sh DIR [PYTHON]}
py=${2:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
pins=$(cat "$0" "$root/pyproject.toml" "$root/requirements/constraints.txt" "$root/requirements/triton.txt" | sha256sum | cut -c1-16)
if [ "$(cat "$dir/.pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$dir/deps" "$dir/ray" "$dir/triton"
    tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
    # async-timeout: redis needs it below Python 3.11.3, and the images run Debian's 3.11.2 while the
    # host resolving here may be newer (its marker would skip it)
    "$py" -m pip wheel -q --wheel-dir "$tmp/deps" -c "$root/requirements/constraints.txt" "$root[aws]" \
        'async-timeout==5.0.1'
    rm -f "$tmp"/deps/rampart-*.whl
    # ray's own wheels only: what deps/ already holds is found there, not fetched again
    "$py" -m pip wheel -q --wheel-dir "$tmp/ray" --find-links "$tmp/deps" \
        -c "$root/requirements/constraints.txt" 'ray[serve]==2.60.0'
    for whl in "$tmp"/ray/*.whl; do
        [ -e "$tmp/deps/$(basename "$whl")" ] && rm -f "$whl"
    done
    "$py" -m pip wheel -q --wheel-dir "$tmp/triton" -r "$root/requirements/triton.txt"
    mv "$tmp/deps" "$tmp/ray" "$tmp/triton" "$dir/"
    rmdir "$tmp"
    echo "$pins" >"$dir/.pins"
fi
rm -rf "$dir/app"
"$py" -m pip wheel -q --no-deps --wheel-dir "$dir/app" "$root"
ls "$dir"/app/rampart-*.whl
