#!/bin/sh
# `tritonserver` on PATH, as in NVIDIA's images (the chart runs `tritonserver --model-repository=...`):
# the binary of the nvidia-pytriton wheel with the python backend folder assembled in the image.
exec /opt/triton/lib/python3.11/site-packages/pytriton/tritonserver/bin/tritonserver \
    --backend-directory=/opt/tritonserver/backends "$@"
