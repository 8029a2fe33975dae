"""What `make deploy` installs, judged by a real apiserver: no served version it cannot convert.

The Makefile's `deploy` recipe is read, not restated: its `kubectl apply -f` files are applied here in
its order (server-side apply; on a plane without them kubectl's client-side apply creates the same
objects). No operator Deployment runs on the local plane, so the CRD is tested as installed: a
version served under conversion strategy None is relabelled, not converted, and a v1alpha1 object's
`storageSize` (v1beta1 and later say `storage.size`) would be dropped on the way to storage.

Each test has a private plane: it deletes and re-installs the CRD, which must not happen under the
feet of other tests.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mysqlkit import ROOT

from envtest import crds, eventually
from envtest.objects import apply, load_manifests
from envtest.webhooks import serving_certs, wait_converting
from envtest.webhooks.config import ca_bundle
from mysql_operator.webhooks.server import CONVERT_PATH, server

pytestmark = pytest.mark.envtest_private(components="minimal")

CRD_NAME = "mysqlclusters.db.example.com"
GROUP = "db.example.com"
CONVERSION_PATCH = ROOT / "operator" / "config" / "crd_conversion_patch.yaml"
SPOKE = "v1alpha1"


def deploy_files(makefile: Path = ROOT / "Makefile") -> list[Path]:
    """The files `make deploy` applies, in order; fails on any command this test does not mirror."""
    match = re.search(r"^deploy:[^\n]*\n((?:\t[^\n]*\n)+)", makefile.read_text(), re.M)
    assert match, f"{makefile}: no `deploy` target"
    recipe = match.group(1).replace("\\\n", " ")
    files: list[Path] = []
    for line in recipe.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[:2] == ["kubectl", "apply"], f"`make deploy` runs {line.strip()!r}: mirror it here"
        files += [ROOT / words[i + 1] for i, w in enumerate(words) if w == "-f"]
    assert files, "`make deploy` applies nothing"
    return files


class Plane:
    def __init__(self, cluster: Any, timeouts: Any) -> None:
        self.s, self.api, self.timeouts = cluster.session, cluster.server, timeouts

    def crd(self) -> dict[str, Any]:
        resp = self.s.get(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(10))
        assert resp.status_code == 200, resp.text[:300]
        return resp.json()  # type: ignore[no-any-return]

    def remove_crd(self) -> None:
        """Start from a plane without the CRD (the harness installs the project's own)."""
        resp = self.s.delete(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(30))
        assert resp.status_code in (200, 202, 404), resp.text[:300]

        def gone() -> None:
            got = self.s.get(f"{self.api}/{crds.CRD_API}/{CRD_NAME}", timeout=self.timeouts(10))
            assert got.status_code == 404, "CRD still there"

        eventually(gone, timeout=self.timeouts(60))

    def make_deploy(self) -> None:
        for path, doc in load_manifests(deploy_files()):
            apply(self.s, self.api, doc, source=path)
            if doc["kind"] == "CustomResourceDefinition":
                crds.wait_ready(self.s, self.api, self.crd(), timeout=self.timeouts(60))

    def url(self, version: str, namespace: str, name: str = "") -> str:
        base = f"{self.api}/apis/{GROUP}/{version}/namespaces/{namespace}/mysqlclusters"
        return f"{base}/{name}" if name else base


@pytest.fixture
def plane(private_cluster: Any, timeouts: Any) -> Plane:
    p = Plane(private_cluster, timeouts)
    p.remove_crd()
    p.make_deploy()
    return p


@pytest.fixture
def namespace(private_cluster: Any, envtest_context: Any) -> str:
    return envtest_context.create_namespace(private_cluster)  # type: ignore[no-any-return]


def spoke_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{SPOKE}",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "storageSize": "5Gi"},
    }


def storage_version(crd: dict[str, Any]) -> str:
    (stored,) = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    return stored


def served(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}


def round_trip_or_refusal(plane: Plane, namespace: str) -> str:
    """Create a v1alpha1 object with storageSize 5Gi; 'refused' when that version is not served,
    'round-trip' when the size survives reads at the storage version and at v1alpha1."""
    made = plane.s.post(plane.url(SPOKE, namespace), json=spoke_object("spoke"), timeout=plane.timeouts(30))
    if made.status_code == 404:
        discovery = plane.s.get(f"{plane.api}/apis/{GROUP}", timeout=plane.timeouts(10)).json()
        offered = [v["version"] for v in discovery["versions"]]
        assert SPOKE not in offered, f"{SPOKE} is in discovery ({offered}) but its endpoint answers 404"
        return "refused"  # what kubectl reports as: no matches for kind "MySQLCluster" in version …
    assert made.status_code == 201, made.text[:300]
    stored = storage_version(plane.crd())
    hub = wait_converting(plane.s, plane.url(stored, namespace, "spoke"))
    assert (hub["spec"].get("storage") or {}).get("size") == "5Gi", f"stored without its size: {hub['spec']}"
    back = wait_converting(plane.s, plane.url(SPOKE, namespace, "spoke"))
    assert back["spec"].get("storageSize") == "5Gi", f"read back without its size: {back['spec']}"
    return "round-trip"


def test_the_makefile_deploy_recipe_is_what_this_test_mirrors() -> None:
    files = deploy_files()
    assert files[0] == ROOT / "api" / "crd", "the CRD first: the rest may refer to its kind"
    assert all(p.exists() for p in files), [p for p in files if not p.exists()]


def test_make_deploy_serves_no_version_it_cannot_convert(plane: Plane, namespace: str) -> None:
    crd = plane.crd()
    if crd["spec"]["conversion"]["strategy"] == "None":
        stored = storage_version(crd)
        hub_schema = served(crd)[stored]["schema"]
        relabelled = [n for n, v in served(crd).items() if n != stored and v["schema"] != hub_schema]
        assert not relabelled, (
            f"strategy None relabels; served {relabelled} differ from the stored {stored}: objects written "
            "there lose fields silently"
        )
    assert round_trip_or_refusal(plane, namespace) in ("refused", "round-trip")


@pytest.fixture
def hooks(tmp_path: Path) -> Iterator[Any]:
    started = server(serving_certs(tmp_path / "certs")).start()
    try:
        yield started
    finally:
        started.stop()


def test_the_webhook_patch_serves_v1alpha1_only_through_the_webhook(
    plane: Plane, namespace: str, hooks: Any
) -> None:
    """`make deploy`, then the webhook install's CRD patch (the documented path, with or without
    cert-manager), pointed at a local server: the Service it names does not exist on this plane."""
    patch = copy.deepcopy(yaml.safe_load(CONVERSION_PATCH.read_text()))
    conversion = patch["spec"]["conversion"]
    assert conversion["strategy"] == "Webhook"
    conversion["webhook"]["clientConfig"] = {
        "url": f"{hooks.url}{CONVERT_PATH}",
        "caBundle": ca_bundle(hooks.ca_pem),
        "service": None,
    }
    resp = plane.s.patch(
        f"{plane.api}/{crds.CRD_API}/{CRD_NAME}",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
        timeout=plane.timeouts(30),
    )
    assert resp.status_code == 200, resp.text[:300]
    crd = resp.json()
    assert SPOKE in served(crd), f"after the webhook patch {SPOKE} must be served: {list(served(crd))}"
    crds.wait_ready(plane.s, plane.api, crd, timeout=plane.timeouts(60))
    assert round_trip_or_refusal(plane, namespace) == "round-trip"
    assert hooks.served(CONVERT_PATH) >= 1, "converted by the webhook, not relabelled"
