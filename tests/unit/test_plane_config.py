"""Defaults that keep a test plane from throttling or filling up under a large suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from envtest import crds
from envtest.errors import ConfigError, CRDError
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
