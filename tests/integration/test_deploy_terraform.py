"""Terraform (terraform/): parsed, formatted, checkov-clean, and wired to the Helm chart.

`terraform validate` and `plan` need the AWS provider downloaded (registry.terraform.io), which this
machine cannot reach: they are not run (terraform/README.md). What runs: python-hcl2 on every file,
`terraform fmt -check` (the binary is on this machine), checkov, and cross-checks between the
Terraform outputs and modules and the chart's values.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.common.redis_server import ROLE_RULES
from tests.deploy_render import CHART, ROOT, pod_specs, profile_values, render
from tests.integration.test_deploy_chart import run_checkov

TERRAFORM = ROOT / "terraform"
ENVS = ("dev", "prod")
MODULES = ("network", "eks", "opensearch", "redis", "iam", "ecr", "budgets")


def hcl(path: Path) -> dict[str, Any]:
    """The file as python-hcl2 reads it, with the quotes it keeps around strings and keys removed."""
    import hcl2

    with path.open() as f:
        parsed: dict[str, Any] = clean(hcl2.load(f))
    return parsed


def clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {unquote(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return unquote(value) if isinstance(value, str) else value


def unquote(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def key_paths(value: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Leaf key paths of a nested mapping (hcl2 keeps some keys quoted: unquoted here)."""
    if isinstance(value, dict):
        paths: set[tuple[str, ...]] = set()
        for k, v in value.items():
            if k.startswith("__"):
                continue
            paths |= key_paths(v, (*prefix, unquote(k)))
        return paths
    return {prefix}


def helm_values_output(env: str) -> dict[str, Any]:
    for block in hcl(TERRAFORM / "envs" / env / "outputs.tf")["output"]:
        for name, body in block.items():
            if unquote(name) == "helm_values":
                value: dict[str, Any] = body["value"]
                return value
    raise AssertionError(f"terraform/envs/{env}/outputs.tf has no helm_values output")


