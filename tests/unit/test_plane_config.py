"""Defaults that keep a test plane from throttling or filling up under a large suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests

from envtest import crds
from envtest.errors import ConfigError, CRDError, ProcessError
from envtest.plane import controlplane, flags, kwok
from envtest.plane.controlplane import ControlPlane
from envtest.plane.process import ManagedProcess


def test_controller_manager_and_scheduler_are_not_client_rate_limited():
    for component in ("kube-controller-manager", "kube-scheduler"):
        argv = flags.render(flags.DEFAULT_FLAGS[component])
        assert "--kube-api-qps=1000" in argv and "--kube-api-burst=2000" in argv, component


def test_rate_limits_stay_overridable_per_component():
    argv = flags.render(flags.DEFAULT_FLAGS["kube-scheduler"], {"kube-api-qps": "50"})
    assert "--kube-api-qps=50" in argv and "--kube-api-qps=1000" not in argv


def test_single_member_etcd_elects_itself_at_once_and_the_timing_stays_valid():
    argv = flags.render(flags.DEFAULT_FLAGS["etcd"])
    heartbeat = int(next(a for a in argv if a.startswith("--heartbeat-interval=")).split("=")[1])
    election = int(next(a for a in argv if a.startswith("--election-timeout=")).split("=")[1])
    assert election <= 100, "the default 1000 ms delays kube-apiserver's storage by up to a second"
    assert election >= 5 * heartbeat, "etcd refuses an election timeout under 5 heartbeats"


def test_fake_node_cannot_run_out_of_pods_or_cpu_for_a_large_suite():
    capacity = kwok.fake_node()["status"]["capacity"]
    assert int(capacity["pods"].removesuffix("k")) * 1000 >= 1000 * 10  # 1,000 clusters, several pods each
    assert int(capacity["cpu"].removesuffix("k")) * 1000 >= 1000 * 0.5 * 2  # 1,000 pods at 500m, twice over
    assert capacity == kwok.fake_node()["status"]["allocatable"]


def test_fake_node_capacity_is_overridable_and_keeps_the_rest():
    capacity = kwok.fake_node(capacity={"pods": "110"})["status"]["capacity"]
    assert capacity["pods"] == "110" and capacity["cpu"] == kwok.NODE_CAPACITY["cpu"]


def test_components_get_a_short_stop_grace(tmp_path, monkeypatch):
    launched: list[ManagedProcess] = []
    monkeypatch.setattr(ManagedProcess, "start", lambda self: launched.append(self))
    plane = ControlPlane("minimal", workdir=tmp_path, binary_paths={})
    plane._launch("etcd", tmp_path / "etcd", {}, ready=lambda: True)
    assert launched[0].stop_timeout == 2.0
    plane = ControlPlane("minimal", workdir=tmp_path, stop_grace=0.5)
    plane._launch("etcd", tmp_path / "etcd", {}, ready=lambda: True)
    assert launched[1].stop_timeout == 0.5


class FakeApiserver:
    """Records which stage of start-up was waited for."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane, self.waited = plane, []

    def wait_ready(self, until=None):
        self.waited.append("serving" if until == self.plane._apiserver_serves_crds else "readyz")


def _early_plane(tmp_path, monkeypatch, answers):
    """A plane whose CRD applies answer from `answers` (an int status raises CRDError)."""
    plane = ControlPlane("minimal", workdir=tmp_path, crds=[tmp_path / "crd.yaml"])
    apiserver = FakeApiserver(plane)
    plane.processes["kube-apiserver"] = apiserver  # type: ignore[assignment]
    events: list[str] = []

    def apply(session, server, paths):
        answer = answers.pop(0)
        events.append(f"apply after {apiserver.waited[-1]}")
        if isinstance(answer, int):
            raise CRDError(f"crd.yaml: rejected ({answer})", status=answer)
        return answer

    monkeypatch.setattr(crds, "apply", apply)
    monkeypatch.setattr(
        crds, "wait_all_ready", lambda *a, **k: events.append(f"CRDs waited after {apiserver.waited[-1]}")
    )
    monkeypatch.setattr(ControlPlane, "admin_session", lambda self: None)
    return plane, apiserver, events


def test_crds_are_created_once_kube_apiserver_serves_and_ready_waits_for_readyz_too(tmp_path, monkeypatch):
    plane, apiserver, events = _early_plane(tmp_path, monkeypatch, [["applied"]])
    plane._install_crds_early()
    assert apiserver.waited == ["serving", "readyz"]
    assert events == ["apply after serving", "CRDs waited after readyz"]


