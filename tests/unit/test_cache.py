"""CachedClient: reads from informer caches, our own writes laid over them until the caches catch up."""

from __future__ import annotations

from typing import Any

import pytest
from operator_fakes import FakeKube

from mysql_operator.controller.cache import PRUNE_MIN, CachedClient
from mysql_operator.controller.kinds import Job, Secret, StatefulSet
from mysql_operator.runtime.types import Key


class FakeInformer:
    def __init__(self) -> None:
        self.store: dict[Key, dict[str, Any]] = {}
        self.resource_version = "1"

    def has_synced(self) -> bool:
        return True

    def for_namespace(self, namespace: str | None) -> FakeInformer:
        return self

    def get(self, key: Key) -> dict[str, Any] | None:
        return self.store.get(key)

    def select_keys(self, namespace: str | None, labels: dict[str, str]) -> list[Key]:
        return sorted(
            key
            for key, o in self.store.items()
            if namespace in (None, o["metadata"]["namespace"])
            and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        )

    def catch_up(self, kube: FakeKube, kind: Any, name: str) -> None:
        """What the watch does: deliver the apiserver's current state up to its latest rv."""
        obj = kube.peek(kind, "ns", name)
        if obj is None:
            self.store.pop(Key(f"ns/{name}"), None)
        else:
            self.store[Key(f"ns/{name}")] = obj
        self.resource_version = str(next(kube._rv))


@pytest.fixture
def informer() -> FakeInformer:
    return FakeInformer()


@pytest.fixture
def client(kube: FakeKube, informer: FakeInformer) -> CachedClient:
    def lookup(kind: Any) -> Any:
        if kind in (StatefulSet, Secret):
            return informer
        raise LookupError(kind.kind)

    return CachedClient(kube, lookup)  # type: ignore[arg-type]


def sts(name: str = "db-mysql", replicas: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"replicas": replicas}}


