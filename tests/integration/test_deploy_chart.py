"""The Helm chart, rendered offline for every profile and checked as a cluster would receive it.

Each property has a checker that returns what is wrong (an empty list when all is well); every test
runs its checker on the real rendered profiles, and the ``*_breaks`` tests feed the same checker a
copy with the property removed, so a check that can no longer fail is itself a failure. Tools:
helm-python-sdk (lint, schema, render), kubernetes-validate --strict (built-in kinds), the published
schemas of KEDA and prometheus-operator from npm (their CRs), checkov. KubeRay's RayService has no
published schema on PyPI or npm: it is checked only by the structural tests here (deploy/helm/README.md).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from services.factcheck.config import CelerySettings
from tests.deploy_render import (
    PROFILES,
    ROOT,
    WORKLOAD_KINDS,
    Rendered,
    documented_edges,
    lint,
    pod_specs,
    policy_edges,
    render,
)

CUSTOM_KINDS = {"ServiceMonitor", "RayService", "ScaledObject", "TriggerAuthentication"}
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
CRD_MODULES = ROOT / ".cache" / "crd-validators" / "node_modules"
CRD_SCRIPT = ROOT / "deploy" / "helm" / "crd-validation" / "validate.mjs"
CONFIGURATION = ROOT / "docs" / "configuration.md"
PROBE_HANDLERS = {"exec", "httpGet", "grpc", "tcpSocket"}


@cache
def rendered(profile: str) -> Rendered:
    return render(profile)


def workloads(r: Rendered) -> list[dict[str, Any]]:
    return [d for d in r.docs if d["kind"] in WORKLOAD_KINDS]


def name(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


# --- checkers: each returns the problems it finds -------------------------------------------------


def workload_problems(r: Rendered) -> list[str]:
    """Resources, probes, securityContext and topology spread on every container of every workload."""
    problems = []
    for obj in workloads(r):
        for spec in pod_specs(obj):
            pod_sc = spec.get("securityContext", {})
            if pod_sc.get("runAsNonRoot") is not True:
                problems.append(f"{name(obj)}: pod securityContext.runAsNonRoot is not true")
            if pod_sc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
                problems.append(f"{name(obj)}: no RuntimeDefault seccomp profile")
            if not spec.get("topologySpreadConstraints"):
                problems.append(f"{name(obj)}: no topologySpreadConstraints")
            for c in spec["containers"]:
                where = f"{name(obj)} container {c['name']}"
                res = c.get("resources", {})
                for part in ("requests", "limits"):
                    for key in ("cpu", "memory"):
                        if key not in res.get(part, {}):
                            problems.append(f"{where}: no resources.{part}.{key}")
                for probe in ("livenessProbe", "readinessProbe"):
                    if probe not in c:
                        problems.append(f"{where}: no {probe}")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    handlers = set(c.get(probe, {})) & PROBE_HANDLERS
                    if probe in c and len(handlers) != 1:
                        problems.append(
                            f"{where}: {probe} has {len(handlers)} handlers {sorted(handlers)}, needs one"
                        )
                sc = c.get("securityContext", {})
                if sc.get("runAsNonRoot") is not True and pod_sc.get("runAsNonRoot") is not True:
                    problems.append(f"{where}: may run as root")
                if sc.get("readOnlyRootFilesystem") is not True:
                    problems.append(f"{where}: root filesystem is writable")
                if sc.get("allowPrivilegeEscalation") is not False:
                    problems.append(f"{where}: privilege escalation allowed")
                if sc.get("capabilities", {}).get("drop") != ["ALL"]:
                    problems.append(f"{where}: capabilities not dropped (drop: [ALL])")
    return problems


def probe_targets_problems(r: Rendered) -> list[str]:
    """HTTP services probe /healthz and /readyz, gRPC services the standard gRPC health service."""
    want = {
        "gateway": ("/healthz", "/readyz"),
        "retrieval": ("grpc", "grpc"),
        "ingest": ("grpc", "grpc"),
        "triton": ("/v2/health/live", "/v2/health/ready"),
    }
    problems = []
    for obj in workloads(r):
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        if component not in want:
            continue
        c = pod_specs(obj)[0]["containers"][0]
        got = tuple(
            "grpc" if "grpc" in c[p] else c[p].get("httpGet", {}).get("path", "?")
            for p in ("livenessProbe", "readinessProbe")
        )
        if got != want[component]:
            problems.append(f"{name(obj)}: probes {got}, expected {want[component]}")
    return problems


def triton_placement_problems(r: Rendered) -> list[str]:
    """EKS: Triton on GPU Spot nodes only; the only other GPU workload is the on-demand fallback at 0."""
    problems = []
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    tritons = [o for o in workloads(r) if o["metadata"]["labels"]["rampart.io/service"] == "triton"]
    spot = [o for o in tritons if o["metadata"]["labels"]["app.kubernetes.io/component"] == "triton"]
    if len(spot) != 1:
        return [f"expected one triton workload, found {[name(o) for o in spot]}"]
    spec = pod_specs(spot[0])[0]
    selector = spec.get("nodeSelector", {})
    if selector.get("eks.amazonaws.com/capacityType") != "SPOT" or selector.get("rampart.io/pool") != "gpu":
        problems.append(f"{name(spot[0])}: nodeSelector {selector} does not pin GPU Spot nodes")
    if gpu_toleration not in spec.get("tolerations", []):
        problems.append(f"{name(spot[0])}: does not tolerate the GPU taint")
    if "nvidia.com/gpu" not in spec["containers"][0]["resources"].get("limits", {}):
        problems.append(f"{name(spot[0])}: asks for no GPU")
    pdbs = [
        p for p in r.of_kind("PodDisruptionBudget") if p["metadata"]["name"] == spot[0]["metadata"]["name"]
    ]
    if not pdbs:
        problems.append(f"{name(spot[0])}: no PodDisruptionBudget")
    scaled = {s["spec"]["scaleTargetRef"]["name"]: s for s in r.of_kind("ScaledObject")}
    for other in workloads(r):
        if other is spot[0]:
            continue
        for s in pod_specs(other):
            if gpu_toleration not in s.get("tolerations", []):
                continue
            fallback = (
                other in tritons
                and s.get("nodeSelector", {}).get("eks.amazonaws.com/capacityType") == "ON_DEMAND"
            )
            so = scaled.get(other["metadata"]["name"])
            if not fallback or so is None or so["spec"]["minReplicaCount"] != 0:
                problems.append(
                    f"{name(other)}: on GPU nodes but not the on-demand Triton fallback at 0 replicas"
                )
    return problems


def network_problems(r: Rendered) -> list[str]:
    """Default deny; every workload in a policy group; both ends of each internal edge open; the union
    exactly the documented edges of this profile."""
    problems = []
    policies = r.of_kind("NetworkPolicy")
    deny = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {}
        and sorted(p["spec"]["policyTypes"]) == ["Egress", "Ingress"]
        and not p["spec"].get("ingress")
        and not p["spec"].get("egress")
    ]
    if not deny:
        problems.append("no default-deny NetworkPolicy (podSelector {}, Ingress and Egress, no rules)")
    groups = {o["metadata"]["labels"]["rampart.io/service"] for o in workloads(r)}
    covered = {p["spec"]["podSelector"].get("matchLabels", {}).get("rampart.io/service") for p in policies}
    for group in sorted(groups - covered):
        problems.append(f"group {group}: no NetworkPolicy of its own (nothing can reach it or leave it)")
    egress, ingress = policy_edges(r)
    internal_e = {e for e in egress if e[1] in groups}
    internal_i = {e for e in ingress if e[0] in groups}
    for e in sorted(internal_e - internal_i):
        problems.append(f"{e}: egress open at {e[0]} but {e[1]} does not admit it")
    for e in sorted(internal_i - internal_e):
        problems.append(f"{e}: {e[1]} admits it but {e[0]} may not send it")
    documented = documented_edges(r.profile, groups)
    opened = egress | ingress
    for e in sorted(opened - documented):
        problems.append(f"{e}: opened but not in docs/architecture.md's Network edges")
    for e in sorted(documented - opened):
        problems.append(f"{e}: documented but not opened")
    return problems


def env_name_problems(r: Rendered) -> list[str]:
    """Every RAMPART_* variable a workload sets is a real setting (docs/configuration.md, generated
    from the settings classes)."""
    known = set(re.findall(r"`(RAMPART_[A-Z0-9_]+)`", CONFIGURATION.read_text()))
    problems = []
    for obj in workloads(r):
        for spec in pod_specs(obj):
            for c in spec["containers"]:
                for var in c.get("env") or []:
                    if var["name"].startswith("RAMPART_") and var["name"] not in known:
                        problems.append(f"{name(obj)}: {var['name']} is no setting (docs/configuration.md)")
    return problems


ADDRESS = re.compile(
    r"^(?:(?:https?|rediss?)://(?::\$\([A-Z_]+\)@)?)?([a-z0-9][-a-z0-9.]*):(\d+)(?:[/?].*)?$"
)


def wiring_problems(r: Rendered) -> list[str]:
    """Every address a component is configured to call (URLs and host:port in its env) names a rendered
    Service port, or on EKS a managed endpoint, and the NetworkPolicies open that edge; every port a
    setting binds is a port of the container."""
    problems = []
    services = {s["metadata"]["name"]: {p["port"] for p in s["spec"]["ports"]} for s in r.of_kind("Service")}
    egress, _ingress = policy_edges(r)
    for obj in workloads(r):
        group = obj["metadata"]["labels"]["rampart.io/service"]
        for spec in pod_specs(obj):
            for c in spec["containers"]:
                ports = {p["containerPort"] for p in c.get("ports", [])}
                for var in c.get("env") or []:
                    value = str(var.get("value", ""))
                    if (
                        re.fullmatch(r"RAMPART_[A-Z_]+__(METRICS_)?PORT", var["name"])
                        and int(value) not in ports
                    ):
                        problems.append(f"{name(obj)}: {var['name']}={value} is not a container port")
                    m = ADDRESS.match(value)
                    if not m or var["name"] in ("OTEL_SERVICE_NAME",):
                        continue
                    host, port = m.group(1), int(m.group(2))
                    if host.startswith("rampart-"):
                        if port not in services.get(host, set()):
                            problems.append(
                                f"{name(obj)}: {var['name']} calls {host}:{port}, no such Service port"
                            )
                        target = host.removeprefix("rampart-")
                    elif host in ("0.0.0.0", "127.0.0.1"):
                        continue
                    else:
                        target = "vpc"  # a managed endpoint (EKS)
                    if (group, target, str(port)) not in egress:
                        problems.append(
                            f"{name(obj)}: {var['name']} calls {target}:{port}, no NetworkPolicy edge"
                        )
    return problems


# --- the rendered profiles ---------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_lint_is_clean(profile: str) -> None:
    report = lint(profile)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings and errors


@pytest.mark.parametrize("profile", PROFILES)
def test_kubernetes_validate_strict(profile: str) -> None:
    import kubernetes_validate

    unvalidated = set()
    for doc in rendered(profile).docs:
        if doc["kind"] == "RayService":
            # no schema for the RayService itself, but its pod templates are plain pods: validate them
            for spec in pod_specs(doc):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ray-group"}, "spec": spec}
                kubernetes_validate.validate(pod, "1.33.0", strict=True)
        if doc["kind"] in CUSTOM_KINDS:
            unvalidated.add(doc["kind"])
            continue
        kubernetes_validate.validate(doc, "1.33.0", strict=True)  # EKS 1.33 (terraform/modules/eks)
    assert unvalidated <= CUSTOM_KINDS


def test_custom_resources_match_published_schemas() -> None:
    """ScaledObject, TriggerAuthentication and ServiceMonitor against the schemas npm's
    @kubernetes-models packages carry (types, enums, patterns, required fields)."""
    node = shutil.which("node")
    assert node, "node is needed for the custom resources' schemas (Debian: apt-get install nodejs)"
    assert CRD_MODULES.is_dir(), f"no {CRD_MODULES}: run `make deploy-tools` (npm ci, pinned)"
    docs = [d for p in PROFILES for d in rendered(p).docs if d["kind"] in CUSTOM_KINDS]
    out = subprocess.run(
        [node, str(CRD_SCRIPT), str(CRD_MODULES)],
        input=json.dumps(docs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sum(line.startswith("valid ") for line in lines) == len(docs) - sum(
        d["kind"] == "RayService" for d in docs
    )
    assert {line.split()[1] for line in lines if line.startswith("unvalidated")} == {"ray.io/v1/RayService"}


def test_custom_resource_schemas_refuse_a_bad_object() -> None:
    node = shutil.which("node")
    assert node and CRD_MODULES.is_dir(), "run `make deploy-tools`"
    so = copy.deepcopy(rendered("eks").of_kind("ScaledObject")[0])
    so["spec"]["minReplicaCount"] = "zero"
    out = subprocess.run(
        [node, str(CRD_SCRIPT), str(CRD_MODULES)],
        input=json.dumps([so]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "minReplicaCount must be integer" in out.stdout


def test_checkov_is_clean_on_every_profile(tmp_path: Path) -> None:
    for profile in PROFILES:
        (tmp_path / f"{profile}.yaml").write_text(rendered(profile).yaml())
    report = run_checkov(tmp_path, "kubernetes")
    assert report["failed"] == [], "\n".join(report["failed"])
    # every skip is stated with its reason on the object (checkov.io/skipN: CHECK=reason)
    assert all(reason for _check, reason in report["skipped"]), report["skipped"]
    assert {check for check, _ in report["skipped"]} <= {
        "CKV_K8S_15",
        "CKV_K8S_35",
        "CKV_K8S_40",
        "CKV_K8S_43",
    }


def test_checkov_fails_a_weak_workload(tmp_path: Path) -> None:
    deployment = copy.deepcopy(next(d for d in rendered("small").docs if d["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    (tmp_path / "weak.yaml").write_text(json.dumps(deployment))
    assert run_checkov(tmp_path, "kubernetes")["failed"]


def run_checkov(path: Path, framework: str) -> dict[str, list[Any]]:
    assert CHECKOV.exists(), (
        f"no {CHECKOV}: run `make deploy-tools` (its own venv: checkov's pins clash with ours)"
    )
    out = subprocess.run(
        [str(CHECKOV), "--skip-download", "-d", str(path), "--framework", framework, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    data = json.loads(out.stdout)
    reports = data if isinstance(data, list) else [data]
    failed, skipped, passed = [], [], 0
    for rep in reports:
        results = rep.get("results", {})
        passed += rep.get("summary", {}).get("passed", 0)
        failed += [
            f"{c['check_id']} {c['resource']} {c['file_path']}" for c in results.get("failed_checks", [])
        ]
        skipped += [
            (c["check_id"], (c.get("check_result") or {}).get("suppress_comment", ""))
            for c in results.get("skipped_checks", [])
        ]
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert passed > 0, f"checkov checked nothing in {path}"
    return {"failed": failed, "skipped": skipped}


CHECKS: dict[str, Callable[[Rendered], list[str]]] = {
    "workloads": workload_problems,
    "probe targets": probe_targets_problems,
    "network": network_problems,
    "env names": env_name_problems,
    "wiring": wiring_problems,
}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("profile", PROFILES)
def test_rendered_property(profile: str, check: str) -> None:
    assert CHECKS[check](rendered(profile)) == []


def test_eks_puts_triton_only_on_gpu_spot_nodes() -> None:
    assert triton_placement_problems(rendered("eks")) == []


@pytest.mark.parametrize("profile", ["small", "medium"])
def test_small_and_medium_need_no_gpu(profile: str) -> None:
    for obj in workloads(rendered(profile)):
        for spec in pod_specs(obj):
            assert "tolerations" not in spec and "nodeSelector" not in spec, name(obj)
            for c in spec["containers"]:
                assert "nvidia.com/gpu" not in c["resources"]["limits"], name(obj)


def test_eks_profile_shape() -> None:
    """RayService with autoscaling, KEDA on the Celery queue, HPAs on gateway and retrieval, and the
    managed endpoints instead of in-cluster Redis and OpenSearch."""
    r = rendered("eks")
    components = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o for o in workloads(r)}
    assert "redis" not in components and "opensearch" not in components
    ray = components["orchestrator"]
    assert ray["kind"] == "RayService" and ray["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is True
    workers = ray["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert workers["minReplicas"] < workers["maxReplicas"]
    assert "app_builder" in ray["spec"]["serveConfigV2"]
    hpa = {h["spec"]["scaleTargetRef"]["name"] for h in r.of_kind("HorizontalPodAutoscaler")}
    assert hpa == {"rampart-gateway", "rampart-retrieval"}
    worker_so = next(
        s for s in r.of_kind("ScaledObject") if s["spec"]["scaleTargetRef"]["name"] == "rampart-worker"
    )
    trigger = worker_so["spec"]["triggers"][0]
    assert trigger["type"] == "redis" and trigger["metadata"]["enableTLS"] == "true"
    assert trigger["metadata"]["listName"] == CelerySettings().queue  # Celery's list is the queue's name
    env = {v["name"]: v for v in pod_specs(components["worker"])[0]["containers"][0]["env"]}
    assert env["RAMPART_FACTCHECK__CELERY__BROKER_URL"]["value"].startswith("rediss://:$(REDIS_PASSWORD)@")
    retrieval_env = {
        v["name"]: v.get("value") for v in pod_specs(components["retrieval"])[0]["containers"][0]["env"]
    }
    assert retrieval_env["RAMPART_OPENSEARCH__AWS_SIGV4"] == "true"
    assert retrieval_env["RAMPART_OPENSEARCH__URL"].startswith("https://")


@pytest.mark.parametrize("profile", PROFILES)
def test_no_secret_value_is_rendered_outside_secrets(profile: str) -> None:
    """Secrets are referenced (secretKeyRef, secret volumes); the only Secret objects hold generated
    tokens; the API keys and the ElastiCache token on EKS are never created by the chart."""
    r = rendered(profile)
    made = {s["metadata"]["name"] for s in r.of_kind("Secret")}
    assert "rampart-api-keys" not in made
    if profile == "eks":
        assert "rampart-redis" not in made
    for obj in workloads(r):
        for spec in pod_specs(obj):
            for c in spec["containers"]:
                for var in c.get("env") or []:
                    if re.search(r"(TOKEN|PASSWORD|API_KEY|PEPPER)$", var["name"]):
                        assert "valueFrom" in var, f"{name(obj)}: {var['name']} has a literal value"


# --- each check fails when its property breaks ---------------------------------------------------


def broken(profile: str, change: Callable[[Rendered], None]) -> Rendered:
    r = rendered(profile)
    copy_ = Rendered(r.profile, copy.deepcopy(r.values), copy.deepcopy(r.docs))
    change(copy_)
    return copy_


def first_container(r: Rendered, component: str) -> dict[str, Any]:
    obj = next(o for o in workloads(r) if o["metadata"]["labels"]["app.kubernetes.io/component"] == component)
    container: dict[str, Any] = pod_specs(obj)[0]["containers"][0]
    return container


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("probe", lambda r: first_container(r, "gateway").pop("readinessProbe")),
        ("limits", lambda r: first_container(r, "worker")["resources"].pop("limits")),
        (
            "read-only root",
            lambda r: first_container(r, "ingest")["securityContext"].update(readOnlyRootFilesystem=False),
        ),
        ("capabilities", lambda r: first_container(r, "retrieval")["securityContext"].pop("capabilities")),
        (
            "two handlers",
            lambda r: first_container(r, "gateway")["livenessProbe"].update(tcpSocket={"port": 8080}),
        ),
    ],
)
def test_workload_check_breaks(what: str, change: Callable[[Rendered], None]) -> None:
    assert workload_problems(broken("small", change)), what


def test_probe_target_check_breaks() -> None:
    def change(r: Rendered) -> None:
        first_container(r, "gateway")["readinessProbe"]["httpGet"]["path"] = "/healthz"

    assert probe_targets_problems(broken("small", change))


def test_triton_check_breaks() -> None:
    def spot_to_ondemand(r: Rendered) -> None:
        obj = next(o for o in workloads(r) if o["metadata"]["name"] == "rampart-triton")
        pod_specs(obj)[0]["nodeSelector"]["eks.amazonaws.com/capacityType"] = "ON_DEMAND"

    def gateway_on_gpu(r: Rendered) -> None:
        obj = next(o for o in workloads(r) if o["metadata"]["name"] == "rampart-gateway")
        pod_specs(obj)[0]["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ]

    assert triton_placement_problems(broken("eks", spot_to_ondemand))
    assert triton_placement_problems(broken("eks", gateway_on_gpu))


def test_network_check_breaks() -> None:
    def extra_egress(r: Rendered) -> None:  # the gateway may now call retrieval directly
        policy = next(p for p in r.of_kind("NetworkPolicy") if p["metadata"]["name"] == "rampart-gateway")
        policy["spec"]["egress"].append(
            {
                "to": [{"podSelector": {"matchLabels": {"rampart.io/service": "retrieval"}}}],
                "ports": [{"port": 50051}],
            }
        )

    def one_sided(r: Rendered) -> None:  # retrieval no longer admits the ingest service
        policy = next(p for p in r.of_kind("NetworkPolicy") if p["metadata"]["name"] == "rampart-retrieval")
        policy["spec"]["ingress"] = [
            rule
            for rule in policy["spec"]["ingress"]
            if rule["from"][0].get("podSelector", {}).get("matchLabels", {}).get("rampart.io/service")
            != "ingest"
        ]

    def no_deny(r: Rendered) -> None:
        r.docs[:] = [
            d for d in r.docs if not (d["kind"] == "NetworkPolicy" and d["spec"]["podSelector"] == {})
        ]

    for change in (extra_egress, one_sided, no_deny):
        assert network_problems(broken("small", change)), change.__name__


def test_documented_edges_are_read_from_the_table() -> None:
    text = "## Network edges\n| from | to | port | profiles | why |\n|---|---|---|---|---|\n"
    text += "| a | b | 80 | small | x |\n| * | dns | 53 | small, eks | y |\n| c | d | any | eks | z |\n## Next\n| e | f | 1 | small | w |\n"
    assert documented_edges("small", {"a", "b"}, text) == {
        ("a", "b", "80"),
        ("a", "dns", "53"),
        ("b", "dns", "53"),
    }
    assert documented_edges("eks", {"a"}, text) == {("a", "dns", "53"), ("c", "d", "any")}


def test_wiring_check_breaks() -> None:
    def wrong_port(r: Rendered) -> None:
        env = first_container(r, "gateway")["env"]
        var = next(v for v in env if v["name"] == "RAMPART_REMOTE__INGEST_ADDRESS")
        var["value"] = "rampart-ingest:50051"

    def unopened(r: Rendered) -> None:  # the worker is pointed at the retrieval service it may not reach
        first_container(r, "worker")["env"].append(
            {"name": "RAMPART_REMOTE__RETRIEVAL_ADDRESS", "value": "rampart-retrieval:50051"}
        )

    def bind_elsewhere(r: Rendered) -> None:
        env = first_container(r, "retrieval")["env"]
        next(v for v in env if v["name"] == "RAMPART_RETRIEVAL_SERVICE__PORT")["value"] = "50061"

    for change in (wrong_port, unopened, bind_elsewhere):
        assert wiring_problems(broken("small", change)), change.__name__


def test_env_name_check_breaks() -> None:
    def typo(r: Rendered) -> None:
        first_container(r, "gateway")["env"].append({"name": "RAMPART_GATEWAY_PORT", "value": "8080"})

    assert env_name_problems(broken("small", typo))


def test_render_script_writes_every_profile(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.deploy_render", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for profile in PROFILES:
        text = (tmp_path / f"{profile}.yaml").read_text()
        assert text.startswith("---\n") and "kind: NetworkPolicy" in text
