"""tests/deploy_podman.py's adaptation of the rendered small profile to podman kube play, checked offline
(no podman): what it changes is exactly what podman 4.3 cannot run, and nothing of the chart is lost."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
import yaml

from tests import deploy_podman as dp
from tests.deploy_render import Rendered

API_KEYS = {"rampart-api-keys": {"api-keys.json": '{"keys": []}'}}


@cache
def small() -> Rendered:
    return dp.render_small()


def adapted() -> dp.Adapted:
    return dp.adapt(small(), {**dp.rendered_secrets(small()), **API_KEYS})


def containers(bundle: dp.Bundle) -> list[dict[str, Any]]:
    dep = next(d for d in bundle.docs if d["kind"] == "Deployment")
    return list(dep["spec"]["template"]["spec"]["containers"])


def test_the_overlay_only_swaps_what_this_machine_cannot_pull() -> None:
    images = {
        c["image"]
        for d in small().docs
        if d.get("kind") in ("Deployment", "StatefulSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    tag = small().values["global"]["imageTag"]
    assert all(i.startswith("localhost/rampart/") and i.endswith(f":{tag}") for i in images), images
    assert {d["metadata"]["name"] for d in small().of_kind("StatefulSet")} == {
        "rampart-ingest",
        "rampart-redis",
    }


def test_every_workload_becomes_a_bundle_with_its_service_names() -> None:
    a = adapted()
    services = {s["metadata"]["name"] for s in small().of_kind("Service")}
    assert {b.name for b in a.bundles} == {
        d["metadata"]["name"] for d in small().docs if d.get("kind") in ("Deployment", "StatefulSet")
    }
    assert {alias for b in a.bundles for alias in b.aliases} == services
    assert a.bundle("rampart-retrieval").aliases == ["rampart-retrieval"]


def test_statefulsets_become_deployments_with_claims() -> None:
    bundle = adapted().bundle("rampart-ingest")
    kinds = [d["kind"] for d in bundle.docs]
    assert kinds.count("Deployment") == 1 and "StatefulSet" not in kinds
    claim = next(d for d in bundle.docs if d["kind"] == "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "data-rampart-ingest-0"
    dep = bundle.docs[0]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "data-rampart-ingest-0"
    mounts = {m["name"]: m["mountPath"] for m in containers(bundle)[0]["volumeMounts"]}
    assert mounts["data"] == "/var/lib/rampart"  # the journal survives the container


def test_dependent_variables_are_resolved_and_probes_dropped() -> None:
    a = adapted()
    secrets = dp.rendered_secrets(small())
    password = secrets["rampart-redis-orchestrator"]["password"]
    for bundle in a.bundles:
        for c in containers(bundle):
            text = json.dumps([c.get("env", []), c.get("args", []), c.get("command", [])])
            assert "$(" not in text, (bundle.name, text)
            assert not {"livenessProbe", "readinessProbe", "startupProbe"} & set(c), bundle.name
    env = {e["name"]: e.get("value") for e in containers(a.bundle("rampart-orchestrator"))[0]["env"]}
    url = f"redis://orchestrator:{password}@rampart-redis:6379/0"
    assert env["RAMPART_FACTCHECK__CELERY__BROKER_URL"] == url
    # Redis reads its users from the aclfile: no password on its command line
    args = containers(a.bundle("rampart-redis"))[0]["args"]
    assert args[:2] == ["--aclfile", "/etc/rampart/redis/users.acl"]
    assert not any(v in " ".join(args) for s in secrets.values() for v in s.values())


def test_secrets_take_the_shape_podman_reads() -> None:
    a = adapted()
    redis = {f"rampart-redis-{role}" for role in ("gateway", "orchestrator", "worker", "probe")}
    tokens = {"rampart-internal-token", "rampart-ray-token", "rampart-key-pepper", "rampart-triton-key"}
    assert set(a.env_secrets) == tokens | redis
    # Triton's restricted-API flags carry the key the orchestrator sends, resolved as the kubelet would
    key = a.env_secrets["rampart-triton-key"]["key"]
    triton_args = containers(a.bundle("rampart-triton"))[0]["args"]
    assert sum(arg.endswith(f"x-rampart-triton-key={key}") for arg in triton_args) == 2
    tls = {f"rampart-{c}-tls" for c in ("gateway", "orchestrator", "retrieval", "ingest", "triton")}
    assert set(a.volume_secrets) == {"rampart-api-keys", "rampart-redis-acl"} | tls
    # the same values the chart generated, not new ones
    assert a.env_secrets["rampart-redis-worker"] == dp.rendered_secrets(small())["rampart-redis-worker"]
    # a certificate's files in plain PEM (podman writes a volume Secret's data as it is)
    retrieval = a.volume_secrets["rampart-retrieval-tls"]
    assert set(retrieval) == {"ca.crt", "tls.crt", "tls.key"}
    assert retrieval["tls.key"].startswith("-----BEGIN EC PRIVATE KEY-----")
    assert a.volume_secrets["rampart-redis-acl"]["users.acl"].startswith("user default off")


def test_a_missing_secret_is_named() -> None:
    with pytest.raises(KeyError, match="rampart-api-keys"):
        dp.adapt(small(), dp.rendered_secrets(small()))


def test_an_object_podman_cannot_run_is_refused() -> None:
    docs = [*small().docs, {"kind": "CronJob", "metadata": {"name": "nightly"}}]
    with pytest.raises(ValueError, match="CronJob nightly: podman kube play cannot run it"):
        dp.adapt(Rendered("small", small().values, docs), {**dp.rendered_secrets(small()), **API_KEYS})


def test_bundles_serialise_for_kube_play() -> None:
    for bundle in adapted().bundles:
        again = list(yaml.safe_load_all(yaml.safe_dump_all(bundle.docs)))
        assert again == bundle.docs
