# syntax=docker/dockerfile:1
# The HTTP gateway (`rampart serve` with RAMPART_REMOTE__* set): auth, limits, errors, in front of the
# orchestrator and the ingest service. Port 8080 (/healthz, /readyz, /metrics).
# Context: .cache/image-context (tests/deploy_images.py). Stage `app` installs the rampart wheel with the
# builder's pip and keeps only the files it added; the image is python-base's runtime plus that layer.
ARG PYTHON_BUILDER=localhost/rampart/python-builder:0.1.0
ARG PYTHON_BASE=localhost/rampart/python-base:0.1.0

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
FROM ${PYTHON_BUILDER} AS app
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY wheels/app /wheels/app
RUN touch /tmp/before && sleep 1 \
    && /opt/venv/bin/pip install --no-index --no-deps /wheels/app/rampart-*.whl \
    && mkdir /layer \
    && find /opt/venv -newer /tmp/before \( -type f -o -type l \) -print0 | tar --null -T - -cf - | tar -C /layer -xf -

FROM ${PYTHON_BASE}
COPY --from=app /layer/ /
USER 10001:10001
EXPOSE 8080
# checkov:skip=CKV_DOCKER_2:Kubernetes probes (the chart's /healthz and /readyz) are the health checks; Kubernetes ignores HEALTHCHECK and OCI images drop it
CMD ["rampart", "serve", "--host", "0.0.0.0", "--port", "8080"]
