"""The operator's own exec client (`mysql_operator.runtime.podexec`) through a real apiserver, against
kwok's fake pods (their commands run in a folder on this machine), with a certificate identity (the
admin's) and a token one (a ServiceAccount allowed pods/exec and nothing else)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pykube
import pytest
from mysqlkit import Timeouts

from envtest import eventually
from mysql_operator.runtime.podexec import ExecError, exec_in_pod

# kwok runs these commands on this machine: exec is off on the local plane unless a test asks for it.
pytestmark = [pytest.mark.envtest_local, pytest.mark.envtest_pod_exec]

RBAC = "apis/rbac.authorization.k8s.io/v1"


@pytest.fixture
def pod(cluster: Any, namespace: str, timeouts: Timeouts) -> str:
    body = {
        "metadata": {"name": "db"},
        "spec": {
            "containers": [
                {"name": "server", "image": "busybox"},
                {"name": "sidecar", "image": "busybox", "env": [{"name": "WHO", "value": "sidecar"}]},
            ]
        },
    }
    url = f"{cluster.server}/api/v1/namespaces/{namespace}/pods"
    assert cluster.session.post(url, json=body, timeout=timeouts(10)).status_code == 201

    def ready() -> None:
        pod = cluster.session.get(f"{url}/db", timeout=timeouts(10)).json()
        conditions = (pod.get("status") or {}).get("conditions") or []
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in conditions), conditions

    eventually(ready, timeout=timeouts(30))
    return "db"


@pytest.fixture
def admin(cluster: Any) -> pykube.HTTPClient:
    return pykube.HTTPClient(pykube.KubeConfig.from_file(str(cluster.kubeconfig)))


def test_exit_code_and_both_streams_of_the_named_container(
    admin: pykube.HTTPClient, namespace: str, pod: str
) -> None:
    script = 'echo "out $WHO"; echo err >&2; exit 3'
    result = exec_in_pod(admin, namespace, pod, "sidecar", ["sh", "-c", script])
    assert (result.code, result.stdout, result.stderr) == (3, "out sidecar\n", "err\n")
    assert exec_in_pod(admin, namespace, pod, "server", ["sh", "-c", "echo ok"]).code == 0


def test_what_cannot_run_is_an_error_naming_pod_and_cause(
    admin: pykube.HTTPClient, namespace: str, pod: str
) -> None:
    with pytest.raises(ExecError, match=rf"{namespace}/nothing-here .*404"):
        exec_in_pod(admin, namespace, "nothing-here", "server", ["true"])
    with pytest.raises(ExecError, match="no-such-command-envtest"):
        exec_in_pod(admin, namespace, pod, "server", ["no-such-command-envtest"])


def test_a_service_account_token_reaches_exec_only_with_the_grant(
    cluster: Any, namespace: str, pod: str, tmp_path: Path, timeouts: Timeouts
) -> None:
    kubeconfig = cluster.identity_kubeconfig(namespace, "execer", tmp_path / "execer.kubeconfig")
    client = pykube.HTTPClient(pykube.KubeConfig.from_file(str(kubeconfig)))
    with pytest.raises(ExecError, match="403"):
        exec_in_pod(client, namespace, pod, "server", ["true"])
    role = {
        "metadata": {"name": "execer"},
        "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}],
    }
    binding = {
        "metadata": {"name": "execer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "execer"},
        "subjects": [{"kind": "ServiceAccount", "name": "execer", "namespace": namespace}],
    }
    for kind, body in (("roles", role), ("rolebindings", binding)):
        url = f"{cluster.server}/{RBAC}/namespaces/{namespace}/{kind}"
        assert cluster.session.post(url, json=body, timeout=timeouts(10)).status_code == 201
    allowed = eventually(
        lambda: exec_in_pod(client, namespace, pod, "server", ["sh", "-c", "echo granted"]),
        timeout=timeouts(10),
        retry_on=(ExecError,),
        description="exec allowed once the Role is bound",
    )
    assert (allowed.code, allowed.stdout) == (0, "granted\n")