def test_reads_come_from_the_cache_without_a_request(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    informer.store[Key("ns/db-mysql")] = sts(replicas=3)
    kube.fail_next("get", "statefulsets", 500, "InternalError", "a GET was made")
    assert client.get(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 3  # type: ignore[index]
    assert client.get(StatefulSet, "ns", "other") is None
    assert client.cache_reads == 2


def test_our_create_is_seen_before_the_cache_has_it(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    created = client.create(StatefulSet, sts())
    assert client.get(StatefulSet, "ns", "db-mysql") == created, "a second create would get 409"
    informer.catch_up(kube, StatefulSet, "db-mysql")
    assert client.get(StatefulSet, "ns", "db-mysql") == kube.peek(StatefulSet, "ns", "db-mysql")


def test_our_patch_wins_over_the_older_cached_object_until_the_cache_catches_up(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    kube.put(StatefulSet, sts())
    informer.catch_up(kube, StatefulSet, "db-mysql")
    patched = client.patch_merge(StatefulSet, "ns", "db-mysql", {"spec": {"replicas": 2}})
    assert client.get(StatefulSet, "ns", "db-mysql") == patched
    informer.catch_up(kube, StatefulSet, "db-mysql")
    assert client.get(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 2  # type: ignore[index]


def test_a_deletion_after_our_write_is_not_hidden_once_the_cache_caught_up(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    client.create(StatefulSet, sts())
    kube.delete(StatefulSet, "ns", "db-mysql")  # someone else, right after
    informer.catch_up(kube, StatefulSet, "db-mysql")
    assert client.get(StatefulSet, "ns", "db-mysql") is None, "our write must not outlive the deletion"


def test_kinds_without_an_informer_and_fresh_reads_go_to_the_apiserver(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    kube.put(Job, {"metadata": {"name": "db-final-backup", "namespace": "ns"}})
    assert client.get(Job, "ns", "db-final-backup") is not None
    kube.put(StatefulSet, sts(replicas=5))
    assert client.get(StatefulSet, "ns", "db-mysql") is None, "not in the cache yet"
    assert client.get(StatefulSet, "ns", "db-mysql", fresh=True)["spec"]["replicas"] == 5  # type: ignore[index]
    assert client.cache_reads == 1


def labelled(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": {"replicas": 1}}


def listed(client: CachedClient, selector: str) -> list[str]:
    return [o["metadata"]["name"] for o in client.list(StatefulSet, "ns", selector)]


def test_a_list_comes_from_the_cache_with_only_what_carries_the_labels(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    for found in (labelled("a", app="db", cluster="one"), labelled("b", app="db", cluster="two")):
        kube.put(StatefulSet, found)
        informer.catch_up(kube, StatefulSet, found["metadata"]["name"])
    kube.fail_next("list", "statefulsets", 500, "InternalError", "a LIST was made")
    assert listed(client, "app=db,cluster=one") == ["a"]
    assert listed(client, "app=db") == ["a", "b"]
    assert listed(client, "cluster=three") == []


def test_a_list_sees_our_label_writes_before_the_cache_does(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    kube.put(StatefulSet, labelled("a", cluster="one"))
    informer.catch_up(kube, StatefulSet, "a")
    client.patch_merge(StatefulSet, "ns", "a", {"metadata": {"labels": {"cluster": "two"}}})
    client.create(StatefulSet, labelled("b", cluster="two"))
    client.create(Secret, labelled("a-secret", cluster="two"))  # another kind's write: not listed
    client.create(
        StatefulSet,
        {
            **labelled("elsewhere", cluster="two"),
            "metadata": {"name": "elsewhere", "namespace": "other", "labels": {"cluster": "two"}},
        },
    )
    assert listed(client, "cluster=one") == [], "our patch took the label away"
    assert listed(client, "cluster=two") == ["a", "b"], "our patch gave it; our create made b"
    informer.catch_up(kube, StatefulSet, "a")
    informer.catch_up(kube, StatefulSet, "b")
    assert listed(client, "cluster=two") == ["a", "b"]


def test_a_created_secret_leaves_no_password_in_memory(client: CachedClient, informer: FakeInformer) -> None:
    secret = {
        "metadata": {"name": "db-credentials", "namespace": "ns"},
        "stringData": {"root-password": "pw"},
    }
    client.create(Secret, secret)
    kept = client.get(Secret, "ns", "db-credentials")
    assert kept is not None and kept["metadata"]["name"] == "db-credentials"
    assert "data" not in kept and "stringData" not in kept


def test_writes_the_caches_have_seen_are_forgotten_even_if_never_read_again(
    client: CachedClient, kube: FakeKube, informer: FakeInformer
) -> None:
    for i in range(PRUNE_MIN - 1):
        client.create(StatefulSet, sts(f"db-{i}"))
    assert client.remembered == PRUNE_MIN - 1
    informer.resource_version = "1000000"  # the watch went past every one of them
    client.create(StatefulSet, sts("db-last"))
    assert client.remembered == 0, "a converged cluster's children are never read again"
    kube.put(StatefulSet, sts("db-other"))
    informer.resource_version = "1"  # behind again
    for i in range(PRUNE_MIN):  # newer than the cache: laid over it, pruned or not
        client.patch_merge(StatefulSet, "ns", "db-other", {"spec": {"replicas": i}})
    assert client.get(StatefulSet, "ns", "db-other")["spec"]["replicas"] == PRUNE_MIN - 1  # type: ignore[index]


def test_a_remembered_write_keeps_no_managed_fields_and_the_caller_gets_them(
    client: CachedClient, kube: FakeKube
) -> None:
    body = sts()
    body["metadata"]["managedFields"] = [{"manager": "mysql-operator", "operation": "Apply"}]
    created = client.create(StatefulSet, body)
    assert created["metadata"]["managedFields"], "what the write returned is the caller's, whole"
    kept = client.get(StatefulSet, "ns", "db-mysql")
    assert kept is not None and "managedFields" not in kept["metadata"], "as the informers keep it"
    assert kept["spec"] == created["spec"]


class DeliveringInformer(FakeInformer):
    """An informer whose watch delivers `pending` (store and resourceVersion together, as the real one
    does under its lock) at a chosen point of a read: the injected interleaving."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[Key, dict[str, Any] | None, str]] = []
        self.deliver_after_store_read = False

    def deliver(self) -> None:
        for key, obj, rv in self.pending:
            if obj is None:
                self.store.pop(key, None)
            else:
                self.store[key] = obj
            self.resource_version = rv
        self.pending.clear()

    def get(self, key: Key) -> dict[str, Any] | None:
        found = super().get(key)
        if self.deliver_after_store_read:
            self.deliver()
        return found


@pytest.fixture
def delivering() -> DeliveringInformer:
    return DeliveringInformer()


@pytest.fixture
def racing(kube: FakeKube, delivering: DeliveringInformer) -> CachedClient:
    return CachedClient(kube, lambda kind: delivering)  # type: ignore[arg-type,return-value]


def test_our_write_delivered_between_the_store_read_and_the_rv_check_is_not_lost(
    racing: CachedClient, kube: FakeKube, delivering: DeliveringInformer
) -> None:
    kube.put(StatefulSet, sts())
    delivering.catch_up(kube, StatefulSet, "db-mysql")
    stale = delivering.store[Key("ns/db-mysql")]
    patched = racing.patch_merge(StatefulSet, "ns", "db-mysql", {"spec": {"replicas": 3}})
    rv = patched["metadata"]["resourceVersion"]
    # The watch delivers our patch just after the read took the store's (older) object.
    delivering.pending.append((Key("ns/db-mysql"), kube.peek(StatefulSet, "ns", "db-mysql"), rv))
    delivering.deliver_after_store_read = True
    read = racing.get(StatefulSet, "ns", "db-mysql")
    assert read is not None and read["spec"]["replicas"] == 3, f"stale read: {read} (store had {stale})"
    delivering.deliver_after_store_read = False
    assert racing.get(StatefulSet, "ns", "db-mysql")["spec"]["replicas"] == 3  # type: ignore[index]
    assert racing.remembered == 0, "once the store shows our write, the overlay is dropped"


def test_a_newer_object_the_informer_delivered_wins_over_our_write_even_if_its_rv_lags(
    racing: CachedClient, kube: FakeKube, delivering: DeliveringInformer
) -> None:
    kube.put(StatefulSet, sts())
    ours = racing.patch_merge(StatefulSet, "ns", "db-mysql", {"spec": {"replicas": 2}})
    kube.patch_merge(StatefulSet, "ns", "db-mysql", {"spec": {"replicas": 7}})  # someone else, after us
    # The store has the newer object; the informer's own resourceVersion has not moved (a stale
    # bookmark, a relist in progress): the object's resourceVersion decides.
    delivering.store[Key("ns/db-mysql")] = kube.peek(StatefulSet, "ns", "db-mysql")  # type: ignore[assignment]
    delivering.resource_version = "1"
    read = racing.get(StatefulSet, "ns", "db-mysql")
    assert read is not None and read["spec"]["replicas"] == 7, f"our older write {ours} hid a newer one"


def test_an_absent_object_is_a_deletion_only_once_the_informer_passed_our_write_before_the_read(
    racing: CachedClient, kube: FakeKube, delivering: DeliveringInformer
) -> None:
    created = racing.create(StatefulSet, sts())
    rv = int(created["metadata"]["resourceVersion"])
    # Not delivered yet: absent from the store means "not seen yet", not "deleted".
    assert racing.get(StatefulSet, "ns", "db-mysql") == created
    # Our create, then a deletion, delivered while the read is in the store: the read still
    # started before the informer caught up, so it keeps answering with our write...
    delivering.pending.append((Key("ns/db-mysql"), None, str(rv + 1)))
    delivering.deliver_after_store_read = True
    assert racing.get(StatefulSet, "ns", "db-mysql") == created
    # ...and the next read, after the informer passed our write, sees the deletion.
    assert racing.get(StatefulSet, "ns", "db-mysql") is None
    assert racing.remembered == 0