def test_a_5xx_while_starting_retries_after_readyz_and_a_refused_crd_fails_at_once(tmp_path, monkeypatch):
    plane, apiserver, events = _early_plane(tmp_path, monkeypatch, [503, ["applied"]])
    plane._install_crds_early()
    assert events == ["apply after serving", "apply after readyz", "CRDs waited after readyz"]

    plane, apiserver, events = _early_plane(tmp_path, monkeypatch, [422])
    with pytest.raises(CRDError, match=r"crd.yaml: rejected \(422\)"):
        plane._install_crds_early()
    assert apiserver.waited == ["serving"], "no retry: the apiserver's answer would be the same"


def test_a_kwok_not_built_by_envtest_is_refused_naming_the_switch_when_streams_are_on(tmp_path: Path) -> None:
    foreign = tmp_path / "assets" / "kwok"
    foreign.parent.mkdir()
    foreign.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigError, match="envtest_pod_streams = false") as caught:
        controlplane._check_patched_kwok(foreign)
    assert str(foreign) in str(caught.value)
    (foreign.parent / "kwok.build").write_text("v0.8.0+envtest.x\n")
    controlplane._check_patched_kwok(foreign)  # envtest's build (its stamp beside it): accepted


def test_kube_apiserver_starts_with_gogc_400_unless_the_environment_sets_gogc():
    assert flags.environment("kube-apiserver", {"PATH": "/bin"}) == {"PATH": "/bin", "GOGC": "400"}
    assert flags.environment("kube-apiserver", {"PATH": "/bin", "GOGC": "100"}) is None, (
        "the user's GOGC wins"
    )
    for component in ("etcd", "kube-controller-manager", "kube-scheduler", "kwok"):
        assert flags.environment(component, {"PATH": "/bin"}) is None, component


def test_launch_hands_the_component_its_environment(tmp_path, monkeypatch):
    launched: list[ManagedProcess] = []
    monkeypatch.setattr(ManagedProcess, "spawn", lambda self: launched.append(self))
    monkeypatch.delenv("GOGC", raising=False)
    plane = ControlPlane("minimal", workdir=tmp_path)
    plane._launch("kube-apiserver", tmp_path / "kube-apiserver", {}, ready=lambda: True, wait=False)
    plane._launch("etcd", tmp_path / "etcd", {}, ready=lambda: True, wait=False)
    assert launched[0].env is not None and launched[0].env["GOGC"] == "400"
    assert launched[0].env["PATH"] == os.environ["PATH"], "the rest is inherited"
    assert launched[1].env is None
    monkeypatch.setenv("GOGC", "150")
    plane._launch("kube-apiserver", tmp_path / "kube-apiserver", {}, ready=lambda: True, wait=False)
    assert launched[2].env is None, "inherits GOGC=150 as it is"


class FakeProcess:
    """A kube-apiserver that runs (or has exited with `returncode`) and logs `log`."""

    def __init__(self, *, running: bool = True, log: str = "", returncode: int | None = None) -> None:
        self.running, self.returncode, self.log = running, returncode, log

    def log_tail(self) -> str:
        return self.log


class HealthzSession:
    """Answers /healthz from a list of statuses (the last repeats) and records the calls."""

    def __init__(self, statuses: list[int], calls: list[str]) -> None:
        self.statuses, self.calls = statuses, calls

    def get(self, url: str, timeout: float):
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        self.calls.append(f"GET {url.rsplit('/', 1)[-1]} {status}")
        if status == 0:
            raise requests.ConnectionError("refused")
        return type("Resp", (), {"status_code": status})()


def _plane_with_pki(tmp_path, monkeypatch, statuses):
    plane = ControlPlane("all", workdir=tmp_path)
    plane._write_pki()
    calls: list[str] = []
    session = HealthzSession(statuses, calls)
    monkeypatch.setattr(ControlPlane, "admin_session", lambda self: session)
    plane.processes["kube-apiserver"] = FakeProcess()  # type: ignore[assignment]
    launched: dict[str, dict[str, str | None]] = {}

    def launch(self, name, binary, args, ready, *, wait=True):
        calls.append(f"launch {name}")
        launched[name] = args

    monkeypatch.setattr(ControlPlane, "_launch", launch)
    return plane, calls, launched


def test_the_controller_manager_is_launched_only_once_healthz_passes(tmp_path, monkeypatch):
    plane, calls, _ = _plane_with_pki(tmp_path, monkeypatch, [500, 0, 200])
    plane._start_controller_manager(tmp_path / "kube-controller-manager")
    assert calls == [
        "GET healthz 500",
        "GET healthz 0",
        "GET healthz 200",
        "launch kube-controller-manager",
    ], "a 500 and a refused connection are both 'not yet'"


def test_healthz_that_never_passes_fails_the_start_with_the_apiserver_log(tmp_path, monkeypatch):
    plane, calls, _ = _plane_with_pki(tmp_path, monkeypatch, [500])
    plane.start_timeout = 0.0
    plane.processes["kube-apiserver"] = FakeProcess(log="hook failed")  # type: ignore[assignment]
    with pytest.raises(controlplane.StartTimeout, match=r"(?s)/healthz not ok after 0s.*hook failed"):
        plane._start_controller_manager(tmp_path / "kube-controller-manager")
    assert "launch kube-controller-manager" not in calls


