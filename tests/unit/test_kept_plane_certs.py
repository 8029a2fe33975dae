"""Kept planes: certificates valid for a year, and a plane whose certificates end within a day is never
handed out again (not by the plugin's reuse check, not by `envtest up`, not by `envtest env`).

The PKI is the one `ControlPlane` really writes (`_write_pki`, no process started); time is a
parameter (`now=`), so a year passes without waiting for it.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from supervisor_fakes import lock_holder, reap, write_state

from envtest.errors import UsageProblem
from envtest.pki import CertificateAuthority, earliest_not_after
from envtest.plane import expiry, supervise, supervisor
from envtest.plane.controlplane import ControlPlane

VERSION = "1.37.2"
SETTINGS = {"version": VERSION, "components": ["etcd", "kube-apiserver"], "job_pods": "complete"}


def plane_pki(workdir: Path, valid_days: int) -> ControlPlane:
    """What a started plane leaves in its workdir: pki/*.crt|key, admin and component kubeconfigs."""
    plane = ControlPlane("minimal", version=VERSION, workdir=workdir, cert_valid_days=valid_days)
    plane._write_pki()
    plane._component_kubeconfig("kube-controller-manager")
    return plane


def kept_state(tmp_path: Path, valid_days: int) -> supervisor.PlaneState:
    state = write_state(tmp_path / "kept", os.getpid())
    plane_pki(Path(state.workdir), valid_days)
    return state


def every_certificate(workdir: Path) -> list[tuple[str, dt.datetime]]:
    far = dt.datetime.now(dt.UTC) + dt.timedelta(days=10_000)
    return [(e.source, e.not_after) for e in expiry.expiring(workdir, now=far)]


def test_a_kept_plane_gets_certificates_valid_for_a_year(tmp_path: Path) -> None:
    plane = plane_pki(tmp_path / "plane", expiry.KEPT_CERT_VALID_DAYS)
    found = every_certificate(plane.workdir)
    sources = {source for source, _ in found}
    assert {"pki/ca.crt", "pki/apiserver.crt", "pki/admin.crt", "admin.kubeconfig"} <= sources
    assert "kube-controller-manager.kubeconfig" in sources
    year = dt.datetime.now(dt.UTC) + dt.timedelta(days=364)
    assert all(not_after > year for _, not_after in found), found


def test_a_test_plane_keeps_its_short_validity(tmp_path: Path) -> None:
    plane = plane_pki(tmp_path / "plane", 7)
    week = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    assert all(not_after < week for _, not_after in every_certificate(plane.workdir))


def test_the_supervisor_asks_for_kept_validity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, object] = {}

    class Refused(Exception):
        pass

    class RecordingPlane:
        def __init__(self, *args: object, **kwargs: object) -> None:
            asked.update(kwargs)

        def start(self) -> None:
            raise Refused

    locks: list[Any] = []

    def hold_lock(state_dir: Path) -> Any:
        locks.append(supervisor.hold_lock(state_dir))
        return locks[-1]

    monkeypatch.setattr(supervise, "ControlPlane", RecordingPlane)
    monkeypatch.setattr(supervise, "hold_lock", hold_lock)
    monkeypatch.setattr(supervise.signal, "signal", lambda *_: None)  # pytest keeps its handlers
    try:
        with pytest.raises(Refused):
            supervise.main(["--state-dir", str(tmp_path / "kept"), "--name", "kept"])
    finally:
        for lock in locks:  # a real supervisor would now exit, which is what releases it
            lock.close()
    assert asked["cert_valid_days"] == expiry.KEPT_CERT_VALID_DAYS


def test_reuse_is_refused_from_a_day_before_the_certificates_end(tmp_path: Path) -> None:
    state = kept_state(tmp_path, expiry.KEPT_CERT_VALID_DAYS)
    end = earliest_not_after((Path(state.workdir) / "pki" / "apiserver.crt").read_bytes())
    supervisor.check_reusable(state, **SETTINGS, now=end - dt.timedelta(days=30))
    supervisor.check_reusable(state, **SETTINGS, now=end - expiry.RENEW_MARGIN - dt.timedelta(minutes=1))

    with pytest.raises(UsageProblem) as soon:
        supervisor.check_reusable(state, **SETTINGS, now=end - dt.timedelta(hours=5))
    message = str(soon.value)
    assert "control plane 'kept': its certificates expire at" in message
    assert "(in 5 h)" in message and "pki/apiserver.crt" in message
    assert f"{sys.executable} -m envtest.cli down --name kept" in message

    with pytest.raises(UsageProblem, match=r"certificates expired at .*x509: certificate has expired"):
        supervisor.check_reusable(state, **SETTINGS, now=end + dt.timedelta(days=1))


def test_other_settings_are_still_reported_first(tmp_path: Path) -> None:
    state = kept_state(tmp_path, 7)
    late = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    with pytest.raises(UsageProblem, match="job_pods: running complete, asked for hold"):
        supervisor.check_reusable(state, **{**SETTINGS, "job_pods": "hold"}, now=late)


def test_an_expiring_conversion_webhook_ca_refuses_reuse_too(tmp_path: Path) -> None:
    state = kept_state(tmp_path, expiry.KEPT_CERT_VALID_DAYS)
    webhook_ca = CertificateAuthority.create("envtest-webhook-ca", valid_days=7)
    state = supervisor.PlaneState(**{**state.__dict__, "conversion_ca": webhook_ca.cert_pem.decode()})
    in_ten_days = dt.datetime.now(dt.UTC) + dt.timedelta(days=10)
    with pytest.raises(UsageProblem, match=r"\(conversion webhook CA\)"):
        supervisor.check_reusable(state, **SETTINGS, now=in_ten_days)


def test_a_plane_without_readable_certificates_is_not_refused_for_them(tmp_path: Path) -> None:
    state = write_state(tmp_path / "kept", os.getpid())
    (Path(state.workdir) / "pki").mkdir(parents=True)
    (Path(state.workdir) / "pki" / "ca.crt").write_text("not a certificate")
    assert supervisor.certificate_problem(state) is None


# -- as a user meets it: `envtest up` and `envtest env` on a plane that expired ----------------------


def expired_certificate(days_ago: int) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "envtest-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=days_ago + 7))
        .not_valid_after(now - dt.timedelta(days=days_ago))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_envtest_up_and_env_refuse_an_expired_plane_naming_the_down_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ENVTEST_K8S_VERSION", raising=False)
    state_dir = tmp_path / "envtest" / "clusters" / "kept"
    holder = lock_holder(state_dir)
    try:
        state = write_state(state_dir, holder.pid)
        pki = Path(state.workdir) / "pki"
        pki.mkdir(parents=True)
        (pki / "apiserver.crt").write_bytes(expired_certificate(days_ago=2))
        env = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "env", "--name", "kept"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        up = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "up", "--name", "kept", "--components", "minimal"],
            capture_output=True,
            text=True,
            timeout=60,  # it refuses at once; starting a plane would be the bug
        )
        assert holder.poll() is None, "refusing must not stop the plane"
    finally:
        reap(holder)
        if holder.stdout is not None:
            holder.stdout.close()
    for result in (env, up):
        assert result.returncode == 1, result.stderr
        assert "export KUBECONFIG" not in result.stdout
        assert "certificates expired at" in result.stderr and "pki/apiserver.crt" in result.stderr
        assert f"{sys.executable} -m envtest.cli down --name kept" in result.stderr
