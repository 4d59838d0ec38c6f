"""Run the Helm chart's small profile as real containers with ``podman kube play`` (``make test-deploy``).

The chart is rendered exactly as for a cluster (``tests/deploy_render.py``, values-small.yaml plus the
overlay ``deploy/podman/values-podman.yaml`` for images this machine cannot pull); this module then
adapts the rendered objects to what podman 4.3 runs, without editing the chart:

- Services: podman ignores them, so each workload is played on one network with its Services' names
  as network aliases (``--network NET:alias=rampart-retrieval``), which is what a ClusterIP's DNS name
  gives the callers;
- StatefulSets: podman ignores them, so each becomes a one-replica Deployment whose
  ``volumeClaimTemplates`` become PersistentVolumeClaims (podman named volumes);
- Secrets: become podman secrets, as podman wants them: a JSON map of base64 values for
  ``secretKeyRef`` (tokens, each Redis role's password); for a secret volume (the API keys, the Redis
  aclfile, each component's mTLS certificate: ca.crt, tls.crt, tls.key) a Secret whose ``data`` holds
  the *plain* values (podman 4.3 writes ``data`` into the file without base64-decoding it, ignores
  ``stringData`` and ``defaultMode``: the file is 0644 in a 0755 folder, where Kubernetes gives 0400;
  a secret volume whose podman secret is missing fails the play whatever ``optional`` says);
- ``$(VAR)`` in env values and args (Kubernetes' dependent variables, e.g. the Redis URL's password):
  podman does not expand them, so they are resolved here; the adapted manifests therefore hold
  secret values and are written to a private (0700) folder that teardown removes;
- probes: podman runs none without systemd (and logs systemd errors for each), so they are dropped;
  readiness is polled from here instead (and tests/deploy calls the gRPC servers' plaintext health
  ports, which the kubelet's probes use while mTLS is on);
- objects podman has no use for (NetworkPolicy, ServiceAccount, ServiceMonitor, HPA, PDB) are left out.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.deploy_render import ROOT, Rendered, render

OVERLAY = ROOT / "deploy" / "podman" / "values-podman.yaml"
NETWORK = "rampart-deploy"
# Each workload gets a fixed address, as a Service's ClusterIP is fixed: a restarted podman pod would
# otherwise come back on a new address, which gRPC clients find only after DNS re-resolution (≥ 30 s,
# then reconnect back-off) — a podman artefact, not what a cluster does. An uncommon /24, clear of
# podman's defaults (10.88.0.0/16, 10.89.x.0/24), since the bridge's routes are the host's.
SUBNET_PREFIX = "10.213.47"
IGNORED_KINDS = frozenset(
    {"NetworkPolicy", "ServiceAccount", "ServiceMonitor", "HorizontalPodAutoscaler", "PodDisruptionBudget"}
)
_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass
class Bundle:
    """One workload as podman plays it: its Deployment, ConfigMaps and claims, and its aliases."""

    name: str
    docs: list[dict[str, Any]]
    aliases: list[str]
    replicas: int

    @property
    def pods(self) -> list[str]:
        return [f"{self.name}-pod-{i}" for i in range(self.replicas)]


@dataclass
class Adapted:
    bundles: list[Bundle]
    env_secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> key -> plaintext
    volume_secrets: dict[str, dict[str, str]] = field(default_factory=dict)

    def bundle(self, name: str) -> Bundle:
        for b in self.bundles:
            if b.name == name:
                return b
        raise KeyError(f"no workload {name!r}; have {[b.name for b in self.bundles]}")


def render_small(overlay: Path = OVERLAY) -> Rendered:
    """values-small.yaml with the podman overlay merged over it."""
    return render("small", yaml.safe_load(overlay.read_text()))


def rendered_secrets(rendered: Rendered) -> dict[str, dict[str, str]]:
    """The chart's generated Secrets, decoded: ``{name: {key: plaintext}}``."""
    out: dict[str, dict[str, str]] = {}
    for s in rendered.of_kind("Secret"):
        data = s.get("data") or {}
        out[s["metadata"]["name"]] = {k: base64.b64decode(v).decode() for k, v in data.items()}
        out[s["metadata"]["name"]].update(s.get("stringData") or {})
    return out


def adapt(rendered: Rendered, secrets: Mapping[str, Mapping[str, str]]) -> Adapted:
    """The rendered profile as podman bundles; ``secrets`` holds every Secret the pods name (the
    generated ones and those that must exist before install, e.g. the API keys)."""
    services = rendered.of_kind("Service")
    configmaps = {c["metadata"]["name"]: c for c in rendered.of_kind("ConfigMap")}
    adapted = Adapted(bundles=[])
    for obj in rendered.docs:
        kind = obj.get("kind")
        if kind not in ("Deployment", "StatefulSet"):
            if kind not in IGNORED_KINDS | {"Service", "ConfigMap", "Secret"}:
                raise ValueError(
                    f"{kind} {obj['metadata']['name']}: podman kube play cannot run it; add a translation "
                    "to tests/deploy_podman.py or disable it in deploy/podman/values-podman.yaml"
                )
            continue
        adapted.bundles.append(_bundle(obj, services, configmaps, secrets, adapted))
    return adapted


