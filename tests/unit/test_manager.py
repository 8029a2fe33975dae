from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pykube
import pytest
import requests
from prometheus_client import CollectorRegistry
from runtime_fakes import PATIENCE, FakeApiServer, wait_for

from mysql_operator.runtime import leader
from mysql_operator.runtime.client import request_labels
from mysql_operator.runtime.controller import Controller
from mysql_operator.runtime.fence import Fenced
from mysql_operator.runtime.leader import format_micro_time
from mysql_operator.runtime.manager import WRITE_VERBS, Manager, ManagerError, ManagerOptions
from mysql_operator.runtime.metrics import ProbeServer
from mysql_operator.runtime.types import Key, Result


class Recording:
    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.lock = threading.Lock()

    def reconcile(self, key: Key) -> Result:
        with self.lock:
            self.keys.append(key)
        return Result()


class Crashing:
    """SystemExit escapes the worker (reconcile errors and bugs requeue), as a runtime bug would."""

    def reconcile(self, key: Key) -> Result:
        raise SystemExit("worker bug")


class Buggy:
    """A reconciler with a bug on one key; reconciles the others."""

    def __init__(self) -> None:
        self.keys: list[Key] = []

    def reconcile(self, key: Key) -> Result:
        if key == Key("default/bad"):
            raise KeyError("spec")
        self.keys.append(key)
        return Result()


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    api = FakeApiServer()
    yield api
    api.close()


@pytest.fixture
def managers() -> Iterator[list[Manager]]:
    made: list[Manager] = []
    yield made
    for manager in made:
        manager.stop(timeout=5)


def manager_for(
    server: FakeApiServer, managers: list[Manager], reconciler: object, **options: object
) -> Manager:
    manager = Manager(server.client, ManagerOptions(**options))  # type: ignore[arg-type]
    manager.add(Controller("configmaps", reconciler).for_(pykube.ConfigMap))  # type: ignore[arg-type]
    managers.append(manager)
    return manager


def scrape(address: tuple[str, int] | None, path: str) -> requests.Response:
    assert address is not None
    return requests.get(f"http://{address[0]}:{address[1]}{path}", timeout=5)


