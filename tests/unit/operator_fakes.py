"""An in-memory stand-in for `mysql_operator.controller.client.ApiClient`, for reconciler unit tests only.

It keeps the apiserver behaviours the reconciler's correctness rests on: resourceVersion
preconditions (409), AlreadyExists (409), merge-patch semantics (lists replaced, None deletes),
a status subresource that ignores everything but status, generation bumps on spec changes,
finalizers holding a deleted object, and a few defaults the apiserver adds to children.
E2E tests always use a real kube-apiserver.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pykube.exceptions import HTTPError

from mysql_operator.controller.children import resources
from mysql_operator.controller.kinds import Kind, StatefulSet

Obj = dict[str, Any]


def api_error(code: int, reason: str, message: str) -> HTTPError:
    exc = HTTPError(code, message)
    exc.reason = reason  # type: ignore[attr-defined]
    return exc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _apiserver_defaults(kind: str, obj: Obj) -> None:
    """A few of the defaults a real apiserver adds, so projection is really exercised."""
    spec = obj.get("spec") or {}
    pod_specs = []
    if kind == "StatefulSet":
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        pod_specs.append(spec.get("template", {}).get("spec", {}))
        obj.setdefault("status", {"replicas": 0, "availableReplicas": 0})
    if kind == "CronJob":
        spec.setdefault("suspend", False)
        pod_specs.append(spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {}))
    if kind == "Service":
        spec.setdefault("clusterIPs", ["None"])
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("type", "ClusterIP")
        for port in spec.get("ports", []):
            port.setdefault("protocol", "TCP")
    if kind == "Secret" and "stringData" in obj:
        # stringData is merged over data, as the apiserver does.
        obj["data"] = {**(obj.get("data") or {}), **{k: "b64:" + v for k, v in obj.pop("stringData").items()}}
    for pod in pod_specs:
        pod.setdefault("dnsPolicy", "ClusterFirst")
        pod.setdefault("schedulerName", "default-scheduler")
        for container in pod.get("containers", []):
            container.setdefault("imagePullPolicy", "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("resources", {})
            for port in container.get("ports", []):
                port.setdefault("protocol", "TCP")
            probe = container.get("readinessProbe")
            if probe:
                probe.setdefault("successThreshold", 1)
                probe.setdefault("failureThreshold", 3)
            # The apiserver canonicalises quantities.
            for group in ("requests", "limits"):
                for name, value in (container["resources"].get(group) or {}).items():
                    if value == "0.5":
                        container["resources"][group][name] = "500m"


class FakeKube:
    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.clock = clock or (lambda: START)
        """The apiserver's now: a graceful pod delete sets deletionTimestamp to now + the grace."""
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        self.writes: list[tuple[str, str, str]] = []
        """(verb, resource[/subresource], name) of every write, in order."""
        self.failures: dict[tuple[str, str], list[HTTPError]] = {}
        """(verb, resource) -> errors to raise on the next such calls (then the call is not made)."""
        self.before_create: dict[str, Obj] = {}
        """resource -> object that "someone else" creates just before our create: AlreadyExists."""
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self.applied: dict[tuple[str, str | None, str], Obj] = {}
        """Our last apply configuration per object: what server-side apply remembers as our fields."""
        self.deletes: list[tuple[str, str, str | None]] = []
        """(resource, name, uid precondition) of every delete that found its object."""
        self.graces: list[tuple[str, str, int | None]] = []
        """(resource, name, gracePeriodSeconds) of the same deletes."""
        self.stale: dict[tuple[str, str | None, str], Obj] = {}
        """What an informer cache still holds (a deleted object's namesake): a get that is not
        fresh returns it instead of the live object (lists are not affected)."""

    # -- helpers for tests -------------------------------------------------------------------

    def put(self, kind: Kind, obj: Obj) -> Obj:
        """Store an object as if created by someone else (no write recorded)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("generation", 1)
        _apiserver_defaults(kind.kind, obj)
        self.objects[(kind.endpoint, meta.get("namespace"), meta["name"])] = obj
        return copy.deepcopy(obj)

    def peek(self, kind: Kind, namespace: str | None, name: str) -> Obj | None:
        obj = self.objects.get((kind.endpoint, namespace, name))
        return copy.deepcopy(obj) if obj else None

    def set_status(self, kind: Kind, namespace: str, name: str, status: Obj) -> None:
        """What another controller (StatefulSet, Job) would write."""
        obj = self.objects[(kind.endpoint, namespace, name)]
        obj["status"] = merge_patch(obj.get("status") or {}, status)
        obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def collect_garbage(self) -> list[str]:
        """What kube-controller-manager's garbage collector does: delete every object whose owners
        are all gone. Returns the names deleted."""
        uids = {obj["metadata"]["uid"] for obj in self.objects.values()}
        gone = [
            key
            for key, obj in self.objects.items()
            if obj["metadata"].get("ownerReferences")
            and not any(r["uid"] in uids for r in obj["metadata"]["ownerReferences"])
        ]
        for key in gone:
            del self.objects[key]
        return [name for _, _, name in gone]

    def fail_next(self, verb: str, resource: str, code: int, reason: str, message: str) -> None:
        self.failures.setdefault((verb, resource), []).append(api_error(code, reason, message))

    # -- ApiClient ---------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str, *, fresh: bool = False) -> Obj | None:
        self._maybe_fail("get", kind.endpoint)
        if not fresh and (kind.endpoint, namespace, name) in self.stale:
            return copy.deepcopy(self.stale[(kind.endpoint, namespace, name)])
        return self.peek(kind, namespace, name)

    def list(self, kind: Kind, namespace: str, label_selector: str, *, fresh: bool = False) -> list[Obj]:
        self._maybe_fail("list", kind.endpoint)
        wanted = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        return [
            copy.deepcopy(obj)
            for (resource, ns, _), obj in sorted(self.objects.items())
            if resource == kind.endpoint
            and ns == namespace
            and wanted.items() <= (obj["metadata"].get("labels") or {}).items()
        ]

    def events(self, namespace: str, kind: str, name: str) -> list[Obj]:
        """Events the test put (kind Event), about that object."""
        return [
            copy.deepcopy(obj)
            for (resource, ns, _), obj in sorted(self.objects.items())
            if resource == "events"
            and ns == namespace
            and (obj.get("involvedObject") or {}).get("kind") == kind
            and (obj.get("involvedObject") or {}).get("name") == name
        ]

    def create(self, kind: Kind, obj: Obj) -> Obj:
        self._maybe_fail("create", kind.endpoint)
        meta = obj["metadata"]
        key = (kind.endpoint, meta.get("namespace"), meta["name"])
        if kind.endpoint in self.before_create:
            self.put(kind, self.before_create.pop(kind.endpoint))
        if key in self.objects:
            raise api_error(409, "AlreadyExists", f'{kind.endpoint} "{meta["name"]}" already exists')
        self.writes.append(("create", kind.endpoint, meta["name"]))
        return self.put(kind, obj)

    def patch_merge(
        self, kind: Kind, namespace: str | None, name: str, patch: Obj, *, subresource: str | None = None
    ) -> Obj:
        return self._patch(kind, namespace, name, subresource, lambda live: merge_patch(live, patch))

    def patch_json(
        self, kind: Kind, namespace: str | None, name: str, ops: list[Obj], *, subresource: str | None = None
    ) -> Obj:
        return self._patch(kind, namespace, name, subresource, lambda live: _json_patch(live, ops))

    def apply(self, kind: Kind, obj: Obj, *, force: bool = True) -> Obj:
        """Server-side apply by one field manager, as far as the reconciler relies on it: named list
        items merge by name (others' items stay), fields in our previous apply but not in this one
        are removed, and a uid in the body is a precondition (never a create)."""
        meta = obj["metadata"]
        key = (kind.endpoint, meta.get("namespace"), meta["name"])
        self._maybe_fail("patch", kind.endpoint)
        live = self.objects.get(key)
        if live is None:
            raise api_error(404, "NotFound", f'{kind.endpoint} "{meta["name"]}" not found')
        if meta.get("uid") not in (None, live["metadata"]["uid"]):
            raise api_error(409, "Conflict", "Precondition failed: UID in precondition")
        if kind.kind == "StatefulSet":
            fixed = ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy")
            changed = [f for f in fixed if f in obj.get("spec", {}) and obj["spec"][f] != live["spec"].get(f)]
            if changed:  # the apiserver's StatefulSet update validation
                message = f"spec: Forbidden: updates to statefulset spec for fields {changed} are forbidden"
                raise api_error(422, "Invalid", message)
        result = copy.deepcopy(live)
        previous = self.applied.get(key)
        if previous is not None:
            _remove_dropped(result, previous, obj)
        result = _apply_merge(result, copy.deepcopy(obj))
        self.writes.append(("apply", kind.endpoint, meta["name"]))
        if result.get("spec") != live.get("spec"):
            result["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
        result["metadata"]["resourceVersion"] = str(next(self._rv))
        _apiserver_defaults(kind.kind, result)
        self.objects[key] = result
        self.applied[key] = copy.deepcopy(obj)
        return copy.deepcopy(result)

    def delete(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> bool:
        self._maybe_fail("delete", kind.endpoint)
        key = (kind.endpoint, namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            return False
        self.deletes.append((kind.endpoint, name, uid))
        self.graces.append((kind.endpoint, name, grace_period_seconds))
        if uid is not None and uid != obj["metadata"]["uid"]:
            have = obj["metadata"]["uid"]
            message = f"the UID in the precondition ({uid}) does not match the UID in record ({have})"
            raise api_error(409, "Conflict", message)
        self.writes.append(("delete", kind.endpoint, name))
        graceful = (
            kind.kind == "Pod" and (obj.get("spec") or {}).get("nodeName") and grace_period_seconds != 0
        )
        if graceful:
            # A pod on a node goes only once its kubelet says so; until then it is Terminating.
            grace = grace_period_seconds
            if grace is None:
                grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            deadline = self.clock() + timedelta(seconds=grace)
            obj["metadata"].setdefault("deletionTimestamp", deadline.strftime("%Y-%m-%dT%H:%M:%SZ"))
            obj["metadata"]["deletionGracePeriodSeconds"] = grace
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
        elif obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", "2026-01-01T00:00:00Z")
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
        else:
            del self.objects[key]
        return True

    # -- internals ---------------------------------------------------------------------------

    def _maybe_fail(self, verb: str, resource: str) -> None:
        queued = self.failures.get((verb, resource))
        if queued:
            raise queued.pop(0)

    def _patch(
        self, kind: Kind, namespace: str | None, name: str, subresource: str | None, apply: Any
    ) -> Obj:
        resource = f"{kind.endpoint}/{subresource}" if subresource else kind.endpoint
        self._maybe_fail("patch", resource)
        key = (kind.endpoint, namespace, name)
        live = self.objects.get(key)
        if live is None:
            raise api_error(404, "NotFound", f'{resource} "{name}" not found')
        patched = apply(copy.deepcopy(live))
        wanted_rv = patched["metadata"].get("resourceVersion")
        if wanted_rv != live["metadata"]["resourceVersion"]:
            raise api_error(409, "Conflict", "the object has been modified; please apply your changes")
        self.writes.append(("patch", resource, name))
        if subresource == "status":
            result = copy.deepcopy(live)
            result["status"] = patched.get("status")
        else:
            result = patched
            if kind.kind == "MySQLCluster":  # status subresource: the main endpoint ignores status
                result["status"] = copy.deepcopy(live.get("status"))
            if result.get("spec") != live.get("spec"):
                result["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
        result = {k: v for k, v in result.items() if v is not None}
        result["metadata"]["resourceVersion"] = str(next(self._rv))
        _apiserver_defaults(kind.kind, result)
        if result["metadata"].get("deletionTimestamp") and not result["metadata"].get("finalizers"):
            del self.objects[key]
        else:
            self.objects[key] = result
        return copy.deepcopy(result)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def _apply_merge(live: Any, applied: Any) -> Any:
    if isinstance(applied, dict) and isinstance(live, dict):
        out = dict(live)
        for k, v in applied.items():
            out[k] = _apply_merge(live.get(k), v)
        return out
    if isinstance(applied, list) and isinstance(live, list) and _named(applied):
        merged = {i.get("name"): i for i in live if isinstance(i, dict)}
        order = [i.get("name") for i in live if isinstance(i, dict)]
        for item in applied:
            merged[item["name"]] = _apply_merge(merged.get(item["name"]), item)
            if item["name"] not in order:
                order.append(item["name"])
        return [merged[n] for n in order]
    return copy.deepcopy(applied)


def _remove_dropped(live: Any, before: Any, now: Any) -> None:
    """Remove from `live` what `before` set and `now` no longer does."""
    if isinstance(before, dict) and isinstance(live, dict):
        for k, v in before.items():
            if not isinstance(now, dict) or k not in now:
                live.pop(k, None)
            else:
                _remove_dropped(live.get(k), v, now[k])
    elif isinstance(before, list) and isinstance(live, list) and _named(before):
        now_names = {i["name"]: i for i in now} if isinstance(now, list) and _named(now) else {}
        for item in before:
            if item["name"] not in now_names:
                live[:] = [i for i in live if not (isinstance(i, dict) and i.get("name") == item["name"])]
            else:
                match = next((i for i in live if isinstance(i, dict) and i.get("name") == item["name"]), None)
                _remove_dropped(match, item, now_names[item["name"]])


def _json_patch(doc: Obj, ops: list[Obj]) -> Obj:
    """The RFC 6902 subset on plain object paths (no list indices) that tests need."""
    for op in ops:
        *parents, leaf = [p for p in op["path"].split("/") if p]
        target = doc
        for part in parents:
            target = target.setdefault(part, {})
        if op["op"] == "test":
            if target.get(leaf) != op["value"]:
                raise api_error(422, "Invalid", f"test failed at {op['path']}")
        elif op["op"] in ("add", "replace"):
            target[leaf] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            target.pop(leaf, None)
    return doc


def rollout_completed(
    kube: FakeKube, replicas: int = 1, name: str = "db-mysql", namespace: str = "ns"
) -> None:
    """What the StatefulSet controller reports once every pod runs the latest template and is ready."""
    sts = kube.peek(StatefulSet, namespace, name)
    assert sts is not None
    status = {"observedGeneration": sts["metadata"]["generation"], "replicas": replicas}
    kube.set_status(
        StatefulSet, namespace, name, status | {"readyReplicas": replicas, "updatedReplicas": replicas}
    )


def database_pod(ordinal: int = 0, name: str = "db", namespace: str = "ns", **body: Any) -> Obj:
    """A database pod of cluster `name`, named and labelled as its StatefulSet makes them; `body`
    holds its spec and status."""
    meta = {
        "name": f"{name}-mysql-{ordinal}",
        "namespace": namespace,
        "labels": resources.pod_labels(name, "database"),
    }
    return {"metadata": meta, **body}


def cluster(name: str = "db", namespace: str = "ns", **spec: Any) -> Obj:
    """A MySQLCluster as a user would create it."""
    return {
        "apiVersion": "db.example.com/v1beta1",
        "kind": "MySQLCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}, **spec},
    }


class RecordingEvents:
    """An EventRecorder stand-in: remembers (type, reason, message)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """The reconciler's `now`: still until a test advances it."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
