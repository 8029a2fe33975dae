"""`operator/config/network_policy.yaml`: who may reach the operator's pods, where the cluster's network
plugin enforces NetworkPolicy (elsewhere it is inert).

The pods listen on three ports; each gets the narrowest source that still works on any cluster:

- webhook (9443): from any address (`WEBHOOK_SOURCES`). The caller is kube-apiserver, usually on
  control-plane hosts that no pod or namespace selector names; narrow the CIDRs to them where known.
- metrics (8080): from namespaces labelled `metrics: enabled` (the scraper's; kubebuilder's convention).
- health (8081): no rule. kubelet probes come from the pod's own node, which NetworkPolicy always lets
  through.

Any other port, and these from anywhere else, is refused. The webhook stays reachable from every
address on purpose: a policy that shut out an apiserver on another node would, with `failurePolicy:
Fail`, refuse every MySQLCluster write. What bounds a hostile caller there is TLS and the server's
own limits (`runtime/webhook.py`: connections, timeouts, memory budget). Egress is not restricted: the
operator talks to the apiserver, whose address is just as unknowable here.
"""

from __future__ import annotations

from typing import Any

from . import webhooks

METRICS_PORT = 8080
"""The Deployment's `--metrics-port` (operator/config/manager.yaml)."""
WEBHOOK_SOURCES = ("0.0.0.0/0", "::/0")
METRICS_NAMESPACES = {"metrics": "enabled"}


def network_policy_docs() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {
                "name": "mysql-operator",
                "namespace": webhooks.NAMESPACE,
                "labels": webhooks.LABELS,
            },
            "spec": {
                "podSelector": {"matchLabels": webhooks.LABELS},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "ports": [{"port": webhooks.PORT, "protocol": "TCP"}],
                        "from": [{"ipBlock": {"cidr": cidr}} for cidr in WEBHOOK_SOURCES],
                    },
                    {
                        "ports": [{"port": METRICS_PORT, "protocol": "TCP"}],
                        "from": [{"namespaceSelector": {"matchLabels": METRICS_NAMESPACES}}],
                    },
                ],
            },
        }
    ]
