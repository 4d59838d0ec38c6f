# syntax=docker/dockerfile:1
# Rampart's Python base, two targets:
#   builder  python3 + pip + one virtualenv (/opt/venv) holding every runtime dependency, installed
#            from the host's wheelhouse with --no-index (no network, no compiler in a build);
#            the service images install the rampart wheel with it and keep only the new files
#   runtime  python3, that virtualenv, the ONNX models and the non-root user (uid 10001): no pip, no
#            compiler, no apt lists; the service images are thin layers FROM it
# Context: the folder tests/deploy_images.py stages (.cache/image-context: wheels/, models/, triton/).
# Production pins the base by digest: --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:<digest>
ARG BASE_IMAGE=localhost/rampart/debian:bookworm

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
# Debian's python3.11 once, for both targets (and, by the same instruction, triton-cpu's runtime: the
# layer cache shares it). libpython3.11: Triton's python-backend stub links it.
FROM ${BASE_IMAGE} AS python
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Debian stable replaces package versions in point releases, so an exact apt pin stops building after
# the next one; the base image's digest is the pin (docker/README.md, "Pinning").
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 libpython3.11 ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log

FROM python AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# unpinned apt packages: the base image's digest is the pin (docker/README.md, Pinning)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# COPY, not a bind mount: the layer cache must see when a wheel changes.
COPY wheels/deps /wheels/deps
# --no-deps: the wheelhouse is already the resolved, pinned set (docker/wheelhouse.sh). Byte code is
# compiled here (pip does): the root filesystem is read-only at run time, so nothing could cache it.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --no-deps /wheels/deps/*.whl

# The virtualenv as the runtime gets it: without pip and setuptools (nothing installs at run time)
FROM builder AS venv
RUN /opt/venv/bin/python -m pip uninstall -y -q pip setuptools

FROM python AS runtime
RUN groupadd --gid 10001 rampart \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin rampart \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/rampart
COPY --from=venv /opt/venv /opt/venv
# Every model a Rampart service loads (embedder, router, contradiction classifier; the reranker is
# served by Triton), baked in: one layer, shared by the five service images (docker/README.md, "Models").
COPY models /opt/rampart/models
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    RAMPART_MODELS_DIR=/opt/rampart/models \
    RAMPART_DATA_DIR=/var/lib/rampart
WORKDIR /var/lib/rampart
USER 10001:10001
# checkov:skip=CKV_DOCKER_2:Kubernetes probes are the health checks (the service images'); Kubernetes ignores HEALTHCHECK and OCI images drop it
