"""`migrate-storage` against an in-memory apiserver that behaves as the real one does where it matters:
an unchanged object is written only when its stored encoding differs, a stale resourceVersion is a 409,
and a JSON patch's `test` ops guard the trim. (The E2E twin, tests/e2e/test_storage_migration.py, runs
it on a real apiserver.)"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from mysql_operator.api import v1
from mysql_operator.cli.storage_migration import (
    CRD_NAME,
    MigrationError,
    Outcome,
    migrate,
    storage_version_hash,
)

V1_HASH = storage_version_hash(v1.GROUP, "v1", v1.KIND)


class Reply:
    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self._body = status, body
        self.text = json.dumps(body)

    def json(self) -> Any:
        return copy.deepcopy(self._body)


def status(code: int, message: str) -> Reply:
    return Reply(code, {"kind": "Status", "code": code, "message": message})


class FakeApiserver:
    """Objects as (stored version, body); each write bumps one global revision, as etcd does."""

    def __init__(self, stored_versions: list[str], storage: str = "v1") -> None:
        self.revision = 100
        self.crd: dict[str, Any] = {
            "metadata": {"name": CRD_NAME, "generation": 3},
            "spec": {
                "versions": [{"name": v, "storage": v == storage} for v in ("v1alpha1", "v1beta1", "v1")]
            },
            "status": {"storedVersions": stored_versions},
        }
        self.objects: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self.hashes = [V1_HASH]
        """Discovery's storageVersionHash, one per discovery read (the last one repeats)."""
        self.fail: dict[str, Reply] = {}
        """Object name → the reply its write gets instead."""
        self.before_write: list[Any] = []
        """Callables run before the first object write (a concurrent writer)."""
        self.page_size: int | None = None

    def add(self, namespace: str, name: str, stored_at: str) -> None:
        self.revision += 1
        meta = {"name": name, "namespace": namespace, "resourceVersion": str(self.revision)}
        self.objects[(namespace, name)] = (stored_at, {"apiVersion": v1.API_VERSION, "metadata": meta})

    def stored_at(self, namespace: str, name: str) -> str:
        return self.objects[(namespace, name)][0]

    def get(self, *, version: str, url: str, params: dict[str, Any] | None = None, **_: Any) -> Reply:
        if url == f"customresourcedefinitions/{CRD_NAME}":
            return Reply(200, self.crd)
        if version == v1.API_VERSION and url == "":
            hash_ = self.hashes.pop(0) if len(self.hashes) > 1 else self.hashes[0]
            return Reply(200, {"resources": [{"name": v1.PLURAL, "storageVersionHash": hash_}]})
        if version == v1.API_VERSION and url == v1.PLURAL:
            items = [
                body for _, body in sorted(self.objects.values(), key=lambda o: o[1]["metadata"]["name"])
            ]
            start = int((params or {}).get("continue") or 0)
            size = self.page_size or len(items)
            more = start + size < len(items)
            meta = {"continue": str(start + size)} if more else {}
            return Reply(200, {"items": items[start : start + size], "metadata": meta})
        return status(404, f"no {url}")

    def patch(self, *, version: str, url: str, data: str, namespace: str | None = None, **_: Any) -> Reply:
        if url == f"customresourcedefinitions/{CRD_NAME}/status":
            return self._patch_crd_status(json.loads(data))
        while self.before_write:
            self.before_write.pop(0)()
        name = url.split("/", 1)[1]
        if name in self.fail:
            return self.fail[name]
        if (namespace, name) not in self.objects:
            return status(404, f"{name} not found")
        stored, body = self.objects[(namespace, name)]
        if json.loads(data)["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            return status(409, "the object has been modified")
        if stored != "v1":  # different bytes at the storage version: written
            self.revision += 1
            body["metadata"]["resourceVersion"] = str(self.revision)
            self.objects[(namespace, name)] = ("v1", body)
        return Reply(200, body)

    def _patch_crd_status(self, ops: list[dict[str, Any]]) -> Reply:
        for op in ops:
            section, key = op["path"].strip("/").split("/")
            if op["op"] == "test" and self.crd[section][key] != op["value"]:
                return status(422, f"test failed at {op['path']}")
            if op["op"] == "replace":
                self.crd[section][key] = op["value"]
        return Reply(200, self.crd)


class Clock:
    def __init__(self) -> None:
        self.now, self.slept = 0.0, 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1


def run(server: FakeApiserver, clock: Clock | None = None, timeout: float = 60.0) -> Any:
    clock = clock or Clock()
    return migrate(server, ready_timeout=timeout, clock=clock, sleep=clock.sleep)


def test_objects_stored_at_v1beta1_are_rewritten_then_stored_versions_trimmed() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.add("a", "old-1", "v1beta1")
    server.add("b", "old-2", "v1beta1")
    server.add("a", "new", "v1")

    outcome = run(server)

    assert sorted(outcome.rewritten) == ["a/old-1", "b/old-2"] and outcome.current == ["a/new"]
    assert {server.stored_at(*k) for k in server.objects} == {"v1"}
    assert server.crd["status"]["storedVersions"] == ["v1"] and outcome.trimmed


def test_a_failed_write_leaves_stored_versions_alone_but_migrates_the_rest() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    for name in ("a", "b", "c"):
        server.add("ns", name, "v1beta1")
    server.fail["b"] = status(500, "etcd timeout")

    outcome = run(server)

    assert outcome.failed == {"ns/b": "HTTP 500: etcd timeout"} and not outcome.trimmed
    assert server.crd["status"]["storedVersions"] == ["v1beta1", "v1"]
    assert outcome.stored_versions == ["v1beta1", "v1"]
    assert (server.stored_at("ns", "a"), server.stored_at("ns", "b")) == ("v1", "v1beta1")

    del server.fail["b"]
    assert run(server).trimmed, "a second run finishes the job"
    assert server.crd["status"]["storedVersions"] == ["v1"]


def test_objects_written_or_deleted_by_others_since_the_list_count_as_done() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.add("ns", "edited", "v1beta1")
    server.add("ns", "deleted", "v1beta1")

    def someone_writes() -> None:
        server.add("ns", "edited", "v1")  # a newer resourceVersion, stored at v1 by that write
        del server.objects[("ns", "deleted")]

    server.before_write.append(someone_writes)
    outcome = run(server)

    assert sorted(outcome.moved) == ["ns/deleted", "ns/edited"] and not outcome.failed
    assert server.crd["status"]["storedVersions"] == ["v1"]


def test_every_page_of_the_list_is_migrated() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.page_size = 2
    for i in range(5):
        server.add("ns", f"db-{i}", "v1beta1")

    assert len(run(server).rewritten) == 5
    assert {server.stored_at(*k) for k in server.objects} == {"v1"}


def test_refuses_to_start_while_the_crd_stores_another_version() -> None:
    server = FakeApiserver(["v1beta1"], storage="v1beta1")
    server.add("ns", "db", "v1beta1")
    with pytest.raises(MigrationError, match=r"stores \['v1beta1'\], not v1: install the new CRD"):
        run(server)
    assert server.stored_at("ns", "db") == "v1beta1"


def test_waits_until_discovery_says_the_apiserver_stores_v1() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.add("ns", "db", "v1beta1")
    old = storage_version_hash(v1.GROUP, "v1beta1", v1.KIND)
    server.hashes = [old, old, V1_HASH]
    clock = Clock()

    assert run(server, clock).trimmed
    assert clock.slept == 2


def test_gives_up_without_writing_when_the_apiserver_never_stores_v1() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.add("ns", "db", "v1beta1")
    server.hashes = [storage_version_hash(v1.GROUP, "v1beta1", v1.KIND)]
    with pytest.raises(MigrationError, match="does not store mysqlclusters at v1 after 5s"):
        run(server, timeout=5)
    assert server.stored_at("ns", "db") == "v1beta1"
    assert server.crd["status"]["storedVersions"] == ["v1beta1", "v1"]


def test_no_trim_when_the_crd_changed_during_the_migration() -> None:
    server = FakeApiserver(["v1beta1", "v1"])
    server.add("ns", "db", "v1beta1")

    def crd_edited() -> None:
        server.crd["metadata"]["generation"] += 1

    server.before_write.append(crd_edited)
    with pytest.raises(MigrationError, match="test failed at /metadata/generation"):
        run(server)
    assert server.crd["status"]["storedVersions"] == ["v1beta1", "v1"]


# -- the command ------------------------------------------------------------------------------------------

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.usefixtures("restore_cli_logging")
def test_the_command_names_a_missing_kubeconfig_and_exits_2(tmp_path: Any, capsys: Any) -> None:
    from mysql_operator.cli.main import main

    assert main(["migrate-storage", "--kubeconfig", str(tmp_path / "nope")]) == 2
    assert "nope: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome(rewritten=["ns/a"], stored_versions=["v1"]), 0),
        (Outcome(failed={"ns/a": "HTTP 500: x"}, stored_versions=["v1beta1", "v1"]), 1),
    ],
)
@pytest.mark.usefixtures("restore_cli_logging")
def test_the_command_exits_1_unless_every_object_was_restored(
    tmp_path: Any, monkeypatch: Any, outcome: Outcome, code: int
) -> None:
    from mysql_operator.cli import storage_migration
    from mysql_operator.cli.main import main

    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    monkeypatch.setattr(storage_migration, "migrate", lambda http, **_: outcome)
    assert main(["migrate-storage", "--kubeconfig", str(config)]) == code


@pytest.mark.usefixtures("restore_cli_logging")
def test_the_command_exits_1_when_the_migration_cannot_start(tmp_path: Any, monkeypatch: Any) -> None:
    from mysql_operator.cli import storage_migration
    from mysql_operator.cli.main import main

    def refuse(http: Any, **_: Any) -> Outcome:
        raise MigrationError("CRD stores ['v1beta1'], not v1")

    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    monkeypatch.setattr(storage_migration, "migrate", refuse)
    assert main(["migrate-storage", "--kubeconfig", str(config)]) == 1
