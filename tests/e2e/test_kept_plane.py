"""A kept plane (`envtest up`) as its supervisor really leaves it: a year of certificate validity on
the wire, private state on disk, and a refusal to reuse it once its certificates are about to end."""

from __future__ import annotations

import datetime as dt
import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mysqlkit import Timeouts

from envtest import eventually
from envtest.errors import UsageProblem
from envtest.pki import earliest_not_after
from envtest.plane import expiry, supervisor

pytestmark = pytest.mark.envtest_local  # the plane runs from the local binaries


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_kept_plane_serves_a_year_long_certificate_from_private_files(tmp_path: Path) -> None:
    from envtest import binaries

    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "KUBEBUILDER_ASSETS": str(binaries.cache_dir()),  # the real binaries; only state is temporary
    }
    local = Timeouts("local")
    state_dir = tmp_path / "cache" / "envtest" / "clusters" / "kept-certs"

    def envtest(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envtest.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=local(300),
        )

    try:
        up = envtest("up", "--name", "kept-certs", "--components", "minimal")
        assert up.returncode == 0, up.stderr
        state = supervisor.read_state(state_dir)
        assert state is not None

        # On the wire: the certificate the running apiserver presents.
        address = urlsplit(state.server)
        served = ssl.get_server_certificate((address.hostname or "", address.port or 0)).encode()
        a_year_less_a_day = dt.datetime.now(dt.UTC) + dt.timedelta(days=expiry.KEPT_CERT_VALID_DAYS - 1)
        assert earliest_not_after(served) > a_year_less_a_day

        # On disk: only its owner can read the state, the keys or the kubeconfigs.
        workdir = Path(state.workdir)
        for directory in (state_dir, workdir, workdir / "pki"):
            assert _mode(directory) == 0o700, f"{directory} is {oct(_mode(directory))}"
        keys = sorted((workdir / "pki").glob("*.key"))
        assert {k.name for k in keys} >= {"ca.key", "apiserver.key", "admin.key", "sa.key"}
        for private in [*keys, Path(state.kubeconfig)]:
            assert _mode(private) == 0o600, f"{private} is {oct(_mode(private))}"

        # A year on, the same plane is refused by name, with the command that replaces it.
        settings = {"version": state.version, "components": state.components, "job_pods": state.job_pods}
        supervisor.check_reusable(state, **settings)
        with pytest.raises(UsageProblem, match="down --name kept-certs"):
            supervisor.check_reusable(
                state,
                **settings,
                now=dt.datetime.now(dt.UTC) + dt.timedelta(days=expiry.KEPT_CERT_VALID_DAYS),
            )
    finally:
        down = envtest("down", "--name", "kept-certs")
    assert down.returncode == 0, down.stderr
    eventually(lambda: _assert_gone(state_dir), timeout=local(30))


def _assert_gone(state_dir: Path) -> None:
    assert supervisor.read_state(state_dir) is None and not state_dir.exists()
