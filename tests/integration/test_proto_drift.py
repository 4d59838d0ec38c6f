"""The committed stubs in proto/gen are exactly what `make proto` generates from proto/rampart.

An integration test: protoc runs the mypy-protobuf plugins as child processes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from services.common import proto_build


def test_committed_stubs_match_the_protos() -> None:
    changed = proto_build.drift()
    assert changed == [], f"proto/gen is out of date, run `make proto`: {changed}"


def test_drift_is_detected(tmp_path: Path) -> None:
    """The check is not vacuous: an edited .proto shows up as drifted generated files."""
    protos = tmp_path / "proto"
    shutil.copytree(proto_build.PROTO_DIR / "rampart", protos / "rampart")
    gen = tmp_path / "gen"
    proto_build.generate(gen, protos)
    assert proto_build.drift(gen, protos) == []
    types = protos / "rampart" / "common" / "v1" / "types.proto"
    types.write_text(types.read_text().replace("message Acl {", "message Acl {\n  string note = 99;"))
    (gen / "rampart" / "stale_pb2.py").write_text("")
    changed = proto_build.drift(gen, protos)
    assert "rampart/common/v1/types_pb2.py" in changed
    assert "rampart/common/v1/types_pb2.pyi" in changed
    assert "rampart/stale_pb2.py" in changed


def test_modules_import_from_the_generated_package() -> None:
    from rampart.retrieval.v1 import index_pb2, retrieval_pb2

    assert retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"].full_name == (
        "rampart.retrieval.v1.RetrievalService"
    )
    assert "Write" in index_pb2.DESCRIPTOR.services_by_name["IndexService"].methods_by_name
