"""Defaults that keep a test plane from throttling or filling up under a large suite."""

from __future__ import annotations

from envtest.plane import flags, kwok
from envtest.plane.controlplane import ControlPlane
from envtest.plane.process import ManagedProcess


def test_controller_manager_and_scheduler_are_not_client_rate_limited():
    for component in ("kube-controller-manager", "kube-scheduler"):
        argv = flags.render(flags.DEFAULT_FLAGS[component])
        assert "--kube-api-qps=1000" in argv and "--kube-api-burst=2000" in argv, component


def test_rate_limits_stay_overridable_per_component():
    argv = flags.render(flags.DEFAULT_FLAGS["kube-scheduler"], {"kube-api-qps": "50"})
    assert "--kube-api-qps=50" in argv and "--kube-api-qps=1000" not in argv


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
