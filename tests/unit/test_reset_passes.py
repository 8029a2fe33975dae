"""What a reset writes, in which order and in how many transactions, and when it gives up; against
a dict standing in for etcd's key space (tests/e2e/test_plane_reset.py runs it on real planes)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest
from stepclock import StepClock

from envtest.plane import reset
from envtest.plane.reset import ResetError, ResetPoint


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


class FakeEtcd:
    """Keys → (value, lease) with etcd's range and txn as the gateway answers them; ``writer`` runs
    after every transaction, as a controller reacting to it would."""

    def __init__(self, keys: dict[bytes, bytes], writer: Any = None) -> None:
        self.keys = {k: (v, 0) for k, v in keys.items()}
        self.written = dict.fromkeys(keys, 1)
        self.on_range: Any = None
        self.revision = 1
        self.txns: list[list[dict[str, Any]]] = []
        self.writer = writer

    def range(self, _session: Any, _url: str) -> tuple[int, dict[bytes, dict[str, Any]]]:
        if self.on_range:
            self.on_range(self)
        kvs = {}
        for k, (v, lease) in self.keys.items():
            written = str(self.written.get(k, 0))
            kvs[k] = {"key": _b64(k), "value": _b64(v), "lease": str(lease), "mod_revision": written}
        return self.revision, kvs

    def write(self, key: bytes, value: bytes, lease: int = 0) -> None:
        self.revision += 1
        self.keys[key] = (value, lease)
        self.written[key] = self.revision

    def txn(self, _session: Any, _url: str, ops: list[dict[str, Any]]) -> None:
        self.txns.append(ops)
        for op in ops:
            if "request_put" in op:
                put = op["request_put"]
                self.keys[base64.b64decode(put["key"])] = (base64.b64decode(put["value"]), 0)
                self.written[base64.b64decode(put["key"])] = self.revision + 1
            else:
                self.keys.pop(base64.b64decode(op["request_delete_range"]["key"]), None)
        self.revision += 1
        if self.writer:
            self.writer(self)


@pytest.fixture
def etcd(monkeypatch: pytest.MonkeyPatch) -> FakeEtcd:
    fake = FakeEtcd(
        {
            b"/registry/namespaces/default": b"default v1",
            b"/registry/serviceaccounts/default/default": b"sa",
            b"/registry/leases/kube-node-lease/node": b"renewed at 1",
        }
    )
    monkeypatch.setattr(reset, "_range", fake.range)
    monkeypatch.setattr(reset, "_txn", fake.txn)
    monkeypatch.setattr(reset, "SETTLE", 0.0)
    return fake


def test_a_reset_deletes_new_keys_restores_changed_ones_and_leaves_live_ones(etcd: FakeEtcd) -> None:
    point = ResetPoint.capture("http://etcd")
    assert set(point.values) == {
        b"/registry/namespaces/default",
        b"/registry/serviceaccounts/default/default",
    }
    assert point.live == {b"/registry/leases/kube-node-lease/node"}

    etcd.keys[b"/registry/pods/t/p"] = (b"pod", 0)
    etcd.keys[b"/registry/namespaces/t"] = (b"ns", 0)
    etcd.keys[b"/registry/events/t/e"] = (b"event", 7)  # Events carry an etcd lease
    etcd.keys[b"/registry/leases/t/mine"] = (b"a test's Lease", 0)
    etcd.keys[b"/registry/namespaces/default"] = (b"default v2", 0)
    del etcd.keys[b"/registry/serviceaccounts/default/default"]
    etcd.keys[b"/registry/leases/kube-node-lease/node"] = (b"renewed at 2", 0)

    report = reset.reset_to("http://etcd", point)

    assert {k: v for k, (v, _) in etcd.keys.items()} == {
        b"/registry/namespaces/default": b"default v1",
        b"/registry/serviceaccounts/default/default": b"sa",
        b"/registry/leases/kube-node-lease/node": b"renewed at 2",  # its holder's, not the point's
    }
    assert (report.deleted, report.restored, report.passes) == (4, 2, 2)
    assert report.kinds == {"pods": 1, "namespaces": 2, "events": 1, "leases": 1, "serviceaccounts": 1}
    assert len(etcd.txns) == 1, "one transaction holds them all"


def test_a_reset_with_nothing_to_do_writes_nothing(etcd: FakeEtcd) -> None:
    report = reset.reset_to("http://etcd", ResetPoint.capture("http://etcd"))
    assert (report.deleted, report.restored, report.passes, etcd.txns) == (0, 0, 1, [])


def test_a_writer_that_never_stops_makes_the_reset_fail_naming_what_it_wrote(etcd: FakeEtcd) -> None:
    point = ResetPoint.capture("http://etcd")
    made = iter(range(1000))
    etcd.writer = lambda fake: fake.keys.update({f"/registry/configmaps/t/c{next(made)}".encode(): (b"", 0)})
    etcd.keys[b"/registry/configmaps/t/first"] = (b"", 0)
    with pytest.raises(ResetError, match=r"during 3 reset passes.*configmaps/t/c2.*operator or a test still"):
        reset.reset_to("http://etcd", point, max_passes=3)


def test_a_writer_that_stops_is_caught_by_the_next_pass(etcd: FakeEtcd) -> None:
    point = ResetPoint.capture("http://etcd")
    etcd.keys[b"/registry/replicasets/t/rs"] = (b"", 0)
    once = [b"/registry/pods/t/made-in-reaction"]
    etcd.writer = lambda fake: once and fake.keys.update({once.pop(): (b"", 0)})
    report = reset.reset_to("http://etcd", point)
    assert report.passes == 3 and report.kinds == {"replicasets": 1, "pods": 1}
    assert set(etcd.keys) == set(point.values) | set(point.live)


def test_a_settled_point_waits_for_the_kubernetes_service_and_for_quiet(etcd: FakeEtcd) -> None:
    clock = StepClock()
    late = reset.LATE_KEYS[0]

    # A controller still at its start: a ServiceAccount per range until t=1, the Service at t=1.5;
    # a live key is renewed all along, which is not a write the point waits out.
    def start_up(fake: FakeEtcd) -> None:
        fake.write(b"/registry/leases/kube-node-lease/node", str(clock.now).encode())
        if clock.now < 1.0:
            fake.write(f"/registry/serviceaccounts/ns{len(fake.keys)}/default".encode(), b"sa")
        if clock.now >= 1.5 and late not in fake.keys:
            fake.write(late, b"svc")

    etcd.on_range = start_up
    point = ResetPoint.settled("http://etcd", quiet=0.3, clock=clock, sleep=clock.sleep)
    assert late in point.values
    assert clock.now >= 1.5 + 0.3 - 1e-9 and clock.now < 2.0, clock.now
    sas = [k for k in point.values if k.startswith(b"/registry/serviceaccounts/ns")]
    assert len(sas) == sum(k.startswith(b"/registry/serviceaccounts/ns") for k in etcd.keys)


def test_a_settled_point_is_taken_as_it_is_when_the_plane_never_goes_quiet(etcd: FakeEtcd) -> None:
    clock = StepClock()
    etcd.on_range = lambda fake: fake.write(f"/registry/configmaps/x/c{clock.now}".encode(), b"")
    point = ResetPoint.settled("http://etcd", timeout=2.0, clock=clock, sleep=clock.sleep)
    assert 2.0 <= clock.now < 2.1 and reset.LATE_KEYS[0] not in point.values


def test_the_last_allowed_pass_that_leaves_nothing_is_a_success(etcd: FakeEtcd) -> None:
    point = ResetPoint.capture("http://etcd")
    etcd.keys[b"/registry/pods/t/p"] = (b"", 0)
    reactions = [b"/registry/events/t/reaction"]
    etcd.writer = lambda fake: reactions and fake.keys.update({reactions.pop(): (b"", 0)})
    report = reset.reset_to("http://etcd", point, max_passes=2)
    assert (report.passes, report.deleted) == (3, 2)


def test_a_point_takes_the_applied_crds_from_another_and_keeps_the_rest() -> None:
    crd = {"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com"}}
    crd["spec"]["versions"] = [{"name": "v1"}, {"name": "v2"}]  # type: ignore[index]
    applied = reset.crd_keys([crd])
    widgets = b"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
    v2 = b"/registry/apiregistration.k8s.io/apiservices/v2.example.com"
    assert applied == {widgets, b"/registry/apiregistration.k8s.io/apiservices/v1.example.com", v2}
    other_crd = b"/registry/apiextensions.k8s.io/customresourcedefinitions/gadgets.example.com"
    old = ResetPoint(1, {b"/registry/namespaces/a": b"a", widgets: b"w1"}, frozenset({b"/registry/leases/l"}))
    now = ResetPoint(
        9, {b"/registry/namespaces/b": b"b", widgets: b"w2", v2: b"s", other_crd: b"g"}, frozenset()
    )
    merged = old.with_keys_of(now, applied)
    # The applied CRD as it is now, with its APIService; a CRD made since and everything else as before.
    assert merged.values == {b"/registry/namespaces/a": b"a", widgets: b"w2", v2: b"s"}
    assert merged.live == old.live


def test_transactions_keep_within_etcds_operation_and_size_limits() -> None:
    small = [{"request_delete_range": {"key": "k"}}] * (reset.MAX_TXN_OPS + 1)
    assert [len(b) for b in reset._batches(small)] == [reset.MAX_TXN_OPS, 1]
    big = {"request_put": {"key": "k", "value": "v" * (reset.MAX_TXN_BYTES // 2 + 1)}}
    assert [len(b) for b in reset._batches([big, big, big])] == [1, 1, 1]


def test_resource_names_of_core_and_group_keys() -> None:
    assert reset._resource(b"/registry/pods/ns/p") == "pods"
    assert reset._resource(b"/registry/db.example.com/mysqlclusters/ns/c") == "mysqlclusters"
    assert reset._resource(b"/registry/apiextensions.k8s.io/customresourcedefinitions/x") == (
        "customresourcedefinitions"
    )


def test_a_saved_point_loads_the_same_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    point = ResetPoint(5, {b"/registry/secrets/ns/s": b"\x00\xffkey"}, frozenset({b"/registry/leases/x"}))
    path = tmp_path / "reset-point.json"
    point.save(path)
    assert ResetPoint.load(path) == point
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_missing_or_broken_point_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ResetError, match=r"reset-point.json: no reset point"):
        ResetPoint.load(tmp_path / "reset-point.json")
    (tmp_path / "reset-point.json").write_text("{}")
    with pytest.raises(ResetError, match=r"reset-point.json: not a reset point"):
        ResetPoint.load(tmp_path / "reset-point.json")