def lookup(values: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = values
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def test_every_file_parses_with_python_hcl2() -> None:
    files = sorted(TERRAFORM.rglob("*.tf"))
    assert len(files) >= 4 * len(MODULES) + 4 * len(ENVS)
    for path in files:
        assert hcl(path), path
    for module in MODULES:
        assert (TERRAFORM / "modules" / module / "main.tf").exists(), module


def test_terraform_fmt_check() -> None:
    binary = shutil.which("terraform")
    if binary is None:
        pytest.skip(
            "no terraform binary on this machine: fmt -check not run (reported as skipped, not passed)"
        )
    out = subprocess.run(
        [binary, "fmt", "-check", "-recursive", "-diff"],
        cwd=TERRAFORM,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout


def test_checkov_is_clean_and_every_skip_says_why() -> None:
    report = run_checkov(TERRAFORM, "terraform")
    assert report["failed"] == [], "\n".join(report["failed"])
    assert all(len(reason) > 20 for _check, reason in report["skipped"]), report["skipped"]


@pytest.mark.parametrize("env", ENVS)
def test_helm_values_output_keys_exist_in_the_chart(env: str) -> None:
    """Every key Terraform hands the chart (`terraform output -json helm_values`) is a key of the
    chart's values with the EKS profile, so `-f values-eks.yaml -f tf-values.json` sets, never invents."""
    chart_values = render("eks").values
    paths = key_paths(helm_values_output(env))
    assert paths
    missing = [".".join(p) for p in sorted(paths) if not lookup(chart_values, p)]
    assert missing == []


def test_both_envs_give_the_chart_the_same_keys() -> None:
    assert key_paths(helm_values_output("dev")) == key_paths(helm_values_output("prod"))


def test_helm_values_output_check_breaks() -> None:
    chart_values = render("eks").values
    assert not lookup(chart_values, ("endpoints", "redis", "hostname"))
    assert not lookup(chart_values, ("endpoint", "opensearch", "url"))


def node_groups() -> dict[str, dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for block in hcl(TERRAFORM / "modules" / "eks" / "main.tf")["resource"]:
        for name, body in block.get("aws_eks_node_group", {}).items():
            groups[unquote(name)] = body
    return groups


def test_gpu_node_groups_match_the_charts_triton_placement() -> None:
    """The GPU groups' label and taint are what values-eks.yaml's Triton selects and tolerates, and
    EKS labels Spot nodes with the capacity type the chart's nodeSelector names."""
    groups = node_groups()
    assert set(groups) == {"cpu", "gpu"}
    gpu = groups["gpu"]
    for_each = gpu["for_each"]
    assert {v["capacity"] for v in for_each.values()} == {"SPOT", "ON_DEMAND"}
    assert gpu["labels"] == {"rampart.io/pool": "gpu"}
    taint = gpu["taint"][0]
    assert (taint["key"], taint["value"], taint["effect"]) == ("nvidia.com/gpu", "true", "NO_SCHEDULE")
    assert groups["cpu"]["capacity_type"] == "ON_DEMAND" and "taint" not in groups["cpu"]

    triton = profile_values("eks")["components"]["triton"]
    assert triton["nodeSelector"] == {"rampart.io/pool": "gpu", "eks.amazonaws.com/capacityType": "SPOT"}
    assert triton["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]


def test_instance_types_are_g5_or_g6() -> None:
    for env in ENVS:
        variables = hcl(TERRAFORM / "envs" / env / "variables.tf")["variable"]
        spot = next(
            v for block in variables for k, v in block.items() if unquote(k) == "gpu_spot_instance_types"
        )
        assert spot["default"] and all(t.split(".")[0] in {"g5", "g6"} for t in spot["default"]), env


def test_chart_is_where_terraform_readme_says() -> None:
    assert (CHART / "values-eks.yaml").exists()
    assert "helm_values" in (TERRAFORM / "README.md").read_text()


def test_envs_differ_only_in_their_variables() -> None:
    """dev and prod compose the same modules the same way; sizes live in each env's variables.tf."""

    def code(env: str, name: str) -> list[str]:
        text = (TERRAFORM / "envs" / env / name).read_text()
        return [line for line in text.splitlines() if not line.lstrip().startswith("#")]

    for name in ("main.tf", "outputs.tf", "providers.tf"):
        assert code("dev", name) == code("prod", name), name


def test_terraform_fills_every_placeholder_of_the_eks_profile() -> None:
    """values-eks.yaml's account-specific values (placeholders so that it renders alone) are exactly
    what Terraform's helm_values sets, so none survives into a real install."""
    profile = profile_values("eks")
    placeholder = ("placeholder", "123456789012", "10.40.0.0/16")
    found = {p for p in key_paths(profile) if any(mark in str(get(profile, p)) for mark in placeholder)}
    assert found
    assert found <= key_paths(helm_values_output("dev"))


def get(values: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = values
    for key in path:
        node = node[key]
    return node


def test_irsa_trusts_the_service_account_the_chart_renders() -> None:
    """The retrieval role trusts system:serviceaccount:<namespace>:rampart-retrieval: the chart's
    ServiceAccount of the retrieval component, in the namespace the env passes to the iam module."""
    text = (TERRAFORM / "modules" / "iam" / "main.tf").read_text()
    assert 'retrieval          = { namespace = var.namespace, name = "rampart-retrieval" }' in text
    for env in ENVS:
        env_main = (TERRAFORM / "envs" / env / "main.tf").read_text()
        assert 'namespace = "rampart"' in env_main and "namespace            = local.namespace" in env_main
    r = render("eks")
    accounts = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in r.of_kind("ServiceAccount")}
    assert ("rampart", "rampart-retrieval") in accounts
    retrieval = next(
        d for d in r.docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "rampart-retrieval"
    )
    assert retrieval["spec"]["template"]["spec"]["serviceAccountName"] == "rampart-retrieval"


def redis_module() -> dict[str, Any]:
    return hcl(TERRAFORM / "modules" / "redis" / "main.tf")


def resources(module: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {unquote(n): body for block in module["resource"] for n, body in block.get(kind, {}).items()}


def test_elasticache_users_are_the_charts_and_the_codes() -> None:
    """ElastiCache RBAC, as the chart's in-cluster Redis: the roles' rules are
    services/common/redis_server.ROLE_RULES (and the chart's redisUsers), a user for exactly the roles
    the EKS profile's components log in as, each password in the Secrets Manager secret External Secrets
    copies into the Secret the chart reads, the default user off, no shared AUTH token."""
    module = redis_module()
    rules = next(block["role_rules"] for block in module["locals"] if "role_rules" in block)
    assert rules == ROLE_RULES
    r = render("eks")
    assert {role: u["rules"] for role, u in r.values["redisUsers"].items() if role != "probe"} == rules
    variables = hcl(TERRAFORM / "modules" / "redis" / "variables.tf")["variable"]
    roles = next(v for block in variables for k, v in block.items() if unquote(k) == "roles")["default"]
    used = {
        env["value"]
        for obj in r.docs
        if obj["kind"] in ("Deployment", "StatefulSet", "RayService")
        for spec in pod_specs(obj)
        for env in spec["containers"][0].get("env") or []
        if env["name"] == "REDIS_USERNAME"
    }
    assert set(roles) == used == {"gateway", "orchestrator", "worker"}
    for role in roles:  # the Kubernetes Secret the pods read is the one Terraform's secret names
        secret = r.values["secrets"][r.values["redisUsers"][role]["secret"]]
        assert secret == {"name": f"rampart-redis-{role}", "key": "password", "generate": False}
    users = resources(module, "aws_elasticache_user")
    assert users["default"]["user_name"] == "default" and users["default"]["access_string"] == "off -@all"
    assert users["role"]["access_string"] == "on ${local.role_rules[each.key]}"
    group = resources(module, "aws_elasticache_replication_group")["this"]
    assert "auth_token" not in group and group["transit_encryption_enabled"] is True
    assert group["user_group_ids"] == ["${aws_elasticache_user_group.this.user_group_id}"]
    secret = resources(module, "aws_secretsmanager_secret")["role"]
    assert "rampart-redis-${each.key}" in secret["description"]
