"""Build Rampart's container images with buildah from the local Debian base (``make images``).

No registry is reachable here, so every image starts FROM ``localhost/rampart/debian:bookworm``
(``docker/debian-base.sh``: debootstrap + ``podman import``). The Python dependencies are installed
once, from the host's wheelhouse (``docker/wheelhouse.sh``), into ``python-builder``/``python-base``;
the five service images are thin layers on top. The build context is a folder staged here
(``.cache/image-context``): hard links to the wheels, the built models and the Triton repository, so
no Dockerfile reaches into ``.venv`` or ``.rampart``.

Writes a JSON report (seconds per image, sizes) that ``docs/deploy.md`` quotes; run with
``CONTAINERS_CONF``/``CONTAINERS_STORAGE_CONF`` set (the Makefile does).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
REGISTRY = "localhost/rampart"
BASE = f"{REGISTRY}/debian:bookworm"
# Models the python images bake in; the reranker is Triton's (its repository), not theirs.
PYTHON_MODELS = ("minilm-l6-v2", "contradiction", "router")


@dataclass(frozen=True)
class Image:
    name: str  # repository under REGISTRY (the chart's components.<name>.image.repository)
    dockerfile: str
    target: str | None = None


# Build order: each image's FROM is built before it.
IMAGES = (
    Image("python-builder", "python-base.Dockerfile", "builder"),
    Image("python-base", "python-base.Dockerfile", "runtime"),
    Image("gateway", "gateway.Dockerfile"),
    Image("orchestrator", "orchestrator.Dockerfile"),
    Image("retrieval", "retrieval.Dockerfile"),
    Image("ingest", "ingest.Dockerfile"),
    Image("worker", "worker.Dockerfile"),
    Image("triton-cpu", "triton-cpu.Dockerfile"),
    Image("redis", "redis.Dockerfile"),
)
# What the chart deploys (values.yaml names them); python-builder is build-only.
DEPLOYED = ("gateway", "orchestrator", "retrieval", "ingest", "worker", "triton-cpu", "redis")


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` mirrors ``src`` with hard links (same filesystem) or copies; files world-readable, so
    the images' non-root users can read them whatever the host's umask was."""
    if dst.exists():
        shutil.rmtree(dst)
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
        target.chmod(target.stat().st_mode | 0o444)
    for d in [dst, *(p for p in dst.rglob("*") if p.is_dir())]:
        d.chmod(0o755)


def stage_context(context: Path, wheelhouse: Path, models_dir: Path) -> Path:
    """The build context: ``wheels/{deps,ray,triton,app}``, ``models/``, ``triton/``."""
    from services.rerank.triton_repository import materialize

    missing = [str(p) for p in (wheelhouse / "deps", wheelhouse / "app", models_dir) if not p.is_dir()]
    if missing:
        sys.exit(
            f"missing {', '.join(missing)}: run `make models` and docker/wheelhouse.sh (`make images` does)"
        )
    context.mkdir(parents=True, exist_ok=True)
    for part in ("deps", "ray", "triton", "app"):
        _link_tree(wheelhouse / part, context / "wheels" / part)
    models = context / "models"
    if models.exists():
        shutil.rmtree(models)
    for name in PYTHON_MODELS:
        _link_tree(models_dir / name, models / name)
    repo_tmp = context / ".triton-repo"
    materialize(models_dir / "reranker", repo_tmp)
    _link_tree(repo_tmp, context / "triton" / "model_repository")
    shutil.rmtree(repo_tmp)
    shutil.copy2(DOCKER / "tritonserver.sh", context / "triton" / "tritonserver.sh")
    (context / "triton" / "tritonserver.sh").chmod(0o755)
    return context


