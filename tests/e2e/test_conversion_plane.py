"""One conversion endpoint per plane or run, wired by ini `envtest_conversion_webhook`: a pytester project
with a two-version CRD (`data/gadgets-crd.yaml`: v1 `spec.size`, v2 `spec.dimensions.size`) and a tiny
factory reads objects at the version they were not written at.

Local planes: in-process (`-n 0`), in every xdist worker (the supervisor runs the endpoint), and in a
later run that reuses a kept plane (whose CRD re-apply must keep the conversion).

Clusters that are not ours (`envtest.plugin.endpoint`): one endpoint for the run, a detached process
under xdist, gone after the run, and a later run re-points the CRDs at its own. On kind the inner runs use
the outer run's kind cluster; on the local backend they use a private plane as an *existing* cluster
(same code path, no docker), with the host set to 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mysqlkit import Timeouts

from envtest import binaries
from envtest.clusters import Cluster
from envtest.crds import CRD_API
from envtest.plane import supervisor
from envtest.plugin.endpoint import HOST_ENV, STATE_DIR
from envtest.plugin.session import cluster_session

local_only = pytest.mark.envtest_local  # local planes and their supervisor

pytest_plugins = ["pytester"]

GROUP = "conversion.envtest.io"
"""Not test_webhooks' group: on kind the inner runs share the outer run's cluster and its CRDs."""
CRD_NAME = f"gadgets.{GROUP}"

DATA = Path(__file__).parent / "data"

FACTORY = """
from envtest.webhooks import WebhookServer


def convert(obj, to):
    spec = dict(obj.get("spec") or {})
    if to.endswith("/v2") and "size" in spec:
        spec["dimensions"] = {"size": spec.pop("size")}
    elif to.endswith("/v1") and "dimensions" in spec:
        spec["size"] = spec.pop("dimensions")["size"]
    return {**obj, "apiVersion": to, "spec": spec}


def serve(certs):
    server = WebhookServer(certs)
    server.conversion("/convert", convert)
    return server.start()
"""

TESTS = """
import os, pytest

GADGETS = "apis/conversion.envtest.io/{}/namespaces/{}/gadgets"


