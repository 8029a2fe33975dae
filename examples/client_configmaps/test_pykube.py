"""The same operator on pykube-ng: this module swaps the operator by overriding one fixture (no
conftest.py needed); `kube` is the admin's pykube-ng client."""

from __future__ import annotations

from typing import Any

import pykube
import pytest
from mirror import SOURCE_LABEL
from mirror.testing import pykube_operator

from envtest import assert_matches, eventually


@pytest.fixture
def envtest_operator_factory() -> Any:
    return pykube_operator


def test_the_pykube_operator_mirrors_a_labelled_configmap(operator: Any, namespace: str, kube: Any) -> None:
    source = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "limits", "namespace": namespace, "labels": {SOURCE_LABEL: "true"}},
        "data": {"cpu": "2"},
    }
    pykube.ConfigMap(kube, source).create()
    mirrors = pykube.ConfigMap.objects(kube, namespace=namespace)
    eventually(lambda: assert_matches(mirrors.get(name="limits-mirror"), {"data": {"cpu": "2"}}))
