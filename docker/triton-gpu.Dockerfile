# syntax=docker/dockerfile:1
# Triton on GPU (the EKS profile's Spot g5/g6 nodes): NVIDIA's NGC image with the onnxruntime backend
# and TensorRT, serving deploy/triton/model_repository_gpu (an ensemble: a python-backend tokenizer,
# then the fp32 ONNX cross-encoder on the GPU through TensorRT FP16). Same interface as triton-cpu
# (QUERY, PASSAGE -> SCORE), so the orchestrator needs no change.
# Not built on the development machine (no registry for nvcr.io, no GPU): hadolint and checkov check it
# there, and a GPU builder builds it with
#   buildah bud -f docker/triton-gpu.Dockerfile \
#     --build-arg TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3@sha256:<digest> .cache/image-context
# where the context is staged by `python -m tests.deploy_images --gpu-context --gpu-onnx <model.onnx>`:
# triton-gpu/model_repository (deploy/triton/model_repository_gpu with rampart_reranker_onnx/1/model.onnx,
# the fp32 export of `rampart train reranker`, and rampart_reranker_tokenize/1/{tokenizer.json,
# pair_scorer.py}) and wheels/triton-gpu/tokenizers-*.whl.
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3

# checkov:skip=CKV_DOCKER_7:every FROM is a build argument whose default names a tag (tests/integration/test_deploy_docker.py checks it); production passes a digest (docker/README.md, Pinning)
FROM ${TRITON_IMAGE} AS tokenizer
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY wheels/triton-gpu /wheels
# The tokenizer model's one dependency, from the host's wheelhouse into its own folder
RUN python3 -m pip install --no-index --no-deps --target /opt/rampart/python /wheels/tokenizers-*.whl

FROM ${TRITON_IMAGE}
COPY --from=tokenizer /opt/rampart/python /opt/rampart/python
COPY triton-gpu/model_repository /models
# NGC's image runs as root by default; it ships the unprivileged user triton-server, uid 1000 (NVIDIA's
# documentation; not verified here, where the image cannot be pulled)
ENV PYTHONPATH=/opt/rampart/python
USER 1000:1000
EXPOSE 8000 8001 8002
# checkov:skip=CKV_DOCKER_2:Kubernetes probes (the chart's /v2/health/live and /v2/health/ready) are the health checks; Kubernetes ignores HEALTHCHECK and OCI images drop it
CMD ["tritonserver", "--model-repository=/models", "--exit-on-error=true"]