def stage_gpu_context(context: Path, wheelhouse: Path, models_dir: Path, onnx_fp32: Path | None) -> list[str]:
    """What docker/triton-gpu.Dockerfile copies, staged under ``context`` (``triton-gpu/``,
    ``wheels/triton-gpu/``); returns what is still missing for a build (the fp32 ONNX export, which is
    not shipped: only the int8 one is, and TensorRT wants fp32). Not built here: NGC's base image cannot
    be pulled and there is no GPU."""
    from services.rerank import pair_scorer

    repo = context / "triton-gpu" / "model_repository"
    _link_tree(ROOT / "deploy" / "triton" / "model_repository_gpu", repo)
    tokenize = repo / "rampart_reranker_tokenize" / "1"
    shutil.copy2(models_dir / "reranker" / "tokenizer.json", tokenize / "tokenizer.json")
    shutil.copy2(Path(pair_scorer.__file__), tokenize / "pair_scorer.py")
    wheels = context / "wheels" / "triton-gpu"
    wheels.mkdir(parents=True, exist_ok=True)
    for whl in (wheelhouse / "triton").glob("tokenizers-*.whl"):
        shutil.copy2(whl, wheels / whl.name)
    onnx = repo / "rampart_reranker_onnx" / "1" / "model.onnx"
    if onnx_fp32 is not None:
        shutil.copy2(onnx_fp32, onnx)
    return [] if onnx.is_file() else [f"{onnx.relative_to(context)} (the fp32 export: --gpu-onnx PATH)"]


def build(image: Image, context: Path, tag: str) -> dict[str, object]:
    """One ``buildah bud --layers`` (the layer cache makes a warm rebuild of unchanged images ~free)."""
    ref = f"{REGISTRY}/{image.name}:{tag}"
    cmd = [
        "buildah",
        "bud",
        "--layers",
        "--quiet",
        "-f",
        str(DOCKER / image.dockerfile),
        "-t",
        ref,
        "--build-arg",
        f"BASE_IMAGE={BASE}",
        "--build-arg",
        f"PYTHON_BUILDER={REGISTRY}/python-builder:{tag}",
        "--build-arg",
        f"PYTHON_BASE={REGISTRY}/python-base:{tag}",
    ]
    if image.target:
        cmd += ["--target", image.target]
    started = time.monotonic()
    done = subprocess.run([*cmd, str(context)], capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        sys.exit(
            f"building {ref} from docker/{image.dockerfile} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    size = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {"image": ref, "seconds": seconds, "size_mb": round(int(size) / 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="0.1.0")
    parser.add_argument("--wheelhouse", type=Path, default=ROOT / ".cache" / "wheelhouse")
    parser.add_argument("--models", type=Path, default=ROOT / ".rampart" / "models")
    parser.add_argument("--context", type=Path, default=ROOT / ".cache" / "image-context")
    parser.add_argument("--report", type=Path, default=ROOT / "out" / "images.json")
    parser.add_argument("--only", default="", help="comma-separated image names (default: all)")
    parser.add_argument(
        "--gpu-context",
        action="store_true",
        help="only stage docker/triton-gpu.Dockerfile's context (for a GPU builder; nothing is built)",
    )
    parser.add_argument("--gpu-onnx", type=Path, help="the fp32 reranker export for --gpu-context")
    args = parser.parse_args()
    if args.gpu_context:
        missing = stage_gpu_context(args.context, args.wheelhouse, args.models, args.gpu_onnx)
        print(
            f"staged {args.context}/triton-gpu"
            + (f"; still missing: {', '.join(missing)}" if missing else "")
        )
        return
    only = {n for n in args.only.split(",") if n}
    unknown = only - {i.name for i in IMAGES}
    if unknown:
        sys.exit(f"--only names unknown images {sorted(unknown)}; known: {[i.name for i in IMAGES]}")
    started = time.monotonic()
    stage_context(args.context, args.wheelhouse, args.models)
    rows = [{"image": "context", "seconds": round(time.monotonic() - started, 1)}]
    for image in IMAGES:
        if only and image.name not in only:
            continue
        rows.append(build(image, args.context, args.tag))
        print(json.dumps(rows[-1]), flush=True)
    report = {"tag": args.tag, "total_seconds": round(time.monotonic() - started, 1), "images": rows}
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    print(f"built {len(rows) - 1} images in {report['total_seconds']} s; report {args.report}")


if __name__ == "__main__":
    main()