def test_a_kube_apiserver_that_dies_before_healthz_passes_fails_the_start_with_its_log(tmp_path, monkeypatch):
    plane, calls, _ = _plane_with_pki(tmp_path, monkeypatch, [0])
    dead = FakeProcess(running=False, returncode=-9, log="out of memory")
    plane.processes["kube-apiserver"] = dead  # type: ignore[assignment]
    with pytest.raises(
        ProcessError, match=r"(?s)kube-apiserver exited \(code -9\) before /healthz.*out of memory"
    ):
        plane._start_controller_manager(tmp_path / "kube-controller-manager")
    assert calls == ["GET healthz 0"], "no wait for a deadline once it is gone"


def test_the_default_service_account_wait_takes_a_refused_request_as_not_yet(tmp_path, monkeypatch):
    plane, calls, _ = _plane_with_pki(tmp_path, monkeypatch, [404, 0, 200])
    plane.processes["kube-controller-manager"] = FakeProcess()  # type: ignore[assignment]
    monkeypatch.setattr(controlplane, "poll_pause", lambda polls: 0.0)
    plane._wait_cluster_ready()
    assert calls == ["GET default 404", "GET default 0", "GET default 200"]


def test_a_controller_manager_that_dies_before_the_service_account_fails_the_start_at_once(
    tmp_path, monkeypatch
):
    plane, calls, _ = _plane_with_pki(tmp_path, monkeypatch, [0])
    plane.processes["kube-controller-manager"] = FakeProcess(running=False, returncode=2, log="bad flag")  # type: ignore[assignment]
    with pytest.raises(
        ProcessError,
        match=r"(?s)kube-controller-manager exited \(code 2\) before the default ServiceAccount.*bad flag",
    ):
        plane._wait_cluster_ready()
    assert calls == ["GET default 0"], "no wait for a deadline once it is gone"


def test_start_launches_scheduler_and_kwok_before_it_waits_for_healthz_for_the_controller_manager(
    tmp_path, monkeypatch
):
    plane = ControlPlane("all", workdir=tmp_path)
    order: list[str] = []
    ready = FakeProcess()
    ready.wait_ready = lambda until=None: None  # type: ignore[attr-defined]

    def step(name: str, component: str | None = None):
        def record(self, *args, **kwargs):
            order.append(name)
            if component:
                self.processes[component] = ready

        return record

    monkeypatch.setattr(
        ControlPlane, "_resolve_binaries", lambda self: dict.fromkeys(controlplane.ALL_COMPONENTS)
    )
    for method, component in [
        ("_seed_etcd", None),
        ("_start_etcd", "etcd"),
        ("_write_pki", None),
        ("_start_apiserver", "kube-apiserver"),
        ("_install_crds_early", None),
        ("_start_scheduler", "kube-scheduler"),
        ("_start_kwok", "kwok"),
        ("_wait_healthz", None),
        ("_wait_cluster_ready", None),
    ]:
        monkeypatch.setattr(ControlPlane, method, step(method, component))
    monkeypatch.setattr(
        ControlPlane, "_launch", step("launch kube-controller-manager", "kube-controller-manager")
    )
    monkeypatch.setattr(
        ControlPlane, "_component_kubeconfig", lambda self, name: tmp_path / f"{name}.kubeconfig"
    )
    plane.start()
    assert order.index("_start_scheduler") < order.index("_wait_healthz")
    assert order.index("_start_kwok") < order.index("_wait_healthz")
    assert order.index("_wait_healthz") < order.index("launch kube-controller-manager")
    assert order[-1] == "_wait_cluster_ready"


def test_controller_manager_and_scheduler_serve_a_certificate_of_the_plane_ca(tmp_path, monkeypatch):
    from cryptography import x509

    plane, _, launched = _plane_with_pki(tmp_path, monkeypatch, [200])
    plane._start_controller_manager(tmp_path / "kube-controller-manager")
    plane._start_scheduler(tmp_path / "kube-scheduler")
    assert plane.ca is not None
    ca = x509.load_pem_x509_certificate(plane.ca.cert_pem)
    assert set(launched) == {"kube-controller-manager", "kube-scheduler"}
    for name, args in launched.items():
        cert = x509.load_pem_x509_certificate(Path(str(args["tls-cert-file"])).read_bytes())
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)], name
        assert Path(str(args["tls-private-key-file"])).stat().st_mode & 0o077 == 0, f"{name}: key is private"
        rendered = flags.render(
            flags.DEFAULT_FLAGS[name], args, {"tls-cert-file": None, "tls-private-key-file": None}
        )
        assert not any(a.startswith("--tls-") for a in rendered) and any(
            a.startswith("--cert-dir=") for a in rendered
        ), f"{name}: extra_args can hand it back its self-signed certificate"
