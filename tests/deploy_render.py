"""Render the Helm chart's profiles offline, and read the graph its NetworkPolicies open.

Used by ``make chart-render`` (``python -m tests.deploy_render out/deploy``: one multi-document YAML
per profile) and by ``tests/integration/test_deploy_chart.py``. helm-python-sdk binds Helm's Go SDK
(``libhelm_c``), so no ``helm`` binary and no cluster is involved; ``lookup`` returns nothing, so the
generated Secrets get fresh random values on every render (the rendered files are not committed).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "rampart"
PROFILES = ("small", "medium", "eks")
RELEASE = "rampart"
NAMESPACE = "rampart"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "RayService")

Edge = tuple[str, str, str]  # (from, to, port) with port "any" for every port


@dataclass(frozen=True)
class Rendered:
    profile: str
    values: dict[str, Any]  # the merged values (chart defaults + profile)
    docs: list[dict[str, Any]]  # every object, in template order

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def yaml(self) -> str:
        return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in self.docs)


def profile_values(profile: str) -> dict[str, Any]:
    import helm_python as helm

    text = (CHART / f"values-{profile}.yaml").read_text()
    values: dict[str, Any] = helm.values_from_yaml(text)
    return values


def render(profile: str, overrides: dict[str, Any] | None = None) -> Rendered:
    """The profile rendered as ``helm template rampart deploy/helm/rampart -n rampart -f values-<profile>.yaml``
    would; ``overrides`` are merged over the profile (tests use them to break one property)."""
    import helm_python as helm

    chart = helm.Chart.load(CHART)
    values = profile_values(profile)
    if overrides:
        values = _merge(values, overrides)
    chart.validate_schema(values)
    merged: dict[str, Any] = chart.merge_values(values)
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for name in sorted(out):
        docs.extend(d for d in yaml.safe_load_all(out[name]) if d)
    return Rendered(profile, merged, docs)


def lint(profile: str) -> dict[str, Any]:
    import helm_python as helm

    report: dict[str, Any] = helm.lint(CHART, profile_values(profile), strict=True, namespace=NAMESPACE)
    return report


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a workload (a RayService has a head and worker groups)."""
    if obj["kind"] == "RayService":
        cluster = obj["spec"]["rayClusterConfig"]
        groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
        return [g["template"]["spec"] for g in groups]
    return [obj["spec"]["template"]["spec"]]


def policy_edges(rendered: Rendered) -> tuple[set[Edge], set[Edge]]:
    """The edges the NetworkPolicies open, as (egress-side, ingress-side) sets.

    An egress rule on group A's policy to peer B on port p is the edge (A, B, p); an ingress rule on B's
    policy from A on p is the same edge seen from the other end. Peers map back to names: a pod selector
    to its ``rampart.io/service`` group, a namespace selector to the peer of ``networkPolicy.peers``
    with that namespace (and pod labels), an ipBlock to ``vpc``."""
    peers = rendered.values["networkPolicy"]["peers"]
    by_selector = {
        (p["namespace"], tuple(sorted((p.get("podLabels") or {}).items()))): name for name, p in peers.items()
    }

    def peer_name(peer: dict[str, Any]) -> str:
        if "ipBlock" in peer:
            return "vpc"
        if "namespaceSelector" in peer:
            ns = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            labels = tuple(sorted((peer.get("podSelector") or {}).get("matchLabels", {}).items()))
            return by_selector[(ns, labels)]
        return str(peer["podSelector"]["matchLabels"]["rampart.io/service"])

    def ports(rule: dict[str, Any]) -> set[str]:
        return {str(p["port"]) for p in rule.get("ports") or []} or {"any"}

    egress: set[Edge] = set()
    ingress: set[Edge] = set()
    for policy in rendered.of_kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if "rampart.io/service" not in selector:
            continue  # the default deny
        group = selector["rampart.io/service"]
        for rule in policy["spec"].get("egress") or []:
            for peer in rule["to"]:
                egress |= {(group, peer_name(peer), p) for p in ports(rule)}
        for rule in policy["spec"].get("ingress") or []:
            for peer in rule["from"]:
                ingress |= {(peer_name(peer), group, p) for p in ports(rule)}
    return egress, ingress


def documented_edges(profile: str, groups: set[str], text: str | None = None) -> set[Edge]:
    """The rows of docs/architecture.md's "Network edges" table that apply to ``profile``; ``*`` is
    expanded to every component group of the rendered profile."""
    text = ARCHITECTURE.read_text() if text is None else text
    section = text.split("## Network edges", 1)[1].split("\n## ", 1)[0]
    edges: set[Edge] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"\d+|any", cells[2]):
            continue
        src, dst, port, profiles, _why = cells
        if profile not in {p.strip() for p in profiles.split(",")}:
            continue
        for s in sorted(groups) if src == "*" else [src]:
            edges.add((s, dst, port))
    return edges


def write_all(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for profile in PROFILES:
        path = out_dir / f"{profile}.yaml"
        path.write_text(render(profile).yaml())
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out" / "deploy"
    for profile in PROFILES:
        report = lint(profile)
        if report["errors"] or any(m["severity"] >= 2 for m in report["messages"]):
            sys.exit(f"helm lint {profile}: {report}")
    for path in write_all(target):
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
