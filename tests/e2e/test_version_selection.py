"""A version selector picks the release a real plane runs, and a kept plane is reused only by a
selector naming that release: `envtest up --k8s-version <minor>.x` against the installed binaries of
the newest pin (no other minor is built for this test: a refusal happens before any install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mysqlkit import Timeouts

from envtest.pins import SUPPORTED
from envtest.plane import supervisor

pytestmark = pytest.mark.envtest_local  # the plane runs from the local binaries

NEWEST, OLDER = SUPPORTED[-1], SUPPORTED[-2]


def test_a_selector_starts_its_release_and_reuses_or_refuses_the_kept_plane(tmp_path: Path) -> None:
    from envtest import binaries
    from envtest.clusters import Cluster

    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        # The real binaries of the newest pin; only the plane's state is temporary.
        "KUBEBUILDER_ASSETS": str(binaries.cache_dir(NEWEST.kubernetes)),
    }
    env.pop("ENVTEST_K8S_VERSION", None)
    local = Timeouts("local")

    def envtest(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envtest.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=local(300),
        )

    up = ("up", "--name", "selected", "--components", "minimal", "--k8s-version")
    try:
        started = envtest(*up, f"{NEWEST.minor}.x")
        assert started.returncode == 0, started.stderr
        state = supervisor.read_state(tmp_path / "cache" / "envtest" / "clusters" / "selected")
        assert state is not None and state.version == NEWEST.kubernetes
        client = Cluster.new_pykube_from(Path(state.kubeconfig))
        try:
            served = client.session.get(f"{client.url}/version", timeout=local(10)).json()
        finally:
            client.session.close()
        assert served["gitVersion"] == f"v{NEWEST.kubernetes}"

        same = envtest(*up, "latest")
        assert same.returncode == 0, same.stderr
        assert "is already running" in same.stderr

        other = envtest(*up, OLDER.minor)
        assert other.returncode == 1
        assert f"k8s version: running {NEWEST.kubernetes}, asked for {OLDER.kubernetes}" in other.stderr
        assert f"{sys.executable} -m envtest.cli down --name selected" in other.stderr
        assert supervisor.read_state(tmp_path / "cache" / "envtest" / "clusters" / "selected") == state
    finally:
        down = envtest("down", "--name", "selected")
    assert down.returncode == 0, down.stderr