def _bundle(
    obj: dict[str, Any],
    services: list[dict[str, Any]],
    configmaps: dict[str, dict[str, Any]],
    secrets: Mapping[str, Mapping[str, str]],
    adapted: Adapted,
) -> Bundle:
    name = obj["metadata"]["name"]
    dep = copy.deepcopy(obj)
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    extra: list[dict[str, Any]] = []
    if dep["kind"] == "StatefulSet":
        dep["kind"] = "Deployment"
        spec.pop("serviceName", None)
        for claim in spec.pop("volumeClaimTemplates", []):
            claim_name = f"{claim['metadata']['name']}-{name}-0"  # the name Kubernetes would give pod 0
            extra.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim_name},
                    "spec": claim["spec"],
                }
            )
            pod.setdefault("volumes", []).append(
                {"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}}
            )
    extra += _private_empty_dirs(name, pod)
    for vol in pod.get("volumes", []):
        if "configMap" in vol:
            extra.append(configmaps[vol["configMap"]["name"]])
        if "secret" in vol:
            secret = vol["secret"]["secretName"]
            adapted.volume_secrets[secret] = _need(secrets, secret, name)
    for container in pod["containers"]:
        _adapt_container(container, secrets, adapted, name)
    labels = spec["template"]["metadata"]["labels"]
    aliases = [
        s["metadata"]["name"]
        for s in services
        if all(labels.get(k) == v for k, v in s["spec"]["selector"].items())
    ]
    return Bundle(name, [dep, *extra], aliases, int(spec.get("replicas", 1)))


def _private_empty_dirs(name: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """podman 4.3 plays an emptyDir as a named volume called after the *volume* ("tmp"), so every pod
    would share one /tmp: each becomes a claim of its own pod instead (``<workload>-<volume>``, copied up
    from the image's folder like a fresh emptyDir; removed at teardown). A memory-backed emptyDir on
    /dev/shm is dropped: podman gives each container a private /dev/shm tmpfs (64 MB, mode 1777) already,
    where a named volume would be root's (Triton's python backend and Ray need to write there)."""
    shm = {
        v["name"]
        for v in pod.get("volumes", [])
        if (v.get("emptyDir") or {}).get("medium") == "Memory"
        and any(
            m["name"] == v["name"] and m["mountPath"] == "/dev/shm"
            for c in pod["containers"]
            for m in c.get("volumeMounts", [])
        )
    }
    claims = []
    volumes = []
    for vol in pod.get("volumes", []):
        if vol["name"] in shm:
            continue
        if "emptyDir" in vol:
            claim = f"{name}-{vol['name']}"
            size = (vol["emptyDir"] or {}).get("sizeLimit", "256Mi")
            claims.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": claim},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
                }
            )
            vol = {"name": vol["name"], "persistentVolumeClaim": {"claimName": claim}}
        volumes.append(vol)
    pod["volumes"] = volumes
    for c in pod["containers"]:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m["name"] not in shm]
    return claims


def _need(secrets: Mapping[str, Mapping[str, str]], name: str, who: str) -> dict[str, str]:
    if name not in secrets:
        raise KeyError(f"{who} needs Secret {name!r}, which neither the chart generates nor the caller gave")
    return dict(secrets[name])


