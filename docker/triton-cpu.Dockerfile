# syntax=docker/dockerfile:1
# Triton on CPU: tritonserver 2.51 from the nvidia-pytriton wheel (python backend only) in its own
# virtualenv (numpy<2), serving Rampart's cross-encoder (int8 ONNX inside the python backend) from the
# repository `rampart triton repo` writes (staged by tests/deploy_images.py as triton/model_repository).
# HTTP 8000 (/v2/health/ready), gRPC 8001, metrics 8002. The small and medium profiles run it.
# The GPU variant (onnxruntime + TensorRT on NGC's image) is triton-gpu.Dockerfile.
ARG BASE_IMAGE=localhost/rampart/debian:bookworm
ARG PYTHON_BUILDER=localhost/rampart/python-builder:0.1.0

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
# python-base's builder: Debian's python3 with venv, already built
FROM ${PYTHON_BUILDER} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY wheels/triton /wheels/triton
# The python backend needs a folder holding libtriton_python.so, its utils and the stub built for
# this Python (3.11): assembled from the wheel (services/rerank/triton_server.py does the same).
RUN python3 -m venv /opt/triton \
    && /opt/triton/bin/pip install --no-index --no-deps /wheels/triton/*.whl \
    && /opt/triton/bin/pip uninstall -y pip setuptools \
    && site=/opt/triton/lib/python3.11/site-packages/pytriton/tritonserver \
    && install -d /opt/tritonserver/backends/python \
    && cp "$site/backends/python/libtriton_python.so" "$site/backends/python/triton_python_backend_utils.py" \
          "$site/python_backend_stubs/3.11/triton_python_backend_stub" /opt/tritonserver/backends/python/

FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The same instruction as python-base's `python` stage, so the layer cache shares it. libpython3.11: the
# backend stub links it (LD_LIBRARY_PATH below puts the wheel's libs first, else the stub dies with an
# RLock error). Debian stable replaces package versions in point releases, so an exact apt pin stops
# building after the next one; the base image's digest is the pin (docker/README.md, "Pinning").
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 libpython3.11 ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
RUN groupadd --gid 1000 triton \
    && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin triton
COPY --from=builder /opt/triton /opt/triton
COPY --from=builder /opt/tritonserver /opt/tritonserver
COPY triton/tritonserver.sh /usr/local/bin/tritonserver
COPY triton/model_repository /models
ENV PATH=/opt/triton/bin:$PATH \
    LD_LIBRARY_PATH=/opt/triton/lib/python3.11/site-packages/nvidia_pytriton.libs:/usr/lib/x86_64-linux-gnu \
    HOME=/tmp
USER 1000:1000
EXPOSE 8000 8001 8002
# checkov:skip=CKV_DOCKER_2:Kubernetes probes (the chart's /v2/health/live and /v2/health/ready) are the health checks; Kubernetes ignores HEALTHCHECK and OCI images drop it
CMD ["tritonserver", "--model-repository=/models", "--exit-on-error=true"]
