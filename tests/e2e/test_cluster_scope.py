"""Custom resources of cluster-scoped kinds, made by tests that share the cluster with other workers'
tests: what this worker's clients made is deleted at the test's teardown; what a client of unknown
origin made is reported, labelled and swept when the run ends — unless the test ran alone
(`envtest_clusterwide`), when whatever appeared is its own. Run as a user's project would run,
under `pytest -n 2`, against this session's cluster (`--envtest-backend=existing`)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: gadgets.{group}}}
spec:
  group: {group}
  scope: Cluster
  names: {{plural: gadgets, singular: gadget, kind: Gadget}}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}
"""

MINE = """
import pykube

GROUP = "{group}"


def url(client, name=""):
    return f"{{client.url}}/apis/{{GROUP}}/v1/gadgets" + (f"/{{name}}" if name else "")


def gadget(name):
    # A field of its own: the apiserver records the writer of each field, not of an empty object.
    body = {{"apiVersion": f"{{GROUP}}/v1", "kind": "Gadget", "metadata": {{"name": name}}}}
    return {{**body, "spec": {{"size": 1}}}}


def test_made_with_the_fixture_client(kube):
    kube.session.post(url(kube), json=gadget("by-fixture"), timeout=10).raise_for_status()


def test_the_previous_tests_gadget_is_gone_and_an_unknown_client_makes_another(kube):
    assert kube.session.get(url(kube, "by-fixture"), timeout=10).status_code == 404
    stranger = pykube.HTTPClient(pykube.KubeConfig.from_env())  # KUBECONFIG: the plugin's pointing
    stranger.session.post(url(stranger), json=gadget("by-stranger"), timeout=10).raise_for_status()
"""

OTHER = """
import pykube
import pytest

from test_mine import gadget, url


@pytest.mark.envtest_clusterwide
def test_alone_whatever_appears_is_its_own(kube):
    stranger = pykube.HTTPClient(pykube.KubeConfig.from_env())
    stranger.session.post(url(stranger), json=gadget("made-alone"), timeout=10).raise_for_status()


def test_the_gadget_made_alone_was_deleted_after_its_test(kube):
    assert kube.session.get(url(kube, "made-alone"), timeout=10).status_code == 404
"""


def test_cluster_scoped_objects_are_deleted_after_their_test_or_swept_after_the_run(
    envtest_cluster: Any, tmp_path: Path, timeouts: Any
) -> None:
    group = f"g{secrets.token_hex(4)}.envtest.io"
    (tmp_path / "crd.yaml").write_text(CRD.format(group=group))
    (tmp_path / "pytest.ini").write_text("[pytest]\nenvtest_crds = crd.yaml\n")
    (tmp_path / "test_mine.py").write_text(textwrap.dedent(MINE.format(group=group)))
    (tmp_path / "test_other.py").write_text(OTHER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENVTEST_", "PYTEST_"))}
    env["KUBECONFIG"] = str(envtest_cluster.kubeconfig)
    args = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider"]
    args += ["--envtest-backend=existing", f"--basetemp={tmp_path / 'base'}", "-W", "default"]
    if envtest_cluster.context:
        args.append(f"--envtest-context={envtest_cluster.context}")
    crd_url = (
        f"{envtest_cluster.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}"
    )
    try:
        result = subprocess.run(
            args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeouts(600)
        )  # fmt: skip
        output = f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
        assert result.returncode == 0, output
        assert "4 passed" in output, output
        # The stranger's Gadget could have been another worker's: reported, not deleted by the test.
        assert "ClusterScopedLeftover" in output and "gadgets/by-stranger" in output, output
        # (the other worker's test may see it appear and report it: it cannot tell whose it is)
        assert "test_made_with_the_fixture_client: cluster-scoped" not in output, "it was the test's own"
        assert "made-alone" not in output, "a test that ran alone owns what appeared meanwhile"
        # …and swept when the run ended: nothing of the run is left on the cluster.
        gadgets = f"{envtest_cluster.server}/apis/{group}/v1/gadgets"
        left = envtest_cluster.session.get(gadgets, timeout=timeouts(10))
        assert left.status_code == 200 and left.json()["items"] == [], yaml.safe_dump(left.json())
    finally:
        envtest_cluster.session.delete(crd_url, timeout=timeouts(10))
