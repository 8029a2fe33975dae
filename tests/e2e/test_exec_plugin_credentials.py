"""The existing backend with an exec-plugin user (as EKS and GKE kubeconfigs have), against a real
apiserver: the plugin runs once per credential, not once per request.

The plugin stands in for `aws eks get-token`: it prints a ServiceAccount token of this cluster as an
ExecCredential and appends a line to a counter file on every run. The apiserver itself says whose
requests they were (SelfSubjectReview), so the token really is what authenticated them.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s_client
from mysqlkit import Timeouts

from envtest.clusters import ExistingCluster

API = "client.authentication.k8s.io/v1beta1"
REVIEW = "apis/authentication.k8s.io/v1/selfsubjectreviews"
BODY = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}

PLUGIN = """\
#!{python} -S
import json, sys
with open(sys.argv[1], "a") as fh:
    fh.write("run\\n")
print(open(sys.argv[2]).read())
"""


def _exec_kubeconfig(tmp_path: Path, identity: Path) -> tuple[Path, Path]:
    """A kubeconfig for the identity's cluster whose user is the counting plugin (no token inline)."""
    config = yaml.safe_load(identity.read_text())
    token = config["users"][0]["user"]["token"]
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    credential = tmp_path / "credential.json"
    credential.write_text(
        json.dumps(
            {
                "apiVersion": API,
                "kind": "ExecCredential",
                "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
            }
        )
    )
    plugin = tmp_path / "fake-get-token"
    plugin.write_text(PLUGIN.format(python=sys.executable))
    plugin.chmod(0o755)
    counter = tmp_path / "runs"
    config["users"] = [
        {
            "name": "eks-user",
            "user": {
                "exec": {"apiVersion": API, "command": str(plugin), "args": [str(counter), str(credential)]}
            },
        }
    ]
    for context in config["contexts"]:
        context["context"]["user"] = "eks-user"
    path = tmp_path / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, counter


def _runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_an_exec_plugin_user_fetches_its_token_once_for_many_requests(
    cluster: Any, namespace: str, tmp_path: Path, timeouts: Timeouts
) -> None:
    identity = cluster.identity_kubeconfig(namespace, "exec-user", tmp_path / "identity.kubeconfig")
    kubeconfig, counter = _exec_kubeconfig(tmp_path, identity)
    expected = f"system:serviceaccount:{namespace}:exec-user"

    existing = ExistingCluster(kubeconfig)
    try:
        session, server = existing.session, existing.server
        for _ in range(10):
            resp = session.post(f"{server}/{REVIEW}", json=BODY, timeout=timeouts(10))
            assert resp.status_code == 201, resp.text
            assert resp.json()["status"]["userInfo"]["username"] == expected
        assert session.get(f"{server}/version", timeout=timeouts(10)).status_code == 200
        other = existing.new_pykube()  # a second client of the same user shares the credential
        resp = other.session.post(f"{other.url}/{REVIEW}", json=BODY, timeout=timeouts(10))
        assert resp.json()["status"]["userInfo"]["username"] == expected
        other.session.close()
        assert _runs(counter) == 1, "the plugin ran per request"

        # The kubernetes client keeps a credential of its own: one more run, then none per request.
        reviews = k8s_client.AuthenticationV1Api(existing.k8s)
        for _ in range(5):
            review = reviews.create_self_subject_review(k8s_client.V1SelfSubjectReview())
            assert review.status.user_info.username == expected
        assert _runs(counter) == 2
    finally:
        existing.close()
