"""operator/config/network_policy.yaml against the Deployment it guards: it selects the operator's pods,
names the ports they really listen on (manager.yaml, manager_webhook_patch.yaml), and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mysql_operator.manifests.network_policy import METRICS_NAMESPACES, WEBHOOK_SOURCES, network_policy_docs

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "operator" / "config"


def container_ports(path: Path) -> dict[str, int]:
    ports: dict[str, int] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind", "Deployment") == "Deployment" and "spec" in doc:
            for c in doc["spec"]["template"]["spec"]["containers"]:
                ports.update({p["name"]: p["containerPort"] for p in c.get("ports", [])})
    return ports


def deployment() -> dict[str, Any]:
    docs = yaml.safe_load_all((CONFIG / "manager.yaml").read_text())
    return next(d for d in docs if d["kind"] == "Deployment")


def test_the_policy_selects_the_operators_pods_in_their_namespace() -> None:
    (policy,) = network_policy_docs()
    deploy = deployment()
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert policy["metadata"]["namespace"] == deploy["metadata"]["namespace"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_each_rule_names_a_port_the_pods_listen_on_and_health_has_none() -> None:
    ports = container_ports(CONFIG / "manager.yaml") | container_ports(CONFIG / "manager_webhook_patch.yaml")
    (policy,) = network_policy_docs()
    rules = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
    assert rules.keys() == {ports["webhook"], ports["metrics"]}
    assert ports["health"] not in rules  # kubelet probes come from the node, always allowed
    assert rules[ports["webhook"]] == [{"ipBlock": {"cidr": c}} for c in WEBHOOK_SOURCES]
    assert rules[ports["metrics"]] == [{"namespaceSelector": {"matchLabels": METRICS_NAMESPACES}}]


def test_the_metrics_port_in_the_policy_is_the_one_the_deployment_passes() -> None:
    args = deployment()["spec"]["template"]["spec"]["containers"][0]["args"]
    (policy,) = network_policy_docs()
    assert f"--metrics-port={policy['spec']['ingress'][1]['ports'][0]['port']}" in args
