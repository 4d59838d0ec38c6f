# syntax=docker/dockerfile:1
# Redis 7 from Debian, for `make test-deploy` only: the chart's small and medium profiles name
# docker.io/library/redis, which this machine cannot pull, so the podman run swaps in this image
# (tests/deploy_podman.py). Same contract as the official image: redis-server and redis-cli on PATH,
# uid 999, data in /data. One stage: nothing is built, only installed.
ARG BASE_IMAGE=localhost/rampart/debian:bookworm

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# unpinned apt packages: the base image's digest is the pin (docker/README.md, Pinning)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log \
    && groupadd --gid 999 redisd \
    && useradd --uid 999 --gid 999 --no-create-home --home-dir /data --shell /usr/sbin/nologin redisd \
    && install -d -o 999 -g 999 -m 0750 /data
WORKDIR /data
USER 999:999
EXPOSE 6379
# checkov:skip=CKV_DOCKER_2:the chart's probes (tcpSocket and redis-cli ping) are the health checks; Kubernetes ignores HEALTHCHECK and OCI images drop it
CMD ["redis-server", "--dir", "/data"]
