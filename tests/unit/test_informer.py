from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pykube
import pytest
from runtime_fakes import (
    PATIENCE,
    FakeApi,
    FakeApiServer,
    FakeResponse,
    event,
    expired,
    list_response,
    obj,
    wait_for,
)

from mysql_operator.runtime.informer import Informer
from mysql_operator.runtime.multinamespace import MultiNamespaceInformer
from mysql_operator.runtime.types import Key


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()

        self.previous: list[str | None] = []
        """resourceVersion of the object each handler call saw as the previous one."""

    def __call__(self, event_type: str, o: dict[str, Any], old: dict[str, Any] | None) -> None:
        with self.lock:
            self.events.append((event_type, o["metadata"]["name"], o["metadata"]["resourceVersion"]))
            self.previous.append(old["metadata"]["resourceVersion"] if old else None)

    def wait(self, n: int) -> list[tuple[str, str, str]]:
        wait_for(lambda: len(self.events) >= n, what=f"{n} events (got {self.events})")
        return list(self.events)


class RecordedPauses(Informer):
    """Notes each backoff instead of sleeping it: the delays themselves are what the tests pin."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pauses: list[float] = []

    def _pause(self, seconds: float) -> None:
        self.pauses.append(seconds)


@pytest.fixture
def run() -> Iterator[Any]:
    started: list[Informer] = []

    def _run(api: FakeApi, cls: type[Informer] = Informer, **kwargs: Any) -> tuple[Informer, Recorder]:
        kwargs.setdefault("backoff_base", 0.001)
        informer = cls(pykube.ConfigMap, lambda: api, **kwargs)
        recorder = Recorder()
        informer.add_handler(recorder)
        informer.start()
        started.append(informer)
        return informer, recorder

    yield _run
    for informer in started:
        informer.stop(timeout=2)


def test_list_then_watch_events_are_delivered(run: Any) -> None:
    api = FakeApi(
        [
            list_response([obj("a", "1"), obj("b", "2")], rv="10"),
            FakeResponse(lines=[event("ADDED", obj("c", "11")), event("MODIFIED", obj("a", "12"))]),
        ]
    )
    informer, recorder = run(api, namespace="ns", watch_timeout=30)
    assert recorder.wait(4) == [
        ("ADDED", "a", "1"),
        ("ADDED", "b", "2"),
        ("ADDED", "c", "11"),
        ("MODIFIED", "a", "12"),
    ]
    assert informer.has_synced()
    assert informer.get(Key("ns/a"))["metadata"]["resourceVersion"] == "12"  # type: ignore[index]
    assert sorted(o["metadata"]["name"] for o in informer.list()) == ["a", "b", "c"]
    assert informer.resource_version == "12"
    list_call, watch_call = api.calls[:2]
    assert list_call["namespace"] == "ns" and "watch" not in list_call["params"]
    assert watch_call["params"] == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "30",
        "resourceVersion": "10",
    }
    assert watch_call["stream"] is True
    assert watch_call["timeout"][1] > 30, "the client read timeout must outlast the server-side timeout"


def test_listed_items_get_apiversion_and_kind(run: Any) -> None:
    informer, _ = run(FakeApi([list_response([obj("a", "1")], rv="1")]))
    wait_for(informer.has_synced)
    assert informer.get(Key("ns/a"))["kind"] == "ConfigMap"  # type: ignore[index]


def test_deleted_event_removes_the_object(run: Any) -> None:
    api = FakeApi(
        [list_response([obj("a", "1")], rv="1"), FakeResponse(lines=[event("DELETED", obj("a", "2"))])]
    )
    informer, recorder = run(api)
    assert recorder.wait(2)[-1] == ("DELETED", "a", "2")
    assert informer.get(Key("ns/a")) is None


def test_bookmark_advances_the_resource_version_without_an_event(run: Any) -> None:
    bookmark = {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "20"}}}
    api = FakeApi([list_response([obj("a", "1")], rv="5"), FakeResponse(lines=[bookmark], then="drop")])
    informer, recorder = run(api)
    wait_for(lambda: len(api.watch_calls()) >= 2, what="a second watch")
    assert api.watch_calls()[1]["resourceVersion"] == "20"
    assert recorder.events == [("ADDED", "a", "1")]
    assert informer.relists == 1


def test_connection_drop_resumes_from_the_last_resource_version(run: Any) -> None:
    api = FakeApi(
        [
            list_response([], rv="5"),
            FakeResponse(lines=[event("ADDED", obj("x", "6"))], then="drop"),
            FakeResponse(lines=[event("MODIFIED", obj("x", "7"))]),
        ]
    )
    informer, recorder = run(api)
    assert recorder.wait(2) == [("ADDED", "x", "6"), ("MODIFIED", "x", "7")]
    assert [c["resourceVersion"] for c in api.watch_calls()[:2]] == ["5", "6"]
    assert informer.relists == 1, "a dropped connection resumes; it does not relist"


def test_drops_after_delivered_events_do_not_escalate_the_backoff(run: Any) -> None:
    # Each watch delivers an event, then drops: every reconnect is a first retry (backoff_base),
    # not the n-th in a row (0.2 s * 2^n would add up to 12 s for six drops).
    script = [list_response([], rv="1")]
    script += [FakeResponse(lines=[event("ADDED", obj(f"x{i}", str(i + 2)))], then="drop") for i in range(6)]
    api = FakeApi(script)
    informer, recorder = run(api, RecordedPauses, backoff_base=0.2)
    recorder.wait(6)
    wait_for(lambda: len(api.watch_calls()) == 7, what="the watch after the sixth drop")
    assert informer.pauses == [0.2] * 6


def test_consecutive_failures_double_the_backoff_up_to_its_max(run: Any) -> None:
    failure = FakeResponse(status=500, body={"kind": "Status", "code": 500, "message": "etcd is sad"})
    api = FakeApi([failure, failure, failure, list_response([obj("a", "1")], rv="1")])
    informer, recorder = run(api, RecordedPauses, backoff_base=0.2, backoff_max=0.5)
    recorder.wait(1)
    assert informer.pauses == [0.2, 0.4, 0.5]


def test_clean_end_of_a_watch_resumes_from_the_last_resource_version(run: Any) -> None:
    api = FakeApi(
        [list_response([], rv="5"), FakeResponse(lines=[event("ADDED", obj("x", "9"))], then="end")]
    )
    informer, _ = run(api)
    wait_for(lambda: len(api.watch_calls()) >= 2, what="a second watch")
    assert api.watch_calls()[1]["resourceVersion"] == "9"
    assert informer.relists == 1


def test_expired_watch_relists_with_synthetic_deletes_and_updates(run: Any) -> None:
    api = FakeApi(
        [
            list_response([obj("a", "1"), obj("b", "2"), obj("same", "3")], rv="5"),
            FakeResponse(lines=[expired()]),  # HTTP 200, then ERROR with a Status 410
            list_response([obj("a", "7"), obj("c", "8"), obj("same", "3")], rv="9"),
        ]
    )
    informer, recorder = run(api)
    events = recorder.wait(6)
    assert events[:3] == [("ADDED", "a", "1"), ("ADDED", "b", "2"), ("ADDED", "same", "3")]
    assert sorted(events[3:]) == [("ADDED", "c", "8"), ("DELETED", "b", "2"), ("MODIFIED", "a", "7")]
    wait_for(lambda: len(api.watch_calls()) >= 2, what="a watch after the relist")
    assert api.watch_calls()[1]["resourceVersion"] == "9"
    assert informer.relists == 2
    assert informer.get(Key("ns/b")) is None


def test_first_list_is_served_from_the_watch_cache_and_relists_are_quorum_reads(run: Any) -> None:
    # resourceVersion=0 spares the wait for an etcd progress notification (up to 0.1 s per kind);
    # after an expired watch, only a quorum list may stand in for the events that were missed.
    api = FakeApi(
        [
            list_response([obj("a", "1")], rv="5"),
            FakeResponse(lines=[expired()]),
            list_response([obj("a", "1")], rv="9"),
        ]
    )
    informer, _ = run(api)
    wait_for(lambda: informer.relists == 2, what="the relist")
    lists = [c["params"] for c in api.calls if "watch" not in c["params"]]
    assert lists[0] == {"limit": "500", "resourceVersion": "0"}
    assert lists[1] == {"limit": "500"}


def test_continue_pages_of_the_first_list_carry_no_resource_version(run: Any) -> None:
    first = list_response([obj("a", "1")], rv="5")
    first._body["metadata"]["continue"] = "token"  # type: ignore[index]
    api = FakeApi([first, list_response([obj("b", "2")], rv="5")])
    _, recorder = run(api, page_size=1)
    recorder.wait(2)
    assert api.calls[0]["params"]["resourceVersion"] == "0"
    assert "resourceVersion" not in api.calls[1]["params"], "the apiserver refuses both with continue"


def test_on_sync_is_called_once_when_has_synced_already_says_so() -> None:
    api = FakeApi(
        [
            list_response([obj("a", "1")], rv="5"),
            FakeResponse(lines=[expired()]),
            list_response([obj("a", "1")], rv="9"),
        ]
    )
    seen: list[bool] = []
    holder: list[Informer] = []
    informer = Informer(
        pykube.ConfigMap, lambda: api, backoff_base=0.001, on_sync=lambda: seen.append(holder[0].has_synced())
    )
    holder.append(informer)
    informer.start()
    try:
        wait_for(lambda: informer.relists == 2, what="the relist")
    finally:
        informer.stop(timeout=2)
    assert seen == [True], "once (not on relists), and only after has_synced() turned true"


def test_http_410_on_the_watch_request_relists(run: Any) -> None:
    gone = FakeResponse(status=410, body={"kind": "Status", "code": 410})
    api = FakeApi([list_response([], rv="5"), gone, list_response([obj("a", "6")], rv="6")])
    informer, recorder = run(api)
    assert recorder.wait(1) == [("ADDED", "a", "6")]
    assert informer.relists == 2


def test_other_watch_errors_resume_from_the_last_resource_version(run: Any) -> None:
    status = {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd hiccup"}
    api = FakeApi(
        [
            list_response([], rv="5"),
            FakeResponse(lines=[event("ADDED", obj("x", "6")), event("ERROR", status)]),
        ]
    )
    informer, _ = run(api)
    wait_for(lambda: len(api.watch_calls()) >= 2, what="a second watch")
    assert api.watch_calls()[1]["resourceVersion"] == "6"
    assert informer.relists == 1


def test_a_failing_handler_is_counted_and_skipped_not_fatal_nor_retried() -> None:
    crashes: list[BaseException] = []
    reported: list[str] = []
    api = FakeApi([list_response([obj("a", "1")], rv="1")])
    informer = Informer(
        pykube.ConfigMap, lambda: api, on_crash=crashes.append, on_handler_error=reported.append
    )

    def handler(event_type: str, o: dict[str, Any], old: dict[str, Any] | None) -> None:
        raise ValueError("handler bug")  # a ValueError, like a malformed stream: must not be retried

    after = Recorder()
    informer.add_handler(handler)
    informer.add_handler(after)
    informer.start()
    try:
        assert after.wait(1) == [("ADDED", "a", "1")], "the next handler still gets the event"
        wait_for(lambda: api.watch_calls(), what="the watch that follows the list")
        assert informer.has_synced() and informer.get(Key("ns/a")) is not None
        assert reported == ["ConfigMap"] and informer.handler_errors == 1
        assert crashes == []
        assert len([c for c in api.calls if c["params"].get("watch") != "true"]) == 1, (
            "no relist after a handler bug"
        )
    finally:
        informer.stop(timeout=2)


def test_a_handler_added_to_a_synced_informer_gets_the_cache_replayed(run: Any) -> None:
    api = FakeApi(
        [
            list_response([obj("a", "1"), obj("b", "2")], rv="2"),
            FakeResponse(lines=[event("ADDED", obj("c", "3"))]),
        ]
    )
    informer, first = run(api)
    first.wait(3)
    late = Recorder()
    informer.add_handler(late)
    assert sorted(late.events) == [("ADDED", "a", "1"), ("ADDED", "b", "2"), ("ADDED", "c", "3")]


def test_a_removed_handler_gets_no_more_events() -> None:
    idle = FakeResponse()  # the first watch: blocks until closed, then the informer reconnects
    feed = FakeResponse(lines=[event("ADDED", obj("b", "2"))])
    api = FakeApi([list_response([obj("a", "1")], rv="1"), idle, feed])
    informer = Informer(pykube.ConfigMap, lambda: api, backoff_base=0.001)
    removed, kept = Recorder(), Recorder()
    informer.add_handler(removed)
    informer.add_handler(kept)
    informer.start()
    try:
        kept.wait(1)
        informer.remove_handler(removed)
        idle.close()  # the watch drops; the next one delivers b
        wait_for(lambda: ("ADDED", "b", "2") in kept.events, what="b")
        assert removed.events == [("ADDED", "a", "1")]
    finally:
        informer.stop(timeout=2)


def test_each_watch_asks_for_a_random_timeout_between_5_and_10_minutes() -> None:
    informer = Informer(pykube.ConfigMap, lambda: FakeApi([]), rng=random.Random(7))
    timeouts = [informer.next_watch_timeout() for _ in range(200)]
    assert all(300.0 <= t < 600.0 for t in timeouts)
    assert max(timeouts) - min(timeouts) > 200, "spread over the window, not one fixed value"
    fixed = Informer(pykube.ConfigMap, lambda: FakeApi([]), watch_timeout=30)
    assert fixed.next_watch_timeout() == 30


def test_the_watch_request_carries_the_drawn_timeout(run: Any) -> None:
    class Drawn(Informer):
        def next_watch_timeout(self) -> float:
            return 437.9

    api = FakeApi([list_response([], rv="1")])
    run(api, cls=Drawn)
    wait_for(lambda: api.watch_calls(), what="the watch")
    assert api.watch_calls()[0]["timeoutSeconds"] == "437"
    (call,) = [c for c in api.calls if c["params"].get("watch") == "true"]
    assert call["timeout"][1] == pytest.approx(447.9), "read timeout: the watch's own + 10 s"


def test_failed_list_is_retried(run: Any) -> None:
    failure = FakeResponse(status=500, body={"kind": "Status", "code": 500, "message": "etcd is sad"})
    api = FakeApi([failure, list_response([obj("a", "1")], rv="1")])
    informer, recorder = run(api)
    assert recorder.wait(1) == [("ADDED", "a", "1")]
    assert informer.has_synced()


def test_paged_list_follows_continue_tokens(run: Any) -> None:
    first = list_response([obj("a", "1")], rv="5")
    first._body["metadata"]["continue"] = "token"  # type: ignore[index]
    api = FakeApi([first, list_response([obj("b", "2")], rv="5")])
    informer, recorder = run(api, page_size=1)
    recorder.wait(2)
    assert api.calls[1]["params"] == {"limit": "1", "continue": "token"}
    assert informer.resource_version == "5"


def test_stop_during_a_blocked_read_returns_promptly(run: Any) -> None:
    api = FakeApi([list_response([], rv="5")])  # then a watch that never sends anything
    informer, _ = run(api)
    wait_for(lambda: api.watch_calls(), what="the watch")
    # The fake read blocks until its response is closed: only stop() closing it ends the thread.
    informer.stop(timeout=PATIENCE)
    assert informer._thread is not None and not informer._thread.is_alive()
    assert api.responses[-1].closed.is_set()


def test_stop_unblocks_a_read_on_a_real_socket() -> None:
    server = FakeApiServer()
    try:
        server.put_configmap("ns", "a")
        informer = Informer(pykube.ConfigMap, server.client, namespace="ns", watch_timeout=60)
        informer.start()
        assert informer.wait_for_sync(PATIENCE)
        wait_for(lambda: any("watch=true" in path for _, path in server.requests), what="the watch")
        wait_for(lambda: informer._response is not None, what="the watch's reply, read from then on")
        # The read would block for watch_timeout + 10 s (70 s): a thread that ends within the join
        # was woken by stop().
        informer.stop(timeout=PATIENCE)
        assert informer._thread is not None and not informer._thread.is_alive()
        assert informer.get(Key("ns/a")) is not None
    finally:
        server.close()


def test_real_socket_watch_delivers_new_objects_in_the_namespace_only() -> None:
    server = FakeApiServer()
    recorder = Recorder()
    informer = Informer(pykube.ConfigMap, server.client, namespace="ns")
    informer.add_handler(recorder)
    try:
        informer.start()
        assert informer.wait_for_sync(PATIENCE)
        server.put_configmap("other", "skip")
        server.put_configmap("ns", "b")
        assert recorder.wait(1) == [("ADDED", "b", "102")]
        paths = [path for _, path in server.requests]
        assert paths[0].startswith("/api/v1/namespaces/ns/configmaps?")
    finally:
        informer.stop(timeout=5)
        server.close()


def test_handlers_see_the_previous_object_of_a_change_and_a_delete(run: Any) -> None:
    api = FakeApi(
        [
            list_response([obj("a", "1")], rv="10"),
            FakeResponse(lines=[event("MODIFIED", obj("a", "11")), event("DELETED", obj("a", "12"))]),
        ]
    )
    _, recorder = run(api, namespace="ns")
    assert [e[0] for e in recorder.wait(3)] == ["ADDED", "MODIFIED", "DELETED"]
    assert recorder.previous == [None, "1", "11"]


def test_managed_fields_are_dropped_before_caching_and_delivery(run: Any) -> None:
    heavy = {"managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {}}}]}
    listed = obj("a", "1")
    listed["metadata"] |= heavy
    watched = obj("b", "11")
    watched["metadata"] |= heavy
    api = FakeApi([list_response([listed], rv="10"), FakeResponse(lines=[event("ADDED", watched)])])
    informer, recorder = run(api, namespace="ns")
    recorder.wait(2)
    for key in ("ns/a", "ns/b"):
        assert "managedFields" not in informer.get(Key(key))["metadata"]  # type: ignore[index]


def test_label_selector_and_metadata_only_shape_every_request(run: Any) -> None:
    api = FakeApi([list_response([], rv="10")])
    informer, _ = run(
        api, namespace="ns", label_selector="app.kubernetes.io/managed-by=x", metadata_only=True
    )
    assert informer.wait_for_sync(PATIENCE)
    wait_for(lambda: len(api.calls) >= 2, what="the watch")
    list_call, watch_call = api.calls[:2]
    for call in (list_call, watch_call):
        assert call["params"]["labelSelector"] == "app.kubernetes.io/managed-by=x"
    assert "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" in list_call["headers"]["Accept"]
    assert "as=PartialObjectMetadata;g=meta.k8s.io;v=v1" in watch_call["headers"]["Accept"]


def test_sustained_401_is_reported_and_cleared_by_a_success(run: Any) -> None:
    denied = FakeResponse(status=401, body={"kind": "Status", "code": 401, "reason": "Unauthorized"})
    api = FakeApi([denied, denied, list_response([obj("a", "1")], rv="10")])
    informer, recorder = run(api, namespace="ns")
    recorder.wait(1)
    assert informer.denied_for() == 0.0, "a successful list clears it"
    assert len(api.calls) >= 3


def test_401_on_every_list_keeps_counting(run: Any) -> None:
    denied = FakeResponse(status=403, body={"kind": "Status", "code": 403, "reason": "Forbidden"})
    api = FakeApi([denied] * 50)
    informer, _ = run(api, namespace="ns", backoff_max=0.01)
    wait_for(lambda: informer.denied_for() > 0.05, what="denied for a while")
    assert not informer.has_synced()


def test_the_cache_hands_out_copies_and_keeps_no_parsed_objects(run: Any) -> None:
    informer, _ = run(FakeApi([list_response([obj("a", "1")], rv="1")]))
    wait_for(informer.has_synced)
    first = informer.get(Key("ns/a"))
    first["spec"] = {"mutated": True}  # type: ignore[index]
    assert "spec" not in informer.get(Key("ns/a")), "a caller's edit must not reach the cache"  # type: ignore[operator]
    assert informer.keys() == [Key("ns/a")]
    assert all(isinstance(raw, str) for raw in informer._store.values()), "stored as compact JSON"


def pod(name: str, rv: str, cluster: str) -> dict[str, Any]:
    found = obj(name, rv)
    found["metadata"]["labels"] = {"cluster": cluster}
    return found


def selected(informer: Informer, namespace: str | None, labels: dict[str, str]) -> list[str]:
    return [o["metadata"]["name"] for o in informer.select(namespace, labels)]


def test_select_follows_watch_events(run: Any) -> None:
    events = [event("MODIFIED", pod("c", "4", "two")), event("DELETED", pod("a", "5", "one"))]
    api = FakeApi(
        [
            list_response([pod("a", "1", "one"), pod("b", "2", "two"), pod("c", "3", "one")], rv="3"),
            FakeResponse(lines=events),
        ]
    )
    informer, recorder = run(api)
    recorder.wait(5)
    assert selected(informer, "ns", {"cluster": "one"}) == [], "a deleted, c relabelled"
    assert selected(informer, "ns", {"cluster": "two"}) == ["b", "c"]
    assert selected(informer, "elsewhere", {"cluster": "two"}) == []
    assert selected(informer, None, {}) == ["b", "c"]
    assert informer.select_keys("ns", {"cluster": "two"}) == [Key("ns/b"), Key("ns/c")]


def test_select_follows_a_relist(run: Any) -> None:
    api = FakeApi(
        [
            list_response([pod("a", "1", "one"), pod("b", "2", "two")], rv="2"),
            FakeResponse(lines=[expired()]),
            list_response([pod("b", "2", "two"), pod("d", "7", "one"), pod("a", "6", "two")], rv="7"),
        ]
    )
    informer, recorder = run(api)
    recorder.wait(4)
    wait_for(lambda: informer.relists == 2, what="the relist")
    assert selected(informer, "ns", {"cluster": "one"}) == ["d"]
    assert selected(informer, "ns", {"cluster": "two"}) == ["a", "b"]


def test_select_over_several_namespaces_asks_the_namespaces_own_informer(run: Any) -> None:
    def labelled(name: str, namespace: str) -> dict[str, Any]:
        found = obj(name, "1", namespace=namespace)
        found["metadata"]["labels"] = {"cluster": "one"}
        return found

    first, _ = run(FakeApi([list_response([labelled("a", "x")], rv="1")]), namespace="x")
    second, _ = run(FakeApi([list_response([labelled("b", "y")], rv="1")]), namespace="y")
    both = MultiNamespaceInformer([first, second])
    wait_for(both.has_synced)
    assert [o["metadata"]["name"] for o in both.select("y", {"cluster": "one"})] == ["b"]
    assert both.select("z", {"cluster": "one"}) == []
    assert [o["metadata"]["name"] for o in both.select(None, {"cluster": "one"})] == ["a", "b"]
