"""Every Triton model config in the repo parses as a ModelConfig (the GPU variant cannot run here, so
this is how far it is checked on this machine) and keeps the interface TritonReranker speaks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.conftest import REPO

TEMPLATE = REPO / "services" / "rerank" / "model_repository" / "rampart_reranker" / "config.pbtxt"
GPU = REPO / "deploy" / "triton" / "model_repository_gpu"
FILLED = {
    "@MODEL_ID@": "m@abc:int8",
    "@VARIANT@": "int8",
    "@MAX_LENGTH@": "160",
    "@THREADS@": "1",
    "@PARALLEL@": "0",
    "@BATCH_SIZE@": "32",
    "@INSTANCE_COUNT@": "2",
    "@INSTANCE_KIND@": "KIND_CPU",
    "@FIRST_STAGE_WEIGHT@": "3.5",
}


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def interface(cfg: model_config_pb2.ModelConfig) -> tuple[set[str], set[str]]:
    return {i.name for i in cfg.input}, {o.name for o in cfg.output}


def test_cpu_template_parses_with_dynamic_batching() -> None:
    text = TEMPLATE.read_text()
    for key, value in FILLED.items():
        text = text.replace(key, value)
    assert not re.search(r"@[A-Z_]+@", text), "a placeholder of the template is not filled"
    cfg = parse(text)
    assert cfg.backend == "python" and cfg.max_batch_size == 64
    assert cfg.HasField("dynamic_batching")  # merges queued requests; no idle wait on CPU
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 0
    assert cfg.instance_group[0].count == 2
    assert list(cfg.version_policy.specific.versions) == [1]
    assert interface(cfg) == ({"QUERY", "PASSAGE"}, {"SCORE"})
    assert cfg.parameters["model_id"].string_value == "m@abc:int8"
    assert cfg.parameters["threads"].string_value == "1" and cfg.parameters["parallel"].string_value == "0"


@pytest.mark.parametrize("path", sorted(GPU.glob("*/config.pbtxt")), ids=lambda p: p.parent.name)
def test_gpu_variant_configs_parse(path: Path) -> None:
    cfg = parse(path.read_text())
    assert cfg.name == path.parent.name


def test_gpu_ensemble_keeps_the_interface_and_uses_tensorrt() -> None:
    ensemble = parse((GPU / "rampart_reranker" / "config.pbtxt").read_text())
    assert ensemble.platform == "ensemble" and interface(ensemble) == ({"QUERY", "PASSAGE"}, {"SCORE"})
    steps = [s.model_name for s in ensemble.ensemble_scheduling.step]
    assert steps == ["rampart_reranker_tokenize", "rampart_reranker_onnx"]
    onnx = parse((GPU / "rampart_reranker_onnx" / "config.pbtxt").read_text())
    accel = onnx.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert onnx.platform == "onnxruntime_onnx" and accel.name == "tensorrt"
    assert onnx.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
