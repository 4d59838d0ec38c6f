"""The Helm chart, rendered offline for every profile and checked as a cluster would receive it.

Each property has a checker that returns what is wrong (an empty list when all is well); every test
runs its checker on the real rendered profiles, and the ``*_breaks`` tests feed the same checker a
copy with the property removed, so a check that can no longer fail is itself a failure. Tools:
helm-python-sdk (lint, schema, render), kubernetes-validate --strict (built-in kinds), the published
schemas of KEDA and prometheus-operator from npm (their CRs), checkov. KubeRay's RayService has no
published schema on PyPI or npm: it is checked only by the structural tests here (deploy/helm/README.md).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature

from services.common.errors import RampartError
from services.common.redis_server import ROLE_RULES, RedisAuth
from services.common.settings import RampartSettings
from services.common.settings_env import unknown_variables
from services.factcheck.config import CelerySettings
from tests import deploy_podman as dp
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
    r"^(?:(?:https?|rediss?)://(?:(?:\$\([A-Z_]+\))?:\$\([A-Z_]+\)@)?)?([a-z0-9][-a-z0-9.]*):(\d+)(?:[/?].*)?$"
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
                        re.fullmatch(r"RAMPART_[A-Z_]+__(METRICS_|HEALTH_)?PORT", var["name"])
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


# The gRPC links the chart must protect with mTLS (docs/security.md): the checkers below derive the
# pairs from the rendered env, and the tests compare them with this list so a pair cannot drop out.
GRPC_PAIRS = {("gateway", "ingest"), ("orchestrator", "retrieval"), ("ingest", "retrieval")}
TLS_VARS = ("RAMPART_REMOTE__TLS__CA_FILE", "RAMPART_REMOTE__TLS__CERT_FILE", "RAMPART_REMOTE__TLS__KEY_FILE")


def component(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"]["app.kubernetes.io/component"])


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in container.get("env") or []}


def grpc_servers(r: Rendered) -> dict[str, tuple[str, int]]:
    """component -> (its Service, its gRPC port) for every Rampart gRPC server (it binds a
    ``RAMPART_<SERVICE>__PORT`` that its Service names with appProtocol grpc)."""
    grpc_ports = {
        (s["metadata"]["name"], p["port"])
        for s in r.of_kind("Service")
        for p in s["spec"]["ports"]
        if p.get("appProtocol") == "grpc"
    }
    servers = {}
    for obj in workloads(r):
        for name, var in env_of(pod_specs(obj)[0]["containers"][0]).items():
            if re.fullmatch(r"RAMPART_[A-Z_]+_SERVICE__PORT", name):
                service = f"rampart-{obj['metadata']['labels']['rampart.io/service']}"
                if (service, int(var["value"])) in grpc_ports:
                    servers[component(obj)] = (service, int(var["value"]))
    return servers


def grpc_pairs(r: Rendered) -> dict[tuple[str, str], str]:
    """(client, server) -> the host the client dials, for every env address naming a server's gRPC
    Service port."""
    servers = {address: name for name, address in grpc_servers(r).items()}
    pairs = {}
    for obj in workloads(r):
        for var in env_of(pod_specs(obj)[0]["containers"][0]).values():
            m = ADDRESS.match(str(var.get("value", "")))
            if m and (m.group(1), int(m.group(2))) in servers:
                pairs[(component(obj), servers[(m.group(1), int(m.group(2)))])] = m.group(1)
    return pairs


def tls_mount_problems(obj: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """mTLS on, and each file RAMPART_REMOTE__TLS__* names is a key of the component's own certificate
    Secret, mounted read-only."""
    problems = []
    c = spec["containers"][0]
    env = env_of(c)
    if env.get("RAMPART_REMOTE__TLS__ENABLED", {}).get("value") != "true":
        return [f"{name(obj)}: RAMPART_REMOTE__TLS__ENABLED is not true"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    want = f"rampart-{component(obj)}-tls"
    for var in TLS_VARS:
        path = Path(str(env.get(var, {}).get("value", "")))
        mount = next((m for m in c.get("volumeMounts", []) if Path(m["mountPath"]) == path.parent), None)
        if mount is None:
            problems.append(f"{name(obj)}: {var}={path} is in no mounted volume")
            continue
        secret = volumes.get(mount["name"], {}).get("secret") or {}
        keys = {i["path"]: i["key"] for i in secret.get("items", [])}
        if secret.get("secretName") != want or path.name not in keys:
            problems.append(f"{name(obj)}: {var}={path} is not a key of Secret {want}")
        if mount.get("readOnly") is not True:
            problems.append(f"{name(obj)}: {mount['mountPath']} is writable")
    return problems


def certificate_problems(r: Rendered, pairs: dict[tuple[str, str], str]) -> list[str]:
    """The generated certificates: the server's is valid (SAN) for the host its client dials, both are
    signed by the CA both trust, for server and client use."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    secrets = {s["metadata"]["name"]: s["data"] for s in r.of_kind("Secret")}

    def pem(comp: str, key: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate(base64.b64decode(secrets[f"rampart-{comp}-tls"][key]))

    problems = []
    for (client, server), host in sorted(pairs.items()):
        cert, ca = pem(server, "tls.crt"), pem(client, "ca.crt")
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if host not in sans.get_values_for_type(x509.DNSName):
            problems.append(f"{server}'s certificate is not valid for {host!r}, the name {client} dials")
        for comp, c in ((server, cert), (client, pem(client, "tls.crt"))):
            try:
                c.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                problems.append(f"{comp}'s certificate is not signed by the CA {client} trusts")
            usage = c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            if not {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(usage):
                problems.append(f"{comp}'s certificate is not for both server and client use")
    return problems


def tls_problems(r: Rendered) -> list[str]:
    """Every gRPC client and server has mTLS on with its own certificate (tls_mount_problems), and the
    generated certificates fit the names the clients dial (certificate_problems)."""
    pairs = grpc_pairs(r)
    ends = {c for pair in pairs for c in pair}
    problems = [f"no mTLS to check: no gRPC pairs in {r.profile}"] if not pairs else []
    for obj in workloads(r):
        if component(obj) in ends:
            for spec in pod_specs(obj):
                problems += tls_mount_problems(obj, spec)
    if any(s["metadata"]["name"].endswith("-tls") for s in r.of_kind("Secret")):
        problems += certificate_problems(r, pairs)
    return problems


def cert_identity(r: Rendered, comp: str) -> str | None:
    """The CN of ``comp``'s generated certificate (what a server's allowed_callers must name)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    secret = next((s for s in r.of_kind("Secret") if s["metadata"]["name"] == f"rampart-{comp}-tls"), None)
    if secret is None:
        return None
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def caller_problems(r: Rendered) -> list[str]:
    """With mTLS on, each gRPC server admits exactly the components that dial it (grpc_pairs), named as
    their certificates' CN, and the services' own defaults (bare component names) are that same graph."""
    pairs = grpc_pairs(r)
    defaults = RampartSettings.model_fields
    problems = []
    for server, _ in grpc_servers(r).items():
        obj = next(o for o in workloads(r) if component(o) == server)
        env = env_of(pod_specs(obj)[0]["containers"][0])
        tls = env.get("RAMPART_REMOTE__TLS__ENABLED", {}).get("value") == "true"
        var = f"RAMPART_{server.upper()}_SERVICE__ALLOWED_CALLERS"
        callers = sorted(client for client, srv in pairs if srv == server)
        default = defaults[f"{server}_service"].default.allowed_callers
        if sorted(default) != callers:
            problems.append(f"{server}_service.allowed_callers defaults to {default}, but {callers} dial it")
        if not tls:
            continue
        if var not in env:
            problems.append(f"{name(obj)}: mTLS on but no {var}")
            continue
        got = sorted(json.loads(env[var]["value"]))
        if got != sorted(f"rampart-{c}" for c in callers):
            problems.append(f"{name(obj)}: {var}={got}, expected the CNs of {callers}")
        # the per-method lists (retrieval's read/write sides): the settings' defaults, as chart CNs
        service_defaults = defaults[f"{server}_service"].default
        for field in ("read_callers", "write_callers"):
            role_default = getattr(service_defaults, field, None)
            if role_default is None:
                continue
            role_var = f"RAMPART_{server.upper()}_SERVICE__{field.upper()}"
            role_got = sorted(json.loads(env[role_var]["value"])) if role_var in env else None
            if role_got != sorted(f"rampart-{c}" for c in role_default):
                problems.append(f"{name(obj)}: {role_var}={role_got}, expected the CNs of {role_default}")
        for comp in {c for pair in pairs for c in pair}:
            cn = cert_identity(r, comp)
            if cn is not None and (cn in got) != (comp in callers):
                problems.append(
                    f"{server} {'admits' if cn in got else 'refuses'} {comp}'s certificate (CN {cn})"
                )
    return problems


TRITON_TLS_FLAGS = ("--grpc-use-ssl=true", "--grpc-use-ssl-mutual=true")
TRITON_TLS_FILES = {
    "--grpc-server-cert": "tls.crt",
    "--grpc-server-key": "tls.key",
    "--grpc-root-cert": "ca.crt",
}


def triton_tls_problems(r: Rendered) -> list[str]:
    """With mTLS on, every Triton serves gRPC on mutual TLS from its own mounted certificate, valid for
    the host the orchestrator dials and signed by the CA the orchestrator trusts, and the orchestrator's
    rerank.triton.tls names its own mounted files; with it off, neither."""
    from cryptography import x509

    problems = []
    orch = next(o for o in workloads(r) if component(o) == "orchestrator")
    oenv = env_of(pod_specs(orch)[0]["containers"][0])
    tls = oenv.get("RAMPART_REMOTE__TLS__ENABLED", {}).get("value") == "true"
    client = {k: v.get("value") for k, v in oenv.items() if k.startswith("RAMPART_RERANK__TRITON__TLS__")}
    mount = r.values["tls"]["mountPath"]
    want_client = {
        "RAMPART_RERANK__TRITON__TLS__ENABLED": "true",
        "RAMPART_RERANK__TRITON__TLS__CA_FILE": f"{mount}/ca.crt",
        "RAMPART_RERANK__TRITON__TLS__CERT_FILE": f"{mount}/tls.crt",
        "RAMPART_RERANK__TRITON__TLS__KEY_FILE": f"{mount}/tls.key",
    }
    if client != (want_client if tls else {}):
        problems.append(f"orchestrator's rerank.triton.tls {client} with mTLS {'on' if tls else 'off'}")
    host = ADDRESS.match(oenv["RAMPART_RERANK__TRITON__URL"]["value"])
    secrets = {x["metadata"]["name"]: x["data"] for x in r.of_kind("Secret")}
    for obj in (o for o in workloads(r) if component(o).startswith("triton")):
        spec = pod_specs(obj)[0]
        args = spec["containers"][0].get("args", [])
        flags = dict(a.split("=", 1) for a in args if a.startswith(("--grpc-use-ssl", *TRITON_TLS_FILES)))
        if not tls:
            if flags:
                problems.append(f"{name(obj)}: TLS flags {flags} with mTLS off")
            continue
        if not all(f in args for f in TRITON_TLS_FLAGS):
            problems.append(f"{name(obj)}: gRPC not on mutual TLS: {args}")
        if {k: flags.get(k) for k in TRITON_TLS_FILES} != {
            k: f"{mount}/{v}" for k, v in TRITON_TLS_FILES.items()
        }:
            problems.append(f"{name(obj)}: TLS files {flags} are not its mounted certificate's")
        volume = next((v for v in spec.get("volumes", []) if v["name"] == "tls"), {})
        if volume.get("secret", {}).get("secretName") != f"rampart-{component(obj)}-tls":
            problems.append(f"{name(obj)}: mounts no certificate of its own ({volume})")
        data = secrets.get(f"rampart-{component(obj)}-tls")
        if data is not None and host is not None:
            cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
            ca = x509.load_pem_x509_certificate(
                base64.b64decode(secrets["rampart-orchestrator-tls"]["ca.crt"])
            )
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            if host.group(1) not in sans.get_values_for_type(x509.DNSName):
                problems.append(f"{name(obj)}'s certificate is not valid for {host.group(1)!r}")
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, InvalidSignature):
                problems.append(f"{name(obj)}'s certificate is not signed by the CA the orchestrator trusts")
    return problems


TRITON_KEY_VAR = "RAMPART_RERANK__TRITON__KEY"


def triton_key_problems(r: Rendered) -> list[str]:
    """Every Triton requires the caller key on every API but health (the flags of
    services/rerank/triton_key.py, expanded from its own env var), and every component that reranks on
    Triton sends it: both read the key from the same generated Secret, with mTLS on or off."""
    from services.rerank.triton_key import restricted_flags

    problems = []
    secret = r.values["secrets"]["tritonKey"]
    want_ref = {"name": secret["name"], "key": secret["key"], "optional": False}
    flags = restricted_flags(f"$({TRITON_KEY_VAR})")
    for obj in workloads(r):
        for container in pod_specs(obj)[0]["containers"]:
            env = env_of(container)
            is_triton = component(obj).startswith("triton")
            reranks = env.get("RAMPART_RERANK__BACKEND", {}).get("value") == "triton"
            if not (is_triton or reranks):
                continue
            ref = env.get(TRITON_KEY_VAR, {}).get("valueFrom", {}).get("secretKeyRef")
            if ref != want_ref:
                problems.append(f"{name(obj)}: {TRITON_KEY_VAR} is {env.get(TRITON_KEY_VAR)}, not {want_ref}")
            args = container.get("args", [])
            if is_triton and [a for a in args if "restricted" in a] != flags:
                problems.append(f"{name(obj)}: restricted-API flags {args} are not {flags}")
    return problems


def redis_tls_problems(r: Rendered) -> list[str]:
    """redis.tls.enabled: the in-cluster Redis serves TLS only (the stack's RedisTls.server_args, with
    its own mounted certificate), its probe's redis-cli speaks TLS checking the CA, and every Redis URL
    is rediss:// checking the CA file its component mounts; off: no TLS argument, no rediss:// to it."""
    from services.common.redis_server import RedisTls

    on = bool(r.values.get("redis", {}).get("tls", {}).get("enabled"))
    redis = [o for o in workloads(r) if component(o) == "redis"]
    if not redis:
        return ["redis.tls.enabled without the in-cluster Redis"] if on else []
    mount = Path(r.values["tls"]["mountPath"])
    tls = RedisTls(mount / "tls.crt", mount / "tls.key", mount / "ca.crt")
    c = pod_specs(redis[0])[0]["containers"][0]
    args, problems = c.get("args", []), []
    server = tls.server_args(6379)
    if (args[-len(server) :] == server) != on:
        problems.append(f"redis args {args} with redis.tls.enabled={on}")
    probe_tls = env_of(c).get("REDISCLI_TLS_ARGS", {}).get("value")
    if on and probe_tls != f"--tls --cacert {mount}/ca.crt":
        problems.append(f"the probe's redis-cli does not check the CA: {probe_tls!r}")
    for obj in workloads(r):
        spec = pod_specs(obj)[0]
        env = env_of(spec["containers"][0])
        volume = next((v for v in spec.get("volumes", []) if v["name"] == "tls"), {})
        own = volume.get("secret", {}).get("secretName") == f"rampart-{component(obj)}-tls"
        if on and component(obj) == "redis" and not own:
            problems.append("redis mounts no certificate of its own")
        for var, value in ((k, str(v.get("value", ""))) for k, v in env.items()):
            if "@rampart-redis:" not in value:
                continue
            want = f"ssl_cert_reqs=required&ssl_ca_certs={mount}/ca.crt"
            if on and (not value.startswith("rediss://") or not value.endswith(want) or not own):
                problems.append(f"{name(obj)}: {var}={value} does not check the mounted CA over TLS")
            if not on and value.startswith("rediss://"):
                problems.append(f"{name(obj)}: {var} is rediss:// with redis.tls off")
    return problems


def health_probe_problems(r: Rendered) -> list[str]:
    """gRPC servers: with mTLS on, the kubelet (no TLS, no token) probes the plaintext health port the
    server binds (a container port); with it off, the main port, and no health port is opened."""
    problems = []
    servers = grpc_servers(r)
    for obj in workloads(r):
        if component(obj) not in servers:
            continue
        c = pod_specs(obj)[0]["containers"][0]
        env = env_of(c)
        tls = env.get("RAMPART_REMOTE__TLS__ENABLED", {}).get("value") == "true"
        health = [v for k, v in env.items() if k.endswith("__HEALTH_PORT")]
        ports = {p["containerPort"] for p in c.get("ports", [])}
        want = int(health[0]["value"]) if tls and health else servers[component(obj)][1]
        if tls and not health:
            problems.append(f"{name(obj)}: mTLS on but no plaintext health port for the probes")
        if not tls and health:
            problems.append(f"{name(obj)}: a health port without mTLS (the main port serves health)")
        if want not in ports:
            problems.append(f"{name(obj)}: probe port {want} is not a container port")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            got = (c.get(probe) or {}).get("grpc", {}).get("port")
            if probe in c and got != want:
                problems.append(f"{name(obj)}: {probe} on port {got}, expected {want}")
    return problems


def acl_lines(r: Rendered) -> list[str]:
    acl = next(s for s in r.of_kind("Secret") if s["metadata"]["name"] == "rampart-redis-acl")
    return base64.b64decode(acl["data"]["users.acl"]).decode().splitlines()


def redis_client_problems(r: Rendered) -> list[str]:
    """Every Redis URL names its component's ACL user: $(REDIS_USERNAME) and $(REDIS_PASSWORD), both
    defined before the URL, the password from the Secret of the role redisUsers gives it."""
    users = r.values["redisUsers"]
    secrets = r.values["secrets"]
    problems = []
    for obj in workloads(r):
        for spec in pod_specs(obj):
            order = [v["name"] for v in spec["containers"][0].get("env") or []]
            env = env_of(spec["containers"][0])
            urls = [
                k for k, v in env.items() if str(v.get("value", "")).startswith(("redis://", "rediss://"))
            ]
            if not urls:
                continue
            role = env.get("REDIS_USERNAME", {}).get("value")
            if role not in users:
                problems.append(f"{name(obj)}: Redis URLs but REDIS_USERNAME {role!r} is no redisUsers role")
                continue
            ref = env.get("REDIS_PASSWORD", {}).get("valueFrom", {}).get("secretKeyRef", {})
            if ref.get("name") != secrets[users[role]["secret"]]["name"]:
                problems.append(f"{name(obj)}: REDIS_PASSWORD is not from {role}'s Secret ({ref})")
            for url in urls:
                value = env[url]["value"]
                if "$(REDIS_USERNAME):$(REDIS_PASSWORD)@" not in value:
                    problems.append(f"{name(obj)}: {url} does not log in as $(REDIS_USERNAME)")
                if max(order.index("REDIS_USERNAME"), order.index("REDIS_PASSWORD")) > order.index(url):
                    problems.append(f"{name(obj)}: {url} uses a variable defined after it")
    return problems


def redis_acl_problems(r: Rendered) -> list[str]:
    """The in-cluster Redis loads the chart's aclfile (no requirepass): the default user off, every
    role's rules as redisUsers gives them, each client's role on with the SHA-256 of its own Secret's
    password; its readiness probe logs in as the probe user."""
    redis = [o for o in workloads(r) if component(o) == "redis"]
    if not redis:
        return []
    c = pod_specs(redis[0])[0]["containers"][0]
    args = c.get("args", [])
    problems = [] if "--aclfile" in args and "--requirepass" not in args else [f"redis args {args}"]
    lines = acl_lines(r)
    if lines[0] != "user default off resetkeys resetchannels -@all":
        problems.append(f"the default user is not off: {lines[0]!r}")
    passwords = dp.rendered_secrets(r)
    on = {}
    for role, user in r.values["redisUsers"].items():
        line = next((x for x in lines if x.split()[:2] == ["user", role]), "")
        if not line.endswith(" " + user["rules"]):
            problems.append(f"user {role}: {line!r} does not end with its rules {user['rules']!r}")
        s = r.values["secrets"][user["secret"]]
        if line.split()[2:3] == ["on"]:
            on[role] = passwords[s["name"]][s["key"]]
            if line.split()[3] != "#" + hashlib.sha256(on[role].encode()).hexdigest():
                problems.append(f"user {role}: the hash is not of {s['name']}'s password")
    for obj in workloads(r):
        role = env_of(pod_specs(obj)[0]["containers"][0]).get("REDIS_USERNAME", {}).get("value")
        if role is not None and role not in on:
            problems.append(f"{name(obj)} logs in as {role}, which is off in the aclfile")
    probe = " ".join(c["readinessProbe"].get("exec", {}).get("command", []))
    if "--user probe" not in probe or env_of(c).get("REDISCLI_AUTH", {}).get("valueFrom") is None:
        problems.append(f"redis readiness probe does not log in as probe: {probe}")
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
    "mTLS": tls_problems,
    "grpc callers": caller_problems,
    "triton tls": triton_tls_problems,
    "triton key": triton_key_problems,
    "health probes": health_probe_problems,
    "redis clients": redis_client_problems,
    "redis acl": redis_acl_problems,
    "redis tls": redis_tls_problems,
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
    assert env["RAMPART_FACTCHECK__CELERY__BROKER_URL"]["value"].startswith(
        "rediss://$(REDIS_USERNAME):$(REDIS_PASSWORD)@"
    )
    assert env["REDIS_USERNAME"]["value"] == "worker"  # an ElastiCache RBAC user (terraform/modules/redis)
    assert trigger["metadata"]["usernameFromEnv"] == "REDIS_USERNAME"  # KEDA reads as the workers' user
    retrieval_env = {
        v["name"]: v.get("value") for v in pod_specs(components["retrieval"])[0]["containers"][0]["env"]
    }
    assert retrieval_env["RAMPART_OPENSEARCH__AWS_SIGV4"] == "true"
    assert retrieval_env["RAMPART_OPENSEARCH__URL"].startswith("https://")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_setting_variable_the_chart_sets_is_a_setting(profile: str) -> None:
    """A Rampart process refuses an unknown RAMPART_<GROUP>__<FIELD> at start-up
    (services/common/settings_env.py): a misspelt one in the chart would crash-loop the pod, so each
    one the chart renders must name a field."""
    names = {
        var["name"]: "1"
        for obj in workloads(rendered(profile))
        for spec in pod_specs(obj)
        for c in spec["containers"]
        for var in c.get("env") or []
    }
    assert sum("__" in n for n in names) > 20
    assert unknown_variables(RampartSettings, names) == []


@pytest.mark.parametrize("profile", PROFILES)
def test_no_secret_value_is_rendered_outside_secrets(profile: str) -> None:
    """Secrets are referenced (secretKeyRef, secret volumes): no generated value (token, password,
    private key) appears in any other object; the Secret objects are the generated ones, only those some
    enabled component reads; the API keys and the ElastiCache users' passwords on EKS are never created
    by the chart."""
    r = rendered(profile)
    made = {s["metadata"]["name"] for s in r.of_kind("Secret")}
    assert "rampart-api-keys" not in made
    tritons = ("triton", "triton-ondemand") if profile == "eks" else ("triton",)
    certificates = {f"rampart-{c}-tls" for c in ("gateway", "orchestrator", "retrieval", "ingest", *tritons)}
    tokens = {"rampart-internal-token", "rampart-ray-token", "rampart-key-pepper", "rampart-triton-key"}
    redis = {f"rampart-redis-{x}" for x in ("gateway", "orchestrator", "worker", "probe", "acl")}
    assert made == tokens | certificates | {"rampart-tls-ca"} | (set() if profile == "eks" else redis)
    others = json.dumps([d for d in r.docs if d["kind"] != "Secret"])
    for secret in r.of_kind("Secret"):
        for key, value in secret["data"].items():
            plain = base64.b64decode(value).decode()
            for text in {value, plain, *plain.splitlines()[1:-1]} - {""}:  # PEM: each base64 line too
                assert text not in others, f"{secret['metadata']['name']}/{key} is rendered outside it"
    for obj in workloads(r):
        for spec in pod_specs(obj):
            for c in spec["containers"]:
                for var in c.get("env") or []:
                    if re.search(r"(TOKEN|PASSWORD|KEY|PEPPER|AUTH)$", var["name"]):
                        assert "valueFrom" in var, f"{name(obj)}: {var['name']} has a literal value"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_grpc_link_is_a_protected_pair(profile: str) -> None:
    """The clients and servers the rendered env wires are exactly the three links of the architecture,
    so the mTLS check above covers each (and a new link has to be added here, and protected)."""
    assert set(grpc_pairs(rendered(profile))) == GRPC_PAIRS


@pytest.mark.parametrize("profile", PROFILES)
def test_redis_users_have_the_rules_of_the_code(profile: str) -> None:
    """One source of truth: the chart's roles are services/common/redis_server.ROLE_RULES (the stack's),
    and only the chart's own probe user is added."""
    users = rendered(profile).values["redisUsers"]
    assert {role: u["rules"] for role, u in users.items() if role != "probe"} == ROLE_RULES
    assert users["probe"]["rules"] == "resetkeys resetchannels -@all +ping"


def test_the_aclfile_is_what_the_stack_writes() -> None:
    """The rendered aclfile is RedisAuth.acl_text for the rendered passwords (the roles some component
    logs in as), plus the probe user; a role no enabled component uses is switched off, without a
    password."""
    r = rendered("small")
    secrets = dp.rendered_secrets(r)
    used = {"gateway", "orchestrator", "worker"}
    passwords = {role: secrets[f"rampart-redis-{role}"]["password"] for role in used}
    expected = RedisAuth(passwords).acl_text().splitlines()
    assert [x for x in acl_lines(r) if x.split()[1] != "probe"] == expected
    unused = render("small", {"components": {"gateway": {"redisUser": None}}})
    lines = acl_lines(unused)
    assert f"user gateway off {unused.values['redisUsers']['gateway']['rules']}" in lines
    assert "rampart-redis-gateway" not in {s["metadata"]["name"] for s in unused.of_kind("Secret")}


@pytest.mark.parametrize("profile", PROFILES)
def test_the_gateway_hashes_api_keys_with_a_pepper_from_a_secret(profile: str, tmp_path: Path) -> None:
    """RAMPART_KEY_PEPPER reaches the gateway from the keyPepper Secret (generated, 48 random
    characters; values hold only its name); keys made with it authenticate, keys made without it (or
    with another release's) do not: a leaked key file alone is not enough."""
    from services.common.types import Principal
    from services.gateway.api_keys import ApiKeyStore

    r = rendered(profile)
    ref = env_var(r, "gateway", "RAMPART_KEY_PEPPER")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rampart-key-pepper", "key": "pepper", "optional": False}
    assert set(r.values["secrets"]["keyPepper"]) == {"name", "key", "generate"}  # no value in values
    pepper = dp.rendered_secrets(r)["rampart-key-pepper"]["pepper"]
    assert (
        len(pepper) == 48 and pepper != dp.rendered_secrets(render(profile))["rampart-key-pepper"]["pepper"]
    )
    others = [
        c
        for c in ("orchestrator", "retrieval", "ingest", "worker")
        if c in {component(o) for o in workloads(r)}
    ]
    assert all("RAMPART_KEY_PEPPER" not in env_of(first_container(r, c)) for c in others)
    key, _ = ApiKeyStore(tmp_path / "keys.json", pepper=pepper).create(Principal(tenant="acme", user="ops"))
    assert ApiKeyStore(tmp_path / "keys.json", pepper=pepper).authenticate(key)[1].user == "ops"
    for wrong in (None, "another-release-pepper"):
        with pytest.raises(RampartError):
            ApiKeyStore(tmp_path / "keys.json", pepper=wrong).authenticate(key)


def test_an_existing_key_pepper_is_referenced_not_made() -> None:
    """secrets.keyPepper.generate=false (a pepper kept elsewhere, or the old default for keys made
    before the chart set one): the gateway still reads it, the chart renders no Secret for it."""
    r = render("small", {"secrets": {"keyPepper": {"generate": False, "name": "corp-pepper"}}})
    assert "corp-pepper" not in {x["metadata"]["name"] for x in r.of_kind("Secret")}
    assert env_var(r, "gateway", "RAMPART_KEY_PEPPER")["valueFrom"]["secretKeyRef"]["name"] == "corp-pepper"


def test_pods_roll_when_their_generated_file_changes() -> None:
    """checksum/tls is the hash of the very certificate the Secret holds (one computation per render:
    rampart.generated), so renewing it rolls the pods that read it at start; likewise the aclfile."""
    r = rendered("small")
    data = {s["metadata"]["name"]: s["data"] for s in r.of_kind("Secret")}
    for obj in workloads(r):
        annotations = obj["spec"]["template"]["metadata"].get("annotations", {})
        if component(obj) in {"gateway", "orchestrator", "retrieval", "ingest"}:
            crt = data[f"rampart-{component(obj)}-tls"]["tls.crt"]
            assert annotations["checksum/tls"] == hashlib.sha256(crt.encode()).hexdigest(), name(obj)
    redis = next(o for o in workloads(r) if component(o) == "redis")
    acl = data["rampart-redis-acl"]["users.acl"]
    assert redis["spec"]["template"]["metadata"]["annotations"]["checksum/secret-acl"] == (
        hashlib.sha256(acl.encode()).hexdigest()
    )


def test_tls_off_leaves_the_token_and_probes_the_main_ports() -> None:
    """tls.enabled=false: no certificate, no RAMPART_REMOTE__TLS__*, no health port; the probes go to
    the gRPC ports (health answers there without the token), which the token still guards."""
    r = render("small", {"tls": {"enabled": False}})
    assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"].endswith(("-tls", "-tls-ca"))]
    for obj in workloads(r):
        c = pod_specs(obj)[0]["containers"][0]
        assert not [k for k in env_of(c) if k.startswith("RAMPART_REMOTE__TLS__")], name(obj)
        assert "grpc-health" not in {p["name"] for p in c["ports"]}, name(obj)
    assert health_probe_problems(r) == []
    assert tls_problems(r)  # the mTLS check knows it is off
    servers = {component(o): env_of(pod_specs(o)[0]["containers"][0]) for o in workloads(r)}
    assert all("RAMPART_REMOTE__INTERNAL_TOKEN" in servers[c] for c in ("retrieval", "ingest"))


def test_cert_manager_issues_the_secrets_the_pods_mount() -> None:
    """tls.source=certManager: a Certificate per mTLS component, into the Secret its pods mount, for
    its Service's names, server and client use, from the configured CA issuer; the chart generates no
    certificate of its own."""
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    r = render("small", {"tls": {"source": "certManager", "certManager": {"issuerRef": issuer}}})
    certificates = {c["metadata"]["name"]: c["spec"] for c in r.of_kind("Certificate")}
    assert set(certificates) == {
        f"rampart-{c}-tls" for c in ("gateway", "orchestrator", "retrieval", "ingest", "triton")
    }
    for secret_name, spec in certificates.items():
        assert spec["secretName"] == secret_name and spec["issuerRef"] == issuer
        assert {"server auth", "client auth"} <= set(spec["usages"])
        assert spec["privateKey"]["rotationPolicy"] == "Always"
    assert "rampart-retrieval" in certificates["rampart-retrieval-tls"]["dnsNames"]
    assert "rampart-retrieval.rampart.svc.cluster.local" in certificates["rampart-retrieval-tls"]["dnsNames"]
    assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"].endswith(("-tls", "-tls-ca"))]
    assert tls_problems(r) == []  # the mounts and env are the same as with generated certificates
    assert triton_tls_problems(r) == []
    existing = render("small", {"tls": {"source": "existing"}})
    assert not existing.of_kind("Certificate") and tls_problems(existing) == []
    assert not [s for s in existing.of_kind("Secret") if s["metadata"]["name"].endswith("-tls")]


def test_the_rendered_certificates_make_an_mtls_handshake(tmp_path: Path) -> None:
    """The chart's certificates (Helm's genSignedCertWithKey, ECDSA) with the services' own TLS code:
    retrieval's certificate serves, the orchestrator's is accepted as a client for the name it dials; a
    client without a certificate, or with one of another release's CA, is refused at the handshake."""
    import grpc
    from grpc_health.v1 import health, health_pb2_grpc

    from services.common.grpc_client import check_ready, open_channel
    from services.common.service_auth import ServiceAuth, TlsMaterial

    def material(r: Rendered, comp: str) -> TlsMaterial:
        s = dp.rendered_secrets(r)[f"rampart-{comp}-tls"]
        return TlsMaterial(
            s["ca.crt"].encode(), s["tls.crt"].encode(), s["tls.key"].encode(), "rampart-retrieval"
        )

    r = rendered("small")
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    credentials = ServiceAuth(tls=material(r, "retrieval")).server_credentials()
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        address = f"127.0.0.1:{port}"
        assert check_ready(
            open_channel(address, auth=ServiceAuth(tls=material(r, "orchestrator"))), timeout_s=5
        )
        ca = material(r, "orchestrator").ca
        no_cert = grpc.secure_channel(
            address,
            grpc.ssl_channel_credentials(root_certificates=ca),
            options=[("grpc.ssl_target_name_override", "rampart-retrieval")],
        )
        assert not check_ready(no_cert, timeout_s=5)
        other_release = render("small")  # a fresh CA: another release's certificates
        assert not check_ready(
            open_channel(address, auth=ServiceAuth(tls=material(other_release, "orchestrator"))), timeout_s=5
        )
    finally:
        server.stop(0)


def test_the_rendered_allow_lists_admit_the_rendered_certificates() -> None:
    """Retrieval's rendered caller lists on a real mTLS server with its rendered certificate: the
    orchestrator's certificate reads but may not write, ingest's writes but may not read, and the
    gateway's (same CA) gets PERMISSION_DENIED for both. The settings are built from the rendered
    values, so lists the settings refuse (a role outside the gate) fail here too."""
    import grpc

    from services.common.config import RetrievalServiceSettings
    from services.common.errors import ErrorCode, RampartError
    from services.common.grpc_client import Caller, open_channel
    from services.common.grpc_server import GrpcServer
    from services.common.net import free_port
    from services.common.service_auth import ServiceAuth, TlsMaterial
    from services.retrieval.caller_roles import method_callers
    from tests.integration.grpc_servers import BackgroundLoop

    r = rendered("small")
    s = dp.rendered_secrets(r)

    def auth(comp: str) -> ServiceAuth:
        t = s[f"rampart-{comp}-tls"]
        pem = TlsMaterial(
            t["ca.crt"].encode(), t["tls.crt"].encode(), t["tls.key"].encode(), "rampart-retrieval"
        )
        return ServiceAuth(tls=pem)

    async def pong(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b"pong"

    lists = {
        field: json.loads(env_var(r, "retrieval", f"RAMPART_RETRIEVAL_SERVICE__{field.upper()}")["value"])
        for field in ("allowed_callers", "read_callers", "write_callers")
    }
    settings = RetrievalServiceSettings(port=free_port(), **lists)
    server = GrpcServer(
        settings, name="retrieval", auth=auth("retrieval"), method_callers=method_callers(settings)
    )
    # stand-ins under the real method names: the check runs before any handler
    service = "rampart.retrieval.v1.IndexService"
    handler = grpc.method_handlers_generic_handler(
        service, {m: grpc.unary_unary_rpc_method_handler(pong) for m in ("Chunks", "Write", "Stats")}
    )
    server.add(lambda h, srv: srv.add_generic_rpc_handlers((h,)), handler, service)
    loop = BackgroundLoop()
    try:
        address = f"127.0.0.1:{loop.run(server.start())}"

        def call(comp: str, method: str) -> bytes:
            channel = open_channel(address, auth=auth(comp))
            try:
                stub = channel.unary_unary(f"/{service}/{method}")
                return bytes(Caller(channel, address, deadline_ms=5000).call(stub, b"", idempotent=True))
            finally:
                channel.close()

        def refused(comp: str, method: str) -> RampartError:
            with pytest.raises(RampartError) as err:
                call(comp, method)
            assert err.value.code is ErrorCode.PERMISSION_DENIED
            assert err.value.details["caller"] == f"rampart-{comp}"
            return err.value

        assert call("orchestrator", "Chunks") == b"pong" and call("ingest", "Write") == b"pong"
        assert call("orchestrator", "Stats") == b"pong" and call("ingest", "Stats") == b"pong"
        assert refused("orchestrator", "Write").details["setting"].endswith("__WRITE_CALLERS")
        assert refused("ingest", "Chunks").details["setting"].endswith("__READ_CALLERS")
        assert refused("gateway", "Stats").details["setting"].endswith("__ALLOWED_CALLERS")
    finally:
        loop.run(server.stop(0))
        loop.close()


def test_the_rendered_aclfile_loads_into_redis(tmp_path: Path) -> None:
    """Debian's redis-server 7 loads the chart's aclfile: the roles log in with their Secrets'
    passwords, the probe may only PING, the default user and the unused gateway user cannot log in."""
    import redis as redis_py

    from services.common.net import free_port
    from services.common.redis_server import redis_command, redis_server_binary

    r = rendered("small")
    secrets = dp.rendered_secrets(r)
    binary = redis_server_binary()
    assert binary is not None, "redis-server is not installed: run `make system-deps`"
    acl = tmp_path / "users.acl"
    acl.write_text(secrets["rampart-redis-acl"]["users.acl"])
    port = free_port()
    proc = subprocess.Popen(
        [*redis_command(binary, port, aclfile=acl), "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:

        def client(user: str | None = None, password: str | None = None) -> redis_py.Redis:
            return redis_py.Redis(port=port, username=user, password=password, socket_connect_timeout=2)

        def password(role: str) -> str:
            return secrets[f"rampart-redis-{role}"]["password"]

        deadline = time.monotonic() + 10
        while True:
            try:
                assert client("worker", password("worker")).ping()
                break
            except redis_py.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
                time.sleep(0.05)
        assert client("orchestrator", password("orchestrator")).set("rampart.factcheck.x", "1")
        assert client("probe", password("probe")).ping()
        with pytest.raises(redis_py.exceptions.NoPermissionError):
            client("probe", password("probe")).get("rampart.factcheck.x")
        with pytest.raises(redis_py.exceptions.AuthenticationError):
            client().get("rampart.factcheck.x")  # the default user, no password
        with pytest.raises(redis_py.exceptions.AuthenticationError):
            client("gateway", password("worker")).ping()  # another role's password
    finally:
        proc.terminate()
        proc.wait(10)


REDIS_TLS = {"redis": {"tls": {"enabled": True}}}


@pytest.mark.parametrize("profile", ["small", "medium"])
def test_redis_tls_is_an_option(profile: str) -> None:
    """redis.tls.enabled on the in-cluster Redis: TLS only, each client (gateway, orchestrator, worker)
    on rediss:// with its own mounted copy of the CA, every other property still holds."""
    r = render(profile, REDIS_TLS)
    assert redis_tls_problems(r) == []
    assert all(CHECKS[check](r) == [] for check in ("workloads", "env names", "redis clients", "redis acl"))
    made = {x["metadata"]["name"] for x in r.of_kind("Secret")}
    assert {"rampart-redis-tls", "rampart-worker-tls"} <= made


def test_redis_tls_refuses_what_it_cannot_serve() -> None:
    with pytest.raises(Exception, match=r"tls\.enabled=true"):
        render("small", {**REDIS_TLS, "tls": {"enabled": False}})
    with pytest.raises(Exception, match=r"endpoints\.redis\.tls"):
        render("small", {**REDIS_TLS, "endpoints": {"redis": {"host": "cache.example"}}})


def test_the_rendered_redis_tls_serves_its_clients(tmp_path: Path) -> None:
    """Debian's redis-server 7 with the rendered TLS arguments, certificate and aclfile: a client
    checking the CA from the worker's Secret and the name it dials (rampart-redis) logs in as the
    worker; plaintext is refused; the rendered probe's redis-cli answers PONG."""
    import socket
    import ssl

    import redis as redis_py

    from services.common.net import free_port
    from services.common.redis_server import redis_command, redis_server_binary

    r = render("small", REDIS_TLS)
    secrets = dp.rendered_secrets(r)
    mount = r.values["tls"]["mountPath"]
    for key, value in secrets["rampart-redis-tls"].items():
        (tmp_path / key).write_text(value)
    (tmp_path / "worker-ca.crt").write_text(secrets["rampart-worker-tls"]["ca.crt"])
    (tmp_path / "users.acl").write_text(secrets["rampart-redis-acl"]["users.acl"])
    c = first_container(r, "redis")
    port = free_port()
    tls_args = [a.replace(mount, str(tmp_path)).replace("6379", str(port)) for a in c["args"][-12:]]
    binary = redis_server_binary()
    assert binary is not None, "redis-server is not installed: run `make system-deps`"
    command = [
        *redis_command(binary, port, aclfile=tmp_path / "users.acl"),
        "--dir",
        str(tmp_path),
        *tls_args,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=str(tmp_path / "worker-ca.crt"))

    def worker_ping() -> bytes:
        raw = socket.create_connection(("127.0.0.1", port), timeout=2)
        with raw, context.wrap_socket(raw, server_hostname="rampart-redis") as tls:
            password = secrets["rampart-redis-worker"]["password"]
            tls.sendall(f"AUTH worker {password}\r\nPING\r\n".encode())
            got = b""
            while got.count(b"\r\n") < 2 and (chunk := tls.recv(100)):  # two replies, in any records
                got += chunk
            return got

    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                assert worker_ping() == b"+OK\r\n+PONG\r\n"
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
                time.sleep(0.1)
        with pytest.raises(redis_py.ConnectionError):  # plaintext on the TLS port
            redis_py.Redis(port=port, socket_timeout=2, socket_connect_timeout=2).ping()
        probe_env = {
            "REDISCLI_AUTH": secrets["rampart-redis-probe"]["password"],
            "REDISCLI_TLS_ARGS": env_of(c)["REDISCLI_TLS_ARGS"]["value"].replace(mount, str(tmp_path))
            + f" -p {port}",
            "PATH": "/usr/bin:/bin",
        }
        probe = subprocess.run(c["readinessProbe"]["exec"]["command"], env=probe_env, timeout=10, check=False)
        assert probe.returncode == 0
    finally:
        proc.terminate()
        proc.wait(10)


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
        next(v for v in env if v["name"] == "RAMPART_RETRIEVAL_SERVICE__PORT")["value"] = "50071"

    for change in (wrong_port, unopened, bind_elsewhere):
        assert wiring_problems(broken("small", change)), change.__name__


def test_env_name_check_breaks() -> None:
    def typo(r: Rendered) -> None:
        first_container(r, "gateway")["env"].append({"name": "RAMPART_GATEWAY_PORT", "value": "8080"})

    assert env_name_problems(broken("small", typo))


def env_var(r: Rendered, comp: str, var: str) -> dict[str, Any]:
    return next(v for v in first_container(r, comp)["env"] if v["name"] == var)


def test_tls_check_breaks() -> None:
    def plaintext_client(r: Rendered) -> None:  # the gateway calls ingest without TLS
        env_var(r, "gateway", "RAMPART_REMOTE__TLS__ENABLED")["value"] = "false"

    def borrowed_secret(r: Rendered) -> None:  # ingest mounts retrieval's certificate and key
        obj = next(o for o in workloads(r) if component(o) == "ingest")
        volume = next(v for v in pod_specs(obj)[0]["volumes"] if v["name"] == "tls")
        volume["secret"]["secretName"] = "rampart-retrieval-tls"

    def writable(r: Rendered) -> None:
        mount = next(m for m in first_container(r, "retrieval")["volumeMounts"] if m["name"] == "tls")
        mount["readOnly"] = False

    def wrong_names(r: Rendered) -> None:  # retrieval serves a certificate made for the gateway
        secrets = {s["metadata"]["name"]: s for s in r.of_kind("Secret")}
        secrets["rampart-retrieval-tls"]["data"] = secrets["rampart-gateway-tls"]["data"]

    def other_ca(r: Rendered) -> None:  # the orchestrator trusts another release's CA
        other = next(
            s for s in render("small").of_kind("Secret") if s["metadata"]["name"] == "rampart-tls-ca"
        )
        orchestrator = next(
            s for s in r.of_kind("Secret") if s["metadata"]["name"] == "rampart-orchestrator-tls"
        )
        orchestrator["data"]["ca.crt"] = other["data"]["tls.crt"]

    for change in (plaintext_client, borrowed_secret, writable, wrong_names, other_ca):
        assert tls_problems(broken("small", change)), change.__name__


def test_triton_key_check_breaks() -> None:
    def open_http(r: Rendered) -> None:  # Triton's HTTP restricts nothing
        c = first_container(r, "triton")
        c["args"] = [a for a in c["args"] if not a.startswith("--http-restricted-api")]

    def health_restricted(r: Rendered) -> None:  # the kubelet's probes would fail
        c = first_container(r, "triton")
        c["args"] = [a.replace("metadata,", "health,metadata,") for a in c["args"]]

    def client_without_key(r: Rendered) -> None:
        c = first_container(r, "orchestrator")
        c["env"] = [v for v in c["env"] if v["name"] != TRITON_KEY_VAR]

    def literal_key(r: Rendered) -> None:
        env_var(r, "triton", TRITON_KEY_VAR).pop("valueFrom")
        env_var(r, "triton", TRITON_KEY_VAR)["value"] = "k" * 32

    for change in (open_http, health_restricted, client_without_key, literal_key):
        assert triton_key_problems(broken("small", change)), change.__name__


def test_caller_check_breaks() -> None:
    var = "RAMPART_RETRIEVAL_SERVICE__ALLOWED_CALLERS"

    def gateway_admitted(r: Rendered) -> None:  # retrieval also admits the gateway, which never calls it
        env_var(r, "retrieval", var)["value"] = '["rampart-orchestrator","rampart-ingest","rampart-gateway"]'

    def bare_names(r: Rendered) -> None:  # the settings' defaults, which no chart certificate carries
        env_var(r, "retrieval", var)["value"] = '["orchestrator","ingest"]'

    def unset(r: Rendered) -> None:
        first_container(r, "ingest")["env"] = [
            v for v in first_container(r, "ingest")["env"] if not v["name"].endswith("__ALLOWED_CALLERS")
        ]

    def ingest_reads(r: Rendered) -> None:  # ingest's certificate on the search side too
        role = env_var(r, "retrieval", "RAMPART_RETRIEVAL_SERVICE__READ_CALLERS")
        role["value"] = '["rampart-orchestrator","rampart-ingest"]'

    def roles_unset(r: Rendered) -> None:
        first_container(r, "retrieval")["env"] = [
            v for v in first_container(r, "retrieval")["env"] if not v["name"].endswith("__WRITE_CALLERS")
        ]

    for change in (gateway_admitted, bare_names, unset, ingest_reads, roles_unset):
        assert caller_problems(broken("small", change)), change.__name__


def test_triton_tls_check_breaks() -> None:
    def plaintext(r: Rendered) -> None:  # Triton without its TLS flags
        c = first_container(r, "triton")
        c["args"] = [a for a in c["args"] if not a.startswith("--grpc-use-ssl")]

    def not_mutual(r: Rendered) -> None:  # TLS, but any client may call
        c = first_container(r, "triton")
        c["args"] = [a for a in c["args"] if a != "--grpc-use-ssl-mutual=true"]

    def client_plaintext(r: Rendered) -> None:
        env_var(r, "orchestrator", "RAMPART_RERANK__TRITON__TLS__ENABLED")["value"] = "false"

    def wrong_names(r: Rendered) -> None:  # Triton serves the gateway's certificate
        secrets = {x["metadata"]["name"]: x for x in r.of_kind("Secret")}
        secrets["rampart-triton-tls"]["data"] = secrets["rampart-gateway-tls"]["data"]

    for change in (plaintext, not_mutual, client_plaintext, wrong_names):
        assert triton_tls_problems(broken("small", change)), change.__name__
    assert triton_tls_problems(render("small", {"tls": {"enabled": False}})) == []


def test_redis_tls_check_breaks() -> None:
    def plaintext_client(r: Rendered) -> None:
        var = env_var(r, "worker", "RAMPART_FACTCHECK__CELERY__BROKER_URL")
        var["value"] = var["value"].replace("rediss://", "redis://").split("?")[0]

    def no_tls_args(r: Rendered) -> None:
        c = first_container(r, "redis")
        c["args"] = c["args"][:-12]

    def probe_without_ca(r: Rendered) -> None:
        env_var(r, "redis", "REDISCLI_TLS_ARGS")["value"] = "--tls --insecure"

    for change in (plaintext_client, no_tls_args, probe_without_ca):
        r = render("small", REDIS_TLS)
        copy_ = Rendered(r.profile, copy.deepcopy(r.values), copy.deepcopy(r.docs))
        change(copy_)
        assert redis_tls_problems(copy_), change.__name__


def test_health_probe_check_breaks() -> None:
    def main_port(r: Rendered) -> None:  # a kubelet probe on the mTLS port fails every handshake
        first_container(r, "retrieval")["readinessProbe"]["grpc"]["port"] = 50051

    def unbound(r: Rendered) -> None:
        env = first_container(r, "ingest")["env"]
        env[:] = [v for v in env if v["name"] != "RAMPART_INGEST_SERVICE__HEALTH_PORT"]

    for change in (main_port, unbound):
        assert health_probe_problems(broken("small", change)), change.__name__


def test_redis_checks_break() -> None:
    def anonymous(r: Rendered) -> None:  # the default user's URL
        env_var(r, "worker", "RAMPART_FACTCHECK__CELERY__BROKER_URL")["value"] = (
            "redis://rampart-redis:6379/0"
        )

    def borrowed_password(r: Rendered) -> None:  # the worker reads the orchestrator's password
        env_var(r, "worker", "REDIS_PASSWORD")["valueFrom"]["secretKeyRef"]["name"] = (
            "rampart-redis-orchestrator"
        )

    def late_user(r: Rendered) -> None:  # $(REDIS_USERNAME) would not expand
        env = first_container(r, "orchestrator")["env"]
        env.append(env.pop(next(i for i, v in enumerate(env) if v["name"] == "REDIS_USERNAME")))

    for change in (anonymous, borrowed_password, late_user):
        assert redis_client_problems(broken("small", change)), change.__name__

    def acl(lines: list[str]) -> Callable[[Rendered], None]:
        def change(r: Rendered) -> None:
            secret = next(s for s in r.of_kind("Secret") if s["metadata"]["name"] == "rampart-redis-acl")
            secret["data"]["users.acl"] = base64.b64encode("\n".join(lines).encode()).decode()

        return change

    lines = acl_lines(rendered("small"))
    default_on = ["user default on nopass ~* +@all", *lines[1:]]
    wider = [x.replace("+ping", "+@all") for x in lines]  # the probe may do anything
    stale = [re.sub(r"#[0-9a-f]{64}", "#" + "0" * 64, x) for x in lines]  # hashes of other passwords
    worker_off = [x.replace("user worker on", "user worker off") for x in lines]
    for changed in (default_on, wider, stale, worker_off):
        assert redis_acl_problems(broken("small", acl(changed))), changed

    def requirepass(r: Rendered) -> None:
        first_container(r, "redis")["args"] = ["--requirepass", "x", "--dir", "/data"]

    assert redis_acl_problems(broken("small", requirepass))


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