def _adapt_container(
    container: dict[str, Any], secrets: Mapping[str, Mapping[str, str]], adapted: Adapted, who: str
) -> None:
    """Drop probes; resolve ``$(VAR)`` in env values and args as Kubernetes would (a variable defined
    earlier in the list, a Secret-backed one included); note the Secrets ``secretKeyRef`` names."""
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        container.pop(probe, None)
    known: dict[str, str] = {}
    for env in container.get("env", []):
        ref = (env.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            values = _need(secrets, ref["name"], who)
            adapted.env_secrets[ref["name"]] = values
            known[env["name"]] = values[ref["key"]]
        elif "value" in env:
            env["value"] = _VAR.sub(lambda m: known.get(m.group(1), m.group(0)), env["value"])
            known[env["name"]] = env["value"]
    for key in ("command", "args"):
        if key in container:
            container[key] = [
                _VAR.sub(lambda m: known.get(m.group(1), m.group(0)), a) for a in container[key]
            ]


def podman(*args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(["podman", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def create_secrets(adapted: Adapted) -> None:
    """podman secrets in the two shapes kube play 4.3 reads (module docstring)."""
    for name, values in adapted.env_secrets.items():
        payload = json.dumps({k: base64.b64encode(v.encode()).decode() for k, v in values.items()})
        podman("secret", "rm", name, check=False)
        podman("secret", "create", name, "-", stdin=payload)
    for name, values in adapted.volume_secrets.items():
        if name in adapted.env_secrets:
            raise ValueError(
                f"Secret {name!r} is both an env and a volume secret: podman needs one shape per name"
            )
        doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": values}
        podman("secret", "rm", name, check=False)
        podman("secret", "create", name, "-", stdin=json.dumps(doc))


def play(adapted: Adapted, workdir: Path) -> dict[str, float]:
    """Create the network and secrets and play every bundle; seconds per ``kube play`` call."""
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _exists_network():
        podman("network", "create", "--subnet", f"{SUBNET_PREFIX}.0/24", NETWORK)
    create_secrets(adapted)
    seconds: dict[str, float] = {}
    for i, bundle in enumerate(adapted.bundles):
        if bundle.replicas != 1:
            raise ValueError(f"{bundle.name} has {bundle.replicas} replicas; one fixed address needs one pod")
        path = workdir / f"{bundle.name}.yaml"
        path.write_text(yaml.safe_dump_all(bundle.docs, sort_keys=False))
        path.chmod(0o600)
        options = [f"ip={SUBNET_PREFIX}.{10 + i}", *(f"alias={a}" for a in bundle.aliases)]
        network = f"{NETWORK}:{','.join(options)}"
        started = time.monotonic()
        podman("kube", "play", "--network", network, str(path))
        seconds[bundle.name] = round(time.monotonic() - started, 2)
    return seconds


def image_exists(ref: str) -> bool:
    return (
        subprocess.run(["podman", "image", "exists", ref], capture_output=True, check=False).returncode == 0
    )


def _exists_network() -> bool:
    return (
        subprocess.run(["podman", "network", "exists", NETWORK], capture_output=True, check=False).returncode
        == 0
    )


def teardown(adapted: Adapted, workdir: Path) -> list[str]:
    """``kube down`` every bundle, then remove volumes, secrets, network and the manifests; returns
    what could not be removed (empty when clean)."""
    problems = []
    for bundle in adapted.bundles:
        path = workdir / f"{bundle.name}.yaml"
        if path.exists():
            done = subprocess.run(
                ["podman", "kube", "down", str(path)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0:
                problems.append(f"kube down {bundle.name}: {done.stderr.strip()}")
        for doc in bundle.docs:
            if doc["kind"] == "PersistentVolumeClaim":
                podman("volume", "rm", "-f", doc["metadata"]["name"], check=False)
    for name in [*adapted.env_secrets, *adapted.volume_secrets]:
        podman("secret", "rm", name, check=False)
    for name in adapted.volume_secrets:  # podman 4.3 keeps a secret volume's files in a named volume
        podman("volume", "rm", "-f", name, check=False)
    if _exists_network():
        podman("network", "rm", "-f", NETWORK, check=False)
    for path in workdir.glob("*.yaml"):
        path.unlink()
    left = podman("pod", "ps", "--filter", "name=rampart-", "--format", "{{.Name}}", check=False).split()
    problems += [f"pod {p} still exists" for p in left]
    return problems


def pod_ip(pod: str) -> str:
    """The pod's address on the deploy network (the host reaches podman's bridge directly, as root)."""
    infra = podman("pod", "inspect", pod, "--format", "{{.InfraContainerID}}").strip()
    out = podman("inspect", infra, "--format", "{{json .NetworkSettings.Networks}}")
    nets = json.loads(out)
    if NETWORK not in nets:
        raise RuntimeError(f"pod {pod} is not on network {NETWORK} (on {sorted(nets)})")
    return str(nets[NETWORK]["IPAddress"])


def container_logs(bundle: Bundle, lines: int = 40) -> Iterator[str]:
    for pod in bundle.pods:
        names = podman("ps", "-a", "--filter", f"pod={pod}", "--format", "{{.Names}}", check=False).split()
        for name in names:
            if name.endswith("-infra"):
                continue
            out = subprocess.run(
                ["podman", "logs", "--tail", str(lines), name], capture_output=True, text=True, check=False
            )
            yield f"--- {name}\n{out.stdout[-4000:]}{out.stderr[-4000:]}"


def wait_http(url: str, timeout_s: float, ok: tuple[int, ...] = (200,)) -> float:
    """Seconds until ``url`` answers with a status in ``ok``; raises TimeoutError naming the last reply."""
    started = time.monotonic()
    last = "no answer"
    while time.monotonic() - started < timeout_s:
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code in ok:
                return round(time.monotonic() - started, 1)
            last = f"{r.status_code} {r.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(1.0)
    raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s; last: {last}")
