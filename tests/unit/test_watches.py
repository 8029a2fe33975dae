"""envtest.plugin.watches against a scripted apiserver session: which lists may be served from the
watch cache at once, what dates them, and that waiting is done on watch events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runtime_fakes import FakeResponse

from envtest.plugin import watches

SERVER = "https://127.0.0.1:6443"
PATH = "apis/db.example.com/v1beta1/mysqlclusters"
URL = f"{SERVER}/apis/db.example.com/v1beta1/namespaces/ns/mysqlclusters"


class FakeSession:
    """Custom resources of one namespace, a global resourceVersion, and a watch cache that may
    trail etcd (`hidden`: names its resourceVersion=0 lists do not show yet)."""

    def __init__(self, *names: str, finalizers: bool = True) -> None:
        self.rv = 10
        self.objects: dict[str, dict[str, Any]] = {}
        self.hidden: set[str] = set()
        self.watch_events: list[dict[str, Any]] = []
        """What the next watch sends (then it ends)."""
        self.on_watch: Callable[[], list[dict[str, Any]]] | None = None
        """Or: what happens while a watch is open (called when it opens)."""
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        for name in names:
            self.add(name, finalizers=finalizers)

    def add(self, name: str, *, finalizers: bool = True) -> dict[str, Any]:
        self.rv += 1
        meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": str(self.rv)}
        if finalizers:
            meta["finalizers"] = ["db.example.com/final-backup"]
        self.objects[name] = {"metadata": meta}
        return self.objects[name]

    def deleted_event(self, name: str) -> dict[str, Any]:
        self.rv += 1
        meta = {**self.objects.pop(name)["metadata"], "resourceVersion": str(self.rv)}
        return {"type": "DELETED", "object": {"metadata": meta}}

    # -- the requests.Session surface the module uses ----------------------------------------------

    def get(self, url: str, params: dict[str, str] | None = None, **kwargs: Any) -> FakeResponse:
        params = dict(params or {})
        self.calls.append(("GET", url, params))
        if params.get("watch") == "true":
            lines, self.watch_events = self.watch_events, []
            if self.on_watch is not None:
                lines += self.on_watch()
            return FakeResponse(lines=lines, then="end")
        if url.startswith(f"{URL}/"):  # one object
            found = self.objects.get(url.rsplit("/", 1)[1])
            return FakeResponse(body=found) if found else FakeResponse(status=404, body={"code": 404})
        visible = [
            json.loads(json.dumps(o))
            for name, o in self.objects.items()
            if not (params.get("resourceVersion") == "0" and name in self.hidden)
        ]
        return FakeResponse(body={"metadata": {"resourceVersion": str(self.rv)}, "items": visible})

    def delete(self, url: str, json: dict[str, Any] | None = None, **kwargs: Any) -> FakeResponse:
        name = url.rsplit("/", 1)[1]
        self.calls.append(("DELETE", url, json or {}))
        live = self.objects.get(name)
        if live is None:
            return FakeResponse(status=404, body={"kind": "Status", "code": 404})
        wanted = (json or {}).get("preconditions", {}).get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            return FakeResponse(status=409, body={"kind": "Status", "code": 409})
        if not live["metadata"].get("finalizers"):
            del self.objects[name]
            return FakeResponse(body={"kind": "Status", "status": "Success"})
        if "deletionTimestamp" not in live["metadata"]:
            self.rv += 1
            live["metadata"].update(deletionTimestamp="now", resourceVersion=str(self.rv))
        return FakeResponse(body=live)

    def patch(self, url: str, **kwargs: Any) -> FakeResponse:
        self.calls.append(("PATCH", url, {}))
        self.objects.pop(url.rsplit("/", 1)[1], None)
        return FakeResponse(body={})

    # -- what the test asserts on --------------------------------------------------------------------

    def lists(self) -> list[dict[str, str]]:
        return [p for m, u, p in self.calls if m == "GET" and u == URL and p.get("watch") != "true"]

    def watches(self) -> list[dict[str, str]]:
        return [p for m, _, p in self.calls if m == "GET" and p.get("watch") == "true"]

    def deletes(self) -> list[str]:
        return [u.rsplit("/", 1)[1] for m, u, _ in self.calls if m == "DELETE"]


def sweep(session: FakeSession, **kwargs: Any) -> watches.Swept:
    return watches.delete_custom_resources(session, SERVER, "ns", [PATH], **kwargs)  # type: ignore[arg-type]


def test_teardown_returns_on_the_deletion_event_after_a_list_dated_by_its_own_delete() -> None:
    api = FakeSession("a")
    api.on_watch = lambda: [api.deleted_event("a")]  # the operator removes its finalizer
    swept = sweep(api, wait=5.0)
    assert swept.left == [] and swept.remaining == []
    quick, confirming = api.lists()
    assert quick == {"resourceVersion": "0"}
    # Not older than the revision its own DELETE wrote: served once the cache has that event.
    assert confirming == {"resourceVersion": "12", "resourceVersionMatch": "NotOlderThan"}
    (watch,) = api.watches()
    assert watch["resourceVersion"] == "12" and watch["allowWatchBookmarks"] == "true"
    assert swept.seen == {PATH: "13"}, "the last revision heard: release_namespace lists from it"


def test_a_resource_the_cache_had_not_seen_yet_is_deleted_too() -> None:
    api = FakeSession("a", "late")
    api.hidden = {"late"}  # written just before teardown: not in the cache-served list
    swept = sweep(api)
    assert api.deletes() == ["a", "late"]
    assert sorted(swept.left) == ["mysqlclusters/a", "mysqlclusters/late"]


def test_without_a_write_of_its_own_the_confirming_list_is_a_quorum_read() -> None:
    api = FakeSession()
    assert sweep(api, wait=5.0).left == []
    assert api.lists() == [{"resourceVersion": "0"}, {}]
    assert api.watches() == [], "nothing to wait for"


def test_a_resource_already_being_deleted_dates_nothing() -> None:
    api = FakeSession("a")
    api.objects["a"]["metadata"]["deletionTimestamp"] = "earlier"  # the test deleted it itself
    sweep(api)
    assert api.lists()[1] == {}, "its revision may predate the test's last writes"


def test_resources_deleted_outright_date_nothing() -> None:
    api = FakeSession("plain", finalizers=False)
    swept = sweep(api)
    assert swept.left == [] and api.lists()[1] == {}


def stale_cache(api: FakeSession) -> None:
    """Cache-served lists show every object at resourceVersion 1 (an operator wrote since)."""
    original_get = api.get

    def stale_get(url: str, params: dict[str, str] | None = None, **kwargs: Any) -> FakeResponse:
        response = original_get(url, params, **kwargs)
        if (params or {}).get("resourceVersion") == "0":
            for item in response.json()["items"]:
                item["metadata"]["resourceVersion"] = "1"
                item["metadata"].pop("deletionTimestamp", None)
        return response

    api.get = stale_get  # type: ignore[method-assign]


def test_a_stale_listed_version_is_read_again_from_etcd_and_deleted_on_that() -> None:
    api = FakeSession("a")
    stale_cache(api)
    sweep(api)
    first, second = [body for method, _, body in api.calls if method == "DELETE"]
    assert first["preconditions"] == {"uid": "uid-a", "resourceVersion": "1"}  # 409
    assert second["preconditions"] == {"uid": "uid-a", "resourceVersion": "11"}, "as the GET showed it"
    assert api.lists()[1] == {"resourceVersion": "12", "resourceVersionMatch": "NotOlderThan"}


def test_a_stale_entry_already_being_deleted_dates_nothing() -> None:
    api = FakeSession("a")
    api.objects["a"]["metadata"]["deletionTimestamp"] = "just before teardown"
    stale_cache(api)  # the cache has not seen that delete yet
    sweep(api)
    assert [body for method, _, body in api.calls if method == "DELETE"][-1] == {}
    assert api.lists()[1] == {}, "a quorum list: that delete may predate the test's last writes"


def test_a_seen_view_makes_release_one_list_served_at_once() -> None:
    api = FakeSession("stuck")
    api.objects["stuck"]["metadata"]["deletionTimestamp"] = "earlier"
    swept = sweep(api, seen={PATH: "20"})
    assert api.lists() == [{"resourceVersion": "20", "resourceVersionMatch": "NotOlderThan"}]
    assert swept.remaining == [(PATH, "stuck")]
    watches.strip_finalizers(api, SERVER, "ns", swept.remaining)  # type: ignore[arg-type]
    assert [c[1] for c in api.calls if c[0] == "PATCH"] == [f"{URL}/stuck"]


def test_at_the_deadline_what_is_still_listed_is_reported() -> None:
    api = FakeSession("stuck")
    swept = sweep(api, wait=0.2)  # every watch ends without the DELETED event
    assert swept.left == ["mysqlclusters/stuck"]
    assert len(api.watches()) >= 1


def test_a_watch_that_ends_early_is_followed_by_a_list_that_may_show_it_gone() -> None:
    api = FakeSession("a")
    original_get = api.get

    def get(url: str, params: dict[str, str] | None = None, **kwargs: Any) -> FakeResponse:
        if (params or {}).get("watch") == "true":
            api.objects.pop("a", None)  # deleted while no watch was open: only a list can tell
        return original_get(url, params, **kwargs)

    api.get = get  # type: ignore[method-assign]
    assert sweep(api, wait=5.0).left == []


def test_wait_for_object_returns_on_the_added_event() -> None:
    api = FakeSession()
    api.watch_events = [{"type": "ADDED", "object": {"metadata": {"name": "default"}}}]
    assert watches.wait_for_object(api, URL, "default", timeout=5.0)  # type: ignore[arg-type]
    (watch,) = api.watches()
    assert watch["fieldSelector"] == "metadata.name=default"
    assert watch["resourceVersion"] == "0", "what the cache holds arrives first, at once"


def test_wait_for_object_gives_up_at_its_timeout() -> None:
    api = FakeSession()
    assert not watches.wait_for_object(api, URL, "default", timeout=0.2)  # type: ignore[arg-type]


def test_wait_for_object_without_a_watch_still_finds_it() -> None:
    api = FakeSession("default")
    original_get = api.get

    def no_watch(url: str, params: dict[str, str] | None = None, **kwargs: Any) -> FakeResponse:
        if (params or {}).get("watch") == "true":
            return FakeResponse(status=403, body={"kind": "Status", "code": 403})
        return original_get(url, params, **kwargs)

    api.get = no_watch  # type: ignore[method-assign]
    assert watches.wait_for_object(api, URL, "default", timeout=5.0)  # type: ignore[arg-type]


def test_a_failed_list_while_waiting_does_not_count_as_gone() -> None:
    api = FakeSession("stuck")
    original_get = api.get
    lists = 0

    def failing_later(url: str, params: dict[str, str] | None = None, **kwargs: Any) -> FakeResponse:
        nonlocal lists
        if url == URL and (params or {}).get("watch") != "true":
            lists += 1
            if lists > 2:  # the quick and the confirming list answer; later looks fail
                return FakeResponse(status=503, body={"kind": "Status", "code": 503})
        return original_get(url, params, **kwargs)

    api.get = failing_later  # type: ignore[method-assign]
    assert sweep(api, wait=0.3).left == ["mysqlclusters/stuck"]
