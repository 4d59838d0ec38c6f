# syntax=docker/dockerfile:1
# The orchestrator: the search/answer pipeline as a Ray Serve application (`rampart serve-ray`: a local
# Ray inside the pod on small/medium; on EKS the KubeRay RayService runs the same app from
# serveConfigV2 in this image). Ingress on 8090 (/healthz), /metrics on 9103.
# Context: .cache/image-context (tests/deploy_images.py). Two stages on the builder's pip, each keeping only
# the files it added to the virtualenv: `ray` (ray[serve], ~the image's own weight, changes rarely)
# and `app` (the rampart wheel, every commit), so a code change rebuilds and ships one thin layer.
ARG PYTHON_BUILDER=localhost/rampart/python-builder:0.1.0
ARG PYTHON_BASE=localhost/rampart/python-base:0.1.0

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
FROM ${PYTHON_BUILDER} AS ray
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY wheels/ray /wheels/ray
# --no-deps: wheels/ray is exactly what ray[serve] adds to wheels/deps (docker/wheelhouse.sh)
RUN touch /tmp/before && sleep 1 \
    && /opt/venv/bin/pip install --no-index --no-deps /wheels/ray/*.whl \
    && mkdir /layer \
    && find /opt/venv -newer /tmp/before \( -type f -o -type l \) -print0 | tar --null -T - -cf - | tar -C /layer -xf -

FROM ${PYTHON_BUILDER} AS app
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY wheels/app /wheels/app
RUN touch /tmp/before && sleep 1 \
    && /opt/venv/bin/pip install --no-index --no-deps /wheels/app/rampart-*.whl \
    && mkdir /layer \
    && find /opt/venv -newer /tmp/before \( -type f -o -type l \) -print0 | tar --null -T - -cf - | tar -C /layer -xf -

FROM ${PYTHON_BASE}
COPY --from=ray /layer/ /
COPY --from=app /layer/ /
ENV RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
EXPOSE 8090 9103
# checkov:skip=CKV_DOCKER_2:Kubernetes probes (the chart's /healthz; KubeRay's own on EKS) are the health checks; Kubernetes ignores HEALTHCHECK and OCI images drop it
CMD ["rampart", "serve-ray"]
