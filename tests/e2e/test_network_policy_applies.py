"""The generated NetworkPolicy is one a real apiserver accepts as written (schema, CIDRs, selectors):
created in a test namespace, read back unchanged. Whether a plugin enforces it is the cluster's."""

from __future__ import annotations

import copy
from typing import Any

import pykube

from mysql_operator.manifests.network_policy import network_policy_docs


class NetworkPolicy(pykube.objects.NamespacedAPIObject):
    version = "networking.k8s.io/v1"
    endpoint = "networkpolicies"
    kind = "NetworkPolicy"


def test_the_apiserver_accepts_the_network_policy_as_generated(kube: Any, namespace: str) -> None:
    (doc,) = network_policy_docs()
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    NetworkPolicy(kube, doc).create()
    stored = NetworkPolicy.objects(kube, namespace=namespace).get(name=doc["metadata"]["name"])
    assert stored.obj["spec"] == doc["spec"]
