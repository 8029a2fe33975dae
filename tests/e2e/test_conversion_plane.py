"""One conversion endpoint per plane, wired by ini `envtest_conversion_webhook`: a pytester project with
a two-version CRD (`data/gadgets-crd.yaml`: v1 `spec.size`, v2 `spec.dimensions.size`) and a tiny
factory reads objects at the version they were not written at — in-process (`-n 0`), in every xdist
worker (the supervisor runs the endpoint), and in a later run that reuses a kept plane (whose CRD
re-apply must keep the conversion)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envtest import binaries
from envtest.clusters import Cluster
from envtest.crds import CRD_API

pytestmark = pytest.mark.envtest_local  # local planes and the supervisor only

pytest_plugins = ["pytester"]

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

GADGETS = "apis/webhooks.envtest.io/{}/namespaces/{}/gadgets"


def gadget(version, name, spec):
    return {"apiVersion": f"webhooks.envtest.io/{version}", "kind": "Gadget",
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
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before pytester moves HOME (and ~/.cache with it): point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))


@pytest.fixture(autouse=True)
def _project(
    _real_binary_cache: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # kept planes live here
    shutil.copy(DATA / "gadgets-crd.yaml", pytester.path / "gadgets-crd.yaml")
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


def test_in_process_plane_converts_through_the_factory_server(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("-n", "0")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["envtest: conversion webhook gadget_conversion:serve serving at https://*"])


def test_every_xdist_worker_converts_through_the_supervisor_endpoint(pytester: pytest.Pytester) -> None:
    basetemp = pytester.path / "base"
    result = pytester.runpytest_subprocess("-n", "2", f"--basetemp={basetemp}")
    result.assert_outcomes(passed=4)
    assert _workers(pytester) == {"gw0", "gw1"}
    log = (basetemp / "envtest-shared" / "supervisor.log").read_text()
    assert log.count("conversion webhook gadget_conversion:serve serving at https://127.0.0.1:") == 1


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
        crd = api.session.get(f"{api.url}/{CRD_API}/gadgets.webhooks.envtest.io", timeout=10).json()
        api.session.close()
        assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == url
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "down", "--name", "conv"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert "conv: stopped" in down.stderr, down.stderr