def test_manager_reconciles_listed_and_watched_objects(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    server.put_configmap("ns", "listed")
    reconciler = Recording()
    manager = manager_for(server, managers, reconciler, namespaces=("ns",))
    manager.start()
    assert manager.is_leader, "without leader election a running manager reconciles"
    assert manager.informer(pykube.ConfigMap).has_synced()
    server.put_configmap("ns", "watched")
    wait_for(lambda: {"ns/listed", "ns/watched"} <= set(reconciler.keys), what="both reconciles")
    assert manager.errors == []


def test_a_manager_of_several_namespaces_lists_and_watches_each_and_nothing_else(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    """What a Role in each namespace allows: no request ever spans the cluster."""
    for namespace in ("team-a", "team-b", "elsewhere"):
        server.put_configmap(namespace, "listed")
    reconciler = Recording()
    manager = manager_for(server, managers, reconciler, namespaces=("team-a", "team-b"))
    manager.start()
    server.put_configmap("team-b", "watched")
    server.put_configmap("elsewhere", "watched")
    wanted = {"team-a/listed", "team-b/listed", "team-b/watched"}
    wait_for(lambda: wanted <= set(reconciler.keys), what="the reconciles of both namespaces")
    informer = manager.informer(pykube.ConfigMap)
    assert informer.get(Key("team-b/watched")) is not None
    assert informer.get(Key("elsewhere/listed")) is None
    assert not [k for k in reconciler.keys if k.startswith("elsewhere/")]
    paths = [path.partition("?")[0] for verb, path in server.requests if "configmaps" in path]
    assert paths and all(
        p.startswith(("/api/v1/namespaces/team-a/", "/api/v1/namespaces/team-b/")) for p in paths
    )
    assert {p.split("/")[4] for p in paths} == {"team-a", "team-b"}


def test_two_managers_in_one_process_keep_metrics_apart(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    first = manager_for(server, managers, Recording(), namespaces=("one",))
    second = manager_for(server, managers, Recording(), namespaces=("two",), metrics_port=0, health_port=0)
    first.start()
    second.start()
    assert first.registry is not second.registry
    assert first.metrics_address != second.metrics_address
    assert first.metrics_address == first.health_address, "ports 0 and 0 share one server"
    body = scrape(first.metrics_address, "/metrics").text
    host = server.url.removeprefix("http://")
    labels = f'code="200",host="{host}",method="GET",resource="configmaps",verb="list"'
    assert f"rest_client_requests_total{{{labels}}} 1.0" in body
    assert first.api_requests(verb="list", resource="configmaps") == 1
    assert first.api_requests(verb="create") == 0
    # The second's watch opens after its cache synced (start() returns then): counted before the baseline.
    wait_for(lambda: second.api_requests(verb="watch") >= 1, what="the second manager's watch")
    before = second.api_requests()
    server.put_configmap("one", "only-for-first")
    wait_for(
        lambda: first.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "configmaps", "result": "success"}
        )
    )
    assert second.api_requests() == before, "requests of one manager never count in the other"


def test_metrics_carry_controller_runtime_names_and_no_created_series(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    server.put_configmap("ns", "cm")
    manager = manager_for(server, managers, Recording(), namespaces=("ns",))
    manager.start()
    success = {"controller": "configmaps", "result": "success"}
    wait_for(lambda: manager.registry.get_sample_value("controller_runtime_reconcile_total", success))
    body = scrape(manager.metrics_address, "/metrics").text
    queue = 'controller="configmaps",name="configmaps"'
    for sample in (
        'controller_runtime_reconcile_time_seconds_bucket{controller="configmaps",le="0.005"}',
        'controller_runtime_max_concurrent_reconciles{controller="configmaps"} 2.0',
        'controller_runtime_active_workers{controller="configmaps"}',
        f"workqueue_depth{{{queue}}} 0.0",
        f"workqueue_adds_total{{{queue}}} 1.0",
        f"workqueue_queue_duration_seconds_count{{{queue}}} 1.0",
        f"workqueue_work_duration_seconds_count{{{queue}}} 1.0",
        'rest_client_requests_total{code="200"',
    ):
        assert sample in body, sample
    assert "_created" not in body, "controller-runtime exposes no _created series"


def test_probes_report_health_and_readiness(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = manager_for(server, managers, Recording(), metrics_port=None)
    assert manager.metrics_address is None
    manager.start()
    assert manager.metrics_address is None
    assert scrape(manager.health_address, "/healthz").status_code == 200
    assert scrape(manager.health_address, "/readyz").status_code == 200
    assert scrape(manager.health_address, "/nope").status_code == 404


def test_no_server_when_both_ports_are_none(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = manager_for(server, managers, Recording(), metrics_port=None, health_port=None)
    manager.start()
    assert manager.metrics_address is None and manager.health_address is None


def test_stop_is_prompt_with_idle_watches(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = manager_for(server, managers, Recording(), watch_timeout=60)
    manager.start()
    informer = manager.informer(pykube.ConfigMap)
    workers = list(manager.controllers[0]._threads)
    wait_for(lambda: informer._response is not None, what="the idle watch, read from then on")
    # An idle watch's read blocks for watch_timeout + 10 s (70 s): threads that end within stop()'s
    # budget were woken by it, not by the watch ending.
    manager.stop(timeout=PATIENCE)
    assert manager.wait(0)
    alive = [t.name for t in [informer._thread, *workers] if t is not None and t.is_alive()]
    assert alive == []
    assert manager.errors == []


def test_crash_in_a_runtime_thread_stops_the_manager_and_is_recorded(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    manager = manager_for(server, managers, Crashing())
    manager.start()
    server.put_configmap("default", "trigger")
    assert manager.wait(PATIENCE), "a crash must stop the manager"
    assert [type(e) for e in manager.errors] == [SystemExit]


def test_bugs_in_reconcilers_and_event_handlers_are_counted_never_fatal(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    reconciler = Buggy()
    manager = Manager(server.client, ManagerOptions())
    managers.append(manager)

    def bad_mapper(obj: dict) -> list[Key]:
        raise ValueError("mapper bug")

    # The mapper's handler sits on the same informer as the primary one, and raises on every event.
    controller = (
        Controller("configmaps", reconciler).for_(pykube.ConfigMap).watches(pykube.ConfigMap, bad_mapper)
    )
    manager.add(controller)
    manager.start()
    server.put_configmap("default", "bad")
    server.put_configmap("default", "good")
    wait_for(lambda: Key("default/good") in reconciler.keys, what="the good key's reconcile")
    panics = {"controller": "configmaps"}
    wait_for(lambda: manager.registry.get_sample_value("controller_runtime_reconcile_panics_total", panics))
    handler_errors = {"kind": "ConfigMap"}
    wait_for(  # one per event: the good one's may come just after its reconcile
        lambda: (
            (manager.registry.get_sample_value("informer_event_handler_errors_total", handler_errors) or 0)
            >= 2
        ),
        what="both handler errors counted",
    )
    body = scrape(manager.metrics_address, "/metrics").text
    assert "controller_runtime_reconcile_panics_total" in body
    assert manager.errors == [] and manager.healthy() and not manager.wait(0)


class CountedWakeUps(threading.Event):
    """The supervisor's wake-up event, counting its polls; the first few return at once, so several
    polls go by without the test waiting out the supervisor's 0.5 s tick."""

    def __init__(self, quick: int = 5) -> None:
        super().__init__()
        self.quick = quick
        self.polls = 0
        self.polled = threading.Condition()

    def wait(self, timeout: float | None = None) -> bool:
        with self.polled:
            self.polls += 1
            quick = self.polls <= self.quick
            self.polled.notify_all()
        return super().wait(0 if quick else timeout)


def test_manager_without_controllers_starts_and_stops(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = Manager(server.client, ManagerOptions())
    managers.append(manager)
    wake = manager._wake = CountedWakeUps()
    terms: list[None] = []
    run_term = manager._run_term
    manager._run_term = lambda: (terms.append(None), run_term())[-1]  # type: ignore[method-assign]
    manager.start()
    with wake.polled:
        assert wake.polled.wait_for(lambda: wake.polls > wake.quick, PATIENCE), "the supervisor stalled"
    assert len(terms) == 1, "an empty term was begun again on a later poll"
    assert server.requests == []
    manager.stop(timeout=PATIENCE)
    assert manager.wait(0) and manager.errors == []


def test_start_twice_and_add_after_start_are_errors(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = manager_for(server, managers, Recording())
    manager.start()
    with pytest.raises(ManagerError):
        manager.start()
    with pytest.raises(ManagerError):
        manager.add(Controller("late", Recording()).for_(pykube.Secret))


def test_start_fails_with_a_clear_error_when_the_apiserver_is_unreachable(managers: list[Manager]) -> None:
    manager = Manager(
        lambda: pykube.HTTPClient(pykube.KubeConfig.from_url("http://127.0.0.1:9")),
        ManagerOptions(start_timeout=0.5, metrics_port=None, health_port=None),
    )
    manager.add(Controller("configmaps", Recording()).for_(pykube.ConfigMap))
    with pytest.raises(ManagerError, match="informers not synced: ConfigMap"):
        manager.start()
    assert manager.wait(0), "a failed start undoes itself"


def test_standby_takes_over_when_the_leader_stops(server: FakeApiServer, managers: list[Manager]) -> None:
    election = {
        "leader_elect": True,
        # Far longer than the test may wait: a takeover seen at all came from the release on stop.
        "lease_duration": 3600.0,
        "renew_deadline": 2.0,
        "retry_period": 0.1,
        "leader_election_id": "unit-lock",
        "leader_election_namespace": "default",
    }
    first_seen, second_seen = Recording(), Recording()
    first = manager_for(server, managers, first_seen, identity="first", **election)
    second = manager_for(server, managers, second_seen, identity="second", **election)
    first.start()
    assert first.is_leader
    second.start()  # returns while standing by
    assert not second.is_leader
    assert scrape(second.health_address, "/readyz").status_code == 200, "a standby is ready"
    server.put_configmap("default", "cm")
    wait_for(lambda: first_seen.keys, what="the leader's reconcile")
    assert second_seen.keys == [], "a standby never reconciles"
    assert first.registry.get_sample_value("leader_election_master_status", {"name": "unit-lock"}) == 1
    first.stop(timeout=PATIENCE)
    assert server.leases[("default", "unit-lock")]["spec"].get("holderIdentity") != "first", (
        "released on stop"
    )
    wait_for(lambda: second.is_leader, what="the takeover, long before the lease (1 h) could expire")
    assert server.leases[("default", "unit-lock")]["spec"]["leaseTransitions"] == 1
    assert first.api_requests(verb=WRITE_VERBS, resource="leases") >= 2, "created, renewed, released"
    assert second.api_requests(verb="get", resource="leases") >= 1
    wait_for(lambda: second_seen.keys, what="the new leader's reconcile")


@pytest.mark.parametrize("warm", [True, False], ids=["warm-standby", "cold-standby"])
def test_leader_that_loses_the_lease_stops_reconciling(
    server: FakeApiServer, managers: list[Manager], warm: bool
) -> None:
    seen = Recording()
    manager = manager_for(
        server,
        managers,
        seen,
        identity="first",
        leader_elect=True,
        leader_election_namespace="default",
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=0.1,
        warm_standby=warm,
    )
    manager.start()
    assert manager.is_leader
    informer = manager.informer(pykube.ConfigMap)
    term = [*manager.controllers[0]._threads] + ([] if warm else [informer._thread])
    steal_lease(server)  # another candidate wins the lease (e.g. after a network partition)
    wait_for(lambda: not manager.is_leader, what="the step-down")
    queue = manager.controllers[0].queue
    assert queue is not None
    wait_for(lambda: queue.shutting_down, what="the term's queue to shut down")
    # Every thread of the term has ended, so nothing is left that could pick the next change up.
    wait_for(lambda: not any(t is not None and t.is_alive() for t in term), what="the term's threads")
    server.put_configmap("default", "after-step-down")
    if warm:  # the cache stays current for the next term, and feeds nobody meanwhile
        assert manager.informer(pykube.ConfigMap) is informer
        wait_for(lambda: informer.get(Key("default/after-step-down")), what="the standby's cache")
        assert informer.handlers == []
    else:
        with pytest.raises(LookupError):
            manager.informer(pykube.ConfigMap)
    assert Key("default/after-step-down") not in seen.keys
    assert manager.errors == [] and not manager.wait(0), "losing the lease is not a crash"


def test_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match="metrics_port"):
        ManagerOptions(metrics_port=70000)
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        ManagerOptions(leader_elect=True, lease_duration=1, renew_deadline=2)


@pytest.mark.parametrize(
    ("method", "url", "expected"),
    [
        ("GET", "https://h/api/v1/namespaces/ns/configmaps?limit=500", ("list", "configmaps")),
        (
            "GET",
            "https://h/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5",
            ("watch", "configmaps"),
        ),
        ("GET", "https://h/apis/apps/v1/namespaces/ns/statefulsets/db", ("get", "statefulsets")),
        (
            "PATCH",
            "https://h/apis/db.example.com/v1alpha1/namespaces/ns/mysqlclusters/db/status",
            ("patch", "mysqlclusters/status"),
        ),
        ("PUT", "https://h/apis/coordination.k8s.io/v1/namespaces/default/leases/lock", ("update", "leases")),
        ("POST", "https://h/api/v1/namespaces/ns/secrets", ("create", "secrets")),
        ("DELETE", "https://h/apis/batch/v1/namespaces/ns/jobs/backup", ("delete", "jobs")),
        ("GET", "https://h/api/v1/namespaces/ns", ("get", "namespaces")),
        ("GET", "https://h/api/v1/namespaces", ("list", "namespaces")),
        ("GET", "https://h/version", ("get", "")),
    ],
)
def test_request_labels(method: str, url: str, expected: tuple[str, str]) -> None:
    assert request_labels(method, url) == expected


def test_request_labels_behind_a_server_path_prefix() -> None:
    url = "https://h/gateway/c1/apis/apps/v1/namespaces/ns/statefulsets/db"
    assert request_labels("GET", url, base_path="/gateway/c1/") == ("get", "statefulsets")
    assert request_labels("GET", url) == ("get", "")


class WritesAfterRelease:
    """Blocks in reconcile until released, then writes (a Lease create) with the manager's client."""

    def __init__(self) -> None:
        self.manager: Manager | None = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.outcome: list[str] = []

    def reconcile(self, key: Key) -> Result:
        if key != Key("default/slow"):
            return Result()
        self.entered.set()
        self.release.wait(PATIENCE)
        assert self.manager is not None
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "written"}}
        try:
            self.manager.new_client().post(
                version="coordination.k8s.io/v1", namespace="default", url="leases", data=json.dumps(lease)
            )
        except Fenced:
            self.outcome.append("fenced")
        else:
            self.outcome.append("written")
        return Result()


ELECTION = {
    "leader_elect": True,
    "leader_election_namespace": "default",
    "lease_duration": 3.0,
    "renew_deadline": 2.0,
    "retry_period": 0.1,
}


def steal_lease(server: FakeApiServer, name: str = "mysql-operator-leader") -> None:
    """Another holder takes the lease for an hour: the deposed manager cannot win it back mid-test."""
    with server.cond:
        lease = server.leases[("default", name)]
        lease["spec"].update(
            holderIdentity="intruder", renewTime=format_micro_time(time.time()), leaseDurationSeconds=3600
        )
        server.rv += 1
        lease["metadata"]["resourceVersion"] = str(server.rv)


def test_deposed_leaders_in_flight_reconcile_cannot_write(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    reconciler = WritesAfterRelease()
    manager = manager_for(server, managers, reconciler, identity="first", **ELECTION)
    reconciler.manager = manager
    manager.start()
    server.put_configmap("default", "slow")
    assert reconciler.entered.wait(PATIENCE)
    steal_lease(server)
    wait_for(lambda: not manager.is_leader, what="the step-down")
    reconciler.release.set()
    wait_for(lambda: reconciler.outcome, what="the reconcile's write attempt")
    assert reconciler.outcome == ["fenced"]
    assert ("default", "written") not in server.leases, "the write left the process"


def test_stop_fences_stragglers_before_it_releases_the_lease(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    reconciler = WritesAfterRelease()
    manager = manager_for(server, managers, reconciler, identity="first", **ELECTION)
    reconciler.manager = manager
    manager.start()
    server.put_configmap("default", "slow")
    assert reconciler.entered.wait(PATIENCE)
    manager.stop(timeout=0.3)  # the reconcile outlives the stop timeout
    assert "holderIdentity" not in server.leases[("default", "mysql-operator-leader")]["spec"], "released"
    reconciler.release.set()  # a standby may lead by now: the straggler must not write
    wait_for(lambda: reconciler.outcome, what="the straggler's write attempt")
    assert reconciler.outcome == ["fenced"]


def test_losing_the_lease_exits_the_process_when_asked(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    exits: list[int] = []
    manager = Manager(
        server.client,
        ManagerOptions(identity="first", exit_on_lost_lease=True, **ELECTION),  # type: ignore[arg-type]
        exit_process=exits.append,
    )
    manager.add(Controller("configmaps", Recording()).for_(pykube.ConfigMap))
    managers.append(manager)
    manager.start()
    steal_lease(server)
    wait_for(lambda: exits, what="the exit")
    assert exits == [1]
    assert not manager.fence.allows(1), "writes are fenced even before the process is gone"


def test_a_stop_is_not_a_lost_lease(server: FakeApiServer, managers: list[Manager]) -> None:
    exits: list[int] = []
    manager = Manager(
        server.client,
        ManagerOptions(identity="first", exit_on_lost_lease=True, **ELECTION),  # type: ignore[arg-type]
        exit_process=exits.append,
    )
    manager.add(Controller("configmaps", Recording()).for_(pykube.ConfigMap))
    manager.start()
    manager.stop(timeout=5)
    assert exits == []


def test_sustained_denial_fails_healthz(server: FakeApiServer, managers: list[Manager]) -> None:
    manager = manager_for(server, managers, Recording(), namespaces=("ns",), denied_grace=0.0)
    manager.start()
    assert scrape(manager.health_address, "/healthz").status_code == 200
    informer = manager.informer(pykube.ConfigMap)
    with informer._lock:  # what the informer records when list/watch keep answering 401/403
        informer._denied_since = time.monotonic() - 1.0
    assert manager.denied() == ["ConfigMap"]
    assert scrape(manager.health_address, "/healthz").status_code == 503


def test_probe_server_close_does_not_wait_out_its_poll_interval() -> None:
    # Every manager.stop() closes one: shutdown() alone waited up to the poll interval (0.2 s).
    server = ProbeServer("127.0.0.1", 0, CollectorRegistry(), lambda: True, lambda: True)
    server._thread = threading.Thread(  # a poll so long that only a wake-up can end it in time
        target=server._server.serve_forever, kwargs={"poll_interval": 30.0}, daemon=True
    )
    server.start()
    assert scrape(server.address, "/healthz").status_code == 200
    server.close()
    # close() joins for 2 s only: a thread still alive after it would be waiting out the 30 s poll.
    assert not server._thread.is_alive()
    with pytest.raises(requests.ConnectionError):
        scrape(server.address, "/healthz")


def test_a_standby_syncs_its_caches_before_it_leads_and_does_not_relist_on_takeover(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    server.put_configmap("default", "existing")
    election = {**ELECTION, "lease_duration": 3600.0}
    first_seen, second_seen = Recording(), Recording()
    first = manager_for(server, managers, first_seen, identity="first", **election)
    second = manager_for(server, managers, second_seen, identity="second", **election)
    first.start()
    second.start()
    assert not second.is_leader
    cache = second.informer(pykube.ConfigMap)
    assert cache.has_synced() and cache.get(Key("default/existing")) is not None, "warm while standing by"
    lists = second.api_requests(verb="list", resource="configmaps")
    first.stop(timeout=PATIENCE)  # released: the standby takes over at its next step
    wait_for(lambda: Key("default/existing") in second_seen.keys, what="the new leader's reconcile")
    assert second.informer(pykube.ConfigMap) is cache
    assert second.api_requests(verb="list", resource="configmaps") == lists, "no relist on takeover"


def test_a_standby_refused_the_lease_is_unready_and_says_why(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    server.lease_status = 403
    manager = manager_for(server, managers, Recording(), identity="second", **ELECTION)
    manager.start()  # stands by: the election step ran, and failed
    reply = scrape(manager.health_address, "/readyz")
    assert reply.status_code == 503
    assert "[-] lease default/mysql-operator-leader refused" in reply.text and "HTTP 403" in reply.text
    assert scrape(manager.health_address, "/healthz").status_code == 200, "within denied_grace"
    server.lease_status = None
    wait_for(lambda: scrape(manager.health_address, "/readyz").status_code == 200, what="ready again")


def test_sustained_lease_denial_fails_healthz(server: FakeApiServer, managers: list[Manager]) -> None:
    server.lease_status = 401
    manager = manager_for(server, managers, Recording(), denied_grace=0.0, **ELECTION)
    manager.start()
    wait_for(lambda: scrape(manager.health_address, "/healthz").status_code == 503, what="healthz failing")
    assert "refused" in scrape(manager.health_address, "/healthz").text


def test_election_without_a_namespace_out_of_cluster_fails_start_naming_the_option(
    server: FakeApiServer, managers: list[Manager], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(leader, "SERVICEACCOUNT_NAMESPACE", tmp_path / "absent")
    manager = manager_for(server, managers, Recording(), leader_elect=True)
    with pytest.raises(ManagerError, match="leader_election_namespace"):
        manager.start()


def test_election_namespace_comes_from_the_pod(
    server: FakeApiServer, managers: list[Manager], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "operator-system")
    manager = manager_for(server, managers, Recording(), leader_elect=True, identity="me")
    manager.start()
    assert server.leases[("operator-system", "mysql-operator-leader")]["spec"]["holderIdentity"] == "me"


class Runnable:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self, timeout: float) -> None:
        self.calls.append("stop")


def test_runnables_start_with_the_manager_and_stop_after_the_last_term(
    server: FakeApiServer, managers: list[Manager]
) -> None:
    runnable = Runnable()
    manager = manager_for(server, managers, Recording())
    manager.add_runnable(runnable)
    manager.start()
    assert runnable.calls == ["start"]
    manager.stop(timeout=PATIENCE)
    assert runnable.calls == ["start", "stop"]
