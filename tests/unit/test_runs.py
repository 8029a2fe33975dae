"""Run records and the sweep of dead runs (envtest.runs): a live run is never touched, a dead one
leaves nothing — judged by its owner process and its heartbeat, not by age alone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from envtest import runs

SERVER = "https://apiserver"
NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
            continue
        key, _, value = term.partition("=")
        if (key not in labels) if not value else (labels.get(key) != value):
            return False
    return True


class Resp:
    def __init__(
        self, body: dict[str, Any] | None = None, status: int = 200, headers: dict[str, str] | None = None
    ):
        self._body, self.status_code, self.headers = body or {}, status, headers or {}
        self.text = ""

    @property
    def ok(self) -> bool:
        return self.status_code < 400

    def json(self) -> dict[str, Any]:
        return self._body


class FakeApi:
    """Collections by URL; list, get, put, post and delete (one object or a labelled collection)."""

    def __init__(self, now: datetime = NOW) -> None:
        self.now = now
        self.items: dict[str, dict[str, dict[str, Any]]] = {}  # collection URL → name → object
        self.patched: list[str] = []

    def add(
        self, collection: str, name: str, labels: dict[str, str], created: datetime = NOW, **extra: Any
    ) -> None:
        meta = {"name": name, "labels": labels, "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ")}
        self.items.setdefault(f"{SERVER}/{collection}", {})[name] = {"metadata": meta, **extra}

    def names(self, collection: str) -> set[str]:
        return set(self.items.get(f"{SERVER}/{collection}", {}))

    def get(self, url: str, params: dict[str, str] | None = None, **_: Any) -> Resp:
        if url.endswith("/version"):
            return Resp({}, headers={"Date": self.now.strftime("%a, %d %b %Y %H:%M:%S GMT")})
        if url in self.items:
            sel = (params or {}).get("labelSelector", "")
            return Resp(
                {"items": [o for o in self.items[url].values() if _matches(o["metadata"]["labels"], sel)]}
            )
        collection, name = url.rsplit("/", 1)
        obj = self.items.get(collection, {}).get(name)
        return Resp(obj) if obj else Resp({}, 404)

    def delete(self, url: str, params: dict[str, str] | None = None, **_: Any) -> Resp:
        if url in self.items:
            sel = (params or {}).get("labelSelector", "")
            for name in [n for n, o in self.items[url].items() if _matches(o["metadata"]["labels"], sel)]:
                del self.items[url][name]
            return Resp({})
        collection, name = url.rsplit("/", 1)
        return Resp({}) if self.items.get(collection, {}).pop(name, None) else Resp({}, 404)

    def put(self, url: str, json: dict[str, Any], **_: Any) -> Resp:
        collection, name = url.rsplit("/", 1)
        if name not in self.items.get(collection, {}):
            return Resp({}, 404)
        if "resourceVersion" not in json["metadata"]:  # as the apiserver answers for a Lease
            return Resp({"message": "metadata.resourceVersion: must be specified for an update"}, 422)
        self.items[collection][name] = json
        return Resp(json)

    def post(self, url: str, json: dict[str, Any], **_: Any) -> Resp:
        self.items.setdefault(url, {})[json["metadata"]["name"]] = json
        return Resp(json, 201)

    def patch(self, url: str, data: str = "{}", headers: dict[str, str] | None = None, **_: Any) -> Resp:
        self.patched.append(url)
        collection, name = url.rsplit("/", 1)
        obj = self.items.get(collection, {}).get(name)
        if obj is None:
            return Resp({}, 404)
        if (headers or {}).get("Content-Type") == "application/merge-patch+json":
            _merge(obj, json.loads(data))
        return Resp(obj)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _record(api: FakeApi, run: str, worker: str, holder: str, renewed: datetime) -> None:
    lease = runs._lease(run, worker, holder, renewed)
    api.items.setdefault(f"{SERVER}/{runs.LEASES}", {})[lease["metadata"]["name"]] = lease


def _leftovers(api: FakeApi, run: str, worker: str, created: datetime = NOW) -> None:
    labels = runs.labels(run, worker)
    api.add("api/v1/namespaces", f"ns-{run}-{worker}", labels, created)
    api.add(f"{runs.RBAC_API}/clusterroles", f"role-{run}-{worker}", labels, created)
    api.add(f"{runs.RBAC_API}/clusterrolebindings", f"binding-{run}-{worker}", labels, created)
    api.add(f"{runs.ADMISSION_API}/validatingwebhookconfigurations", f"hook-{run}-{worker}", labels, created)


@pytest.fixture
def gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: this pid names no process now (until the kernel reuses it)
    return proc.pid


def test_a_run_whose_process_on_this_host_is_gone_is_swept_whatever_its_heartbeat(gone_pid: int) -> None:
    api = FakeApi()
    _record(api, "dead", "gw0", f"{runs._machine()}/{gone_pid}/1", renewed=NOW)  # fresh heartbeat
    _leftovers(api, "dead", "gw0")
    report = runs.sweep_dead(api, SERVER, cr_paths=[])  # type: ignore[arg-type]
    assert ("dead", "gw0") in report.removed
    assert api.names("api/v1/namespaces") == set()
    assert api.names(f"{runs.RBAC_API}/clusterroles") == set()
    assert api.names(f"{runs.RBAC_API}/clusterrolebindings") == set()
    assert api.names(f"{runs.ADMISSION_API}/validatingwebhookconfigurations") == set()
    assert api.names(runs.LEASES) == set(), "the record goes with what it owned"


def test_a_live_process_is_never_swept_even_with_an_old_heartbeat() -> None:
    api = FakeApi()
    _record(api, "live", "gw0", runs.holder_identity(), renewed=NOW - timedelta(hours=5))
    _leftovers(api, "live", "gw0", created=NOW - timedelta(hours=5))
    report = runs.sweep_dead(api, SERVER, cr_paths=[])  # type: ignore[arg-type]
    assert report.removed == {}
    assert [v.owner for v in report.live] == [("live", "gw0")]
    assert api.names("api/v1/namespaces") == {"ns-live-gw0"}


def test_a_reused_pid_is_not_the_owner() -> None:
    # Our own pid, started at another time: the process that wrote the record is gone.
    holder = f"{runs._machine()}/{os.getpid()}/12"
    assert runs.process_alive(holder) is False


@pytest.mark.parametrize(("age", "dead"), [(timedelta(seconds=30), False), (timedelta(minutes=10), True)])
def test_another_hosts_run_is_judged_by_its_heartbeat_on_the_apiservers_clock(
    age: timedelta, dead: bool
) -> None:
    api = FakeApi()
    _record(api, "remote", "gw1", "ci-runner-7/4242/100.00", renewed=NOW - age)
    _leftovers(api, "remote", "gw1")
    report = runs.sweep_dead(api, SERVER, cr_paths=[])  # type: ignore[arg-type]
    assert (("remote", "gw1") in report.removed) is dead
    assert (api.names("api/v1/namespaces") == set()) is dead


def test_objects_without_a_record_are_swept_only_once_nothing_of_theirs_is_recent() -> None:
    api = FakeApi()
    _leftovers(api, "old", "main", created=NOW - timedelta(hours=1))
    _leftovers(api, "starting", "gw0", created=NOW - timedelta(seconds=5))
    report = runs.sweep_dead(api, SERVER, cr_paths=[])  # type: ignore[arg-type]
    assert set(report.removed) == {("old", "main")}
    assert api.names("api/v1/namespaces") == {"ns-starting-gw0"}


def test_the_callers_own_run_is_never_judged(gone_pid: int) -> None:
    api = FakeApi()
    _record(api, "mine", "gw0", f"{runs._machine()}/{gone_pid}/1", renewed=NOW)
    _leftovers(api, "mine", "gw0")
    assert runs.sweep_dead(api, SERVER, keep_runs=["mine"], cr_paths=[]).removed == {}  # type: ignore[arg-type]
    assert api.names("api/v1/namespaces") == {"ns-mine-gw0"}


def test_dry_run_reports_and_deletes_nothing(gone_pid: int) -> None:
    api = FakeApi()
    _record(api, "dead", "gw0", f"{runs._machine()}/{gone_pid}/1", renewed=NOW)
    _leftovers(api, "dead", "gw0")
    report = runs.sweep_dead(api, SERVER, dry_run=True, cr_paths=[])  # type: ignore[arg-type]
    assert ("dead", "gw0") in report.removed
    assert api.names("api/v1/namespaces") == {"ns-dead-gw0"}
    assert "dead run dead (gw0)" in runs.describe(report)


def test_finalizers_of_custom_resources_in_a_dead_runs_namespace_are_stripped(gone_pid: int) -> None:
    api = FakeApi()
    _record(api, "dead", "gw0", f"{runs._machine()}/{gone_pid}/1", renewed=NOW)
    _leftovers(api, "dead", "gw0")
    api.add("apis/db.example.com/v1/namespaces/ns-dead-gw0/widgets", "w", {})
    api.items[f"{SERVER}/apis/db.example.com/v1/namespaces/ns-dead-gw0/widgets"]["w"]["metadata"][
        "finalizers"
    ] = ["example.com/cleanup"]
    runs.sweep_dead(api, SERVER, cr_paths=["apis/db.example.com/v1/widgets"])  # type: ignore[arg-type]
    assert api.patched == [f"{SERVER}/apis/db.example.com/v1/namespaces/ns-dead-gw0/widgets/w"]


def test_a_record_is_written_renewed_and_deleted() -> None:
    api = FakeApi()
    moments = iter([NOW, NOW + timedelta(seconds=15)])
    record = runs.RunRecord(api, SERVER, "r1", "gw0", interval=3600, clock=lambda: next(moments))  # type: ignore[arg-type]
    record.start()
    (lease,) = api.items[f"{SERVER}/{runs.LEASES}"].values()
    assert lease["spec"]["holderIdentity"] == runs.holder_identity()
    assert lease["metadata"]["labels"] == runs.labels("r1", "gw0")
    assert record.renew(), "a renewal is accepted by an API that refuses a Lease PUT without resourceVersion"
    assert api.items[f"{SERVER}/{runs.LEASES}"]["r1-gw0"]["spec"]["renewTime"].startswith(
        "2026-12-03T12:00:15"
    )
    record.stop()
    assert api.names(runs.LEASES) == set()
    assert "api/v1/namespaces" in {k.removeprefix(f"{SERVER}/") for k in api.items}, "its namespace was made"


def test_a_zombie_owner_is_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        holder = runs.holder_identity(proc.pid)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie now
        assert runs.process_alive(holder) is False
    finally:
        proc.wait()


def test_another_machine_or_container_on_the_same_host_name_is_judged_by_its_heartbeat() -> None:
    # Same host name, another PID namespace (a container with --network host): its pid says nothing.
    holder = f"{socket.gethostname()}:other-boot:1/{os.getpid()}/1"
    assert runs.process_alive(holder) is None
    api = FakeApi()
    _record(api, "beside", "gw0", holder, renewed=NOW - timedelta(seconds=30))
    _leftovers(api, "beside", "gw0")
    assert runs.sweep_dead(api, SERVER, cr_paths=[]).removed == {}  # type: ignore[arg-type]


def test_objects_without_a_worker_label_are_swept_without_the_live_workers_objects() -> None:
    api = FakeApi()
    _record(api, "mixed", "gw0", runs.holder_identity(), renewed=NOW)
    _leftovers(api, "mixed", "gw0")
    old = NOW - timedelta(minutes=10)
    api.add(
        f"{runs.ADMISSION_API}/validatingwebhookconfigurations", "run-only", {runs.RUN_LABEL: "mixed"}, old
    )
    report = runs.sweep_dead(api, SERVER, cr_paths=[])  # type: ignore[arg-type]
    assert set(report.removed) == {("mixed", "")}
    assert api.names("api/v1/namespaces") == {"ns-mixed-gw0"}, "the live worker's namespace stays"
    assert api.names(f"{runs.ADMISSION_API}/validatingwebhookconfigurations") == {"hook-mixed-gw0"}


@pytest.mark.parametrize("bad", ["CI_Run_7", "-x", "a" * 41, ""])
def test_a_run_id_that_cannot_name_objects_is_refused(bad: str) -> None:
    with pytest.raises(runs.UsageProblem, match="ENVTEST_RUN_ID"):
        runs.check_run_id(bad)


def test_a_record_that_cannot_be_written_fails_the_start() -> None:
    class Refusing(FakeApi):
        def post(self, url: str, json: dict[str, Any], **_: Any) -> Resp:
            return Resp({}, 422) if "/leases" in url else super().post(url, json)

    with pytest.raises(runs.EnvtestError, match="cannot write this run's record"):
        runs.RunRecord(Refusing(), SERVER, "r1", "gw0").start()  # type: ignore[arg-type]


def test_a_refused_renewal_is_reported_and_the_record_kept() -> None:
    class RefusingRenewals(FakeApi):
        refusing = False

        def patch(self, url: str, **kw: Any) -> Resp:
            return Resp({}, 403) if self.refusing and "/leases" in url else super().patch(url, **kw)

    api = RefusingRenewals()
    record = runs.RunRecord(api, SERVER, "r1", "gw0", interval=3600)  # type: ignore[arg-type]
    record.start()
    api.refusing = True  # RBAC changed under the run, say
    assert record.renew() is False
    assert api.names(runs.LEASES) == {"r1-gw0"}, "the record written at the start is still there"


def test_a_renewal_late_for_the_stop_does_not_write_the_record_again() -> None:
    api = FakeApi()
    record = runs.RunRecord(api, SERVER, "r1", "gw0", interval=3600)  # type: ignore[arg-type]
    record.start()
    record.stop()
    assert record.renew() is False  # as a heartbeat the stop's join gave up on would finish
    assert api.names(runs.LEASES) == set()