def gadget(version, name, spec):
    return {"apiVersion": f"conversion.envtest.io/{version}", "kind": "Gadget",
            "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("i", range(4))
def test_gadget_reads_at_the_other_version(i, cluster, namespace):
    s, api = cluster.session, cluster.server
    v1, v2 = (f"{api}/" + GADGETS.format(v, namespace) for v in ("v1", "v2"))
    made = s.post(v1, json=gadget("v1", "a", {"size": i, "colour": "red"}), timeout=10)
    assert made.status_code == 201, made.text
    read = s.get(f"{v2}/a", timeout=10)
    assert read.status_code == 200, read.text
    assert read.json()["spec"] == {"dimensions": {"size": i}, "colour": "red"}
    made = s.post(v2, json=gadget("v2", "b", {"dimensions": {"size": 10 + i}}), timeout=10)
    assert made.status_code == 201, made.text
    assert s.get(f"{v1}/b", timeout=10).json()["spec"] == {"size": 10 + i}
    listed = s.get(v2, timeout=10).json()["items"]
    assert sorted(g["spec"]["dimensions"]["size"] for g in listed) == [i, 10 + i]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    open(f"{worker}-{i}.seen", "w").close()
"""


@pytest.fixture(autouse=True)
def _real_binary_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before pytester moves HOME (and ~/.cache with it): point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    if cluster_session(request.config).settings.backend == "kind":
        # And before _project moves XDG_CACHE_HOME: this worker's kind cluster, opened lazily, must
        # find the kind binary and write its kubeconfig where they really are.
        request.getfixturevalue("cluster")


@pytest.fixture(autouse=True)
def _project(
    _real_binary_cache: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # kept planes live here
    crd = (DATA / "gadgets-crd.yaml").read_text().replace("webhooks.envtest.io", GROUP)
    (pytester.path / "gadgets-crd.yaml").write_text(crd)
    # The factory in a module of the project, not in conftest: the supervisor imports it by name.
    pytester.makepyfile(gadget_conversion=FACTORY, test_gadgets=TESTS)
    pytester.makeini(
        "[pytest]\n"
        "envtest_crds = gadgets-crd.yaml\n"
        "envtest_conversion_webhook = gadget_conversion:serve\n"
        "envtest_components = minimal\n"
    )


def _workers(pytester: pytest.Pytester) -> set[str]:
    return {p.name.split("-")[0] for p in pytester.path.glob("*.seen")}


@local_only
def test_in_process_plane_converts_through_the_factory_server(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("-n", "0")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["envtest: conversion webhook gadget_conversion:serve serving at https://*"])


@local_only
def test_every_xdist_worker_converts_through_the_supervisor_endpoint(pytester: pytest.Pytester) -> None:
    basetemp = pytester.path / "base"
    result = pytester.runpytest_subprocess("-n", "2", f"--basetemp={basetemp}")
    result.assert_outcomes(passed=4)
    assert _workers(pytester) == {"gw0", "gw1"}
    log = (basetemp / "envtest-shared" / "supervisor.log").read_text()
    assert log.count("conversion webhook gadget_conversion:serve serving at https://127.0.0.1:") == 1


@local_only
def test_kept_plane_reused_by_a_later_run_keeps_converting(pytester: pytest.Pytester, tmp_path: Path) -> None:
    keep = ["--envtest-keep", "--envtest-cluster-name=conv"]
    state_file = tmp_path / "xdg" / "envtest" / "clusters" / "conv" / "state.json"
    try:
        pytester.runpytest_subprocess("-n", "0", *keep).assert_outcomes(passed=4)
        url = json.loads(state_file.read_text())["conversion_url"]
        assert url.startswith("https://127.0.0.1:") and url.endswith("/convert")
        # The second run re-applies the CRDs (they may have changed): the conversion must survive.
        pytester.runpytest_subprocess("-n", "2", *keep).assert_outcomes(passed=4)
        assert json.loads(state_file.read_text())["conversion_url"] == url
        state = json.loads(state_file.read_text())
        api = Cluster.new_pykube_from(Path(state["kubeconfig"]))
        crd = api.session.get(f"{api.url}/{CRD_API}/{CRD_NAME}", timeout=Timeouts("local")(10)).json()
        api.session.close()
        assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == url
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "down", "--name", "conv"],
            capture_output=True,
            text=True,
            timeout=Timeouts("local")(120),
        )
    assert "conv: stopped" in down.stderr, down.stderr


# -- kind and existing clusters: one endpoint for the run ------------------------------------------------


class Target:
    """A cluster the inner runs attach to as kind or existing, and what they are told about it."""

    def __init__(self, args: list[str], cluster: Cluster, host: str) -> None:
        self.args, self.cluster, self.host = args, cluster, host
        self.timeouts = Timeouts(cluster.backend)

    def crd_url(self) -> str:
        url = f"{self.cluster.server}/{CRD_API}/{CRD_NAME}"
        crd = self.cluster.session.get(url, timeout=self.timeouts(10)).json()
        return str(crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"])


@pytest.fixture
def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Target:
    backend = cluster_session(request.config).settings.backend
    if backend == "kind":
        kind: Any = request.getfixturevalue("cluster")
        from envtest.webhooks import docker_network_gateway

        args = [
            "--envtest-backend=kind",
            f"--envtest-cluster-name={kind.name}",
            f"--kind-bin={kind.kind_path}",
        ]
        return Target(args, kind, docker_network_gateway("kind"))
    if backend != "local":
        pytest.skip(f"the inner runs attach to kind or to a private plane, not to {backend}")
    plane: Any = request.getfixturevalue("private_cluster")
    monkeypatch.setenv(HOST_ENV, "127.0.0.1")
    return Target(
        ["--envtest-backend=existing", f"--envtest-kubeconfig={plane.kubeconfig}"], plane, "127.0.0.1"
    )


# An existing cluster is expected to run its controllers (a namespace's default ServiceAccount first).
as_existing = pytest.mark.envtest_private(components="etcd,kube-apiserver,kube-controller-manager")


def _refused(url: str, timeout: float) -> bool:
    host, port = url.removeprefix("https://").split("/")[0].rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    return False


@as_existing
def test_every_xdist_worker_converts_through_one_run_endpoint_that_stops_with_the_run(
    pytester: pytest.Pytester, target: Target
) -> None:
    basetemp = pytester.path / "base"
    result = pytester.runpytest_subprocess("-n", "2", f"--basetemp={basetemp}", *target.args)
    result.assert_outcomes(passed=4)
    assert _workers(pytester) == {"gw0", "gw1"}
    state_dir = basetemp / STATE_DIR
    log = (state_dir / "supervisor.log").read_text()
    serving = f"conversion webhook gadget_conversion:serve serving at https://{target.host}:"
    assert log.count(serving) == 1, log  # one endpoint, whichever worker came first
    url = target.crd_url()
    assert url.startswith(f"https://{target.host}:") and url in log
    # The controller stopped it: lock released, nothing listening, no state left to trust.
    assert not supervisor.lock_held(state_dir)
    assert not (state_dir / supervisor.STATE_FILE).exists()
    assert _refused(url, target.timeouts(5))


@as_existing
def test_a_later_run_repoints_the_crds_of_a_kept_cluster_at_its_own_endpoint(
    pytester: pytest.Pytester, target: Target
) -> None:
    keep = [*target.args, "--envtest-keep"]
    first = pytester.runpytest_subprocess("-n", "0", *keep)
    first.assert_outcomes(passed=4)
    first.stdout.fnmatch_lines(
        [f"envtest: conversion webhook gadget_conversion:serve serving at https://{target.host}:*"]
    )
    old = target.crd_url()
    assert _refused(old, target.timeouts(5)), "the cluster is kept, its endpoint is not"
    pytester.runpytest_subprocess("-n", "0", *keep).assert_outcomes(passed=4)  # converts again
    new = target.crd_url()
    assert new != old and new.startswith(f"https://{target.host}:")
