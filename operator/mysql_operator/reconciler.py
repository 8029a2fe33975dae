"""Reconcile one MySQLCluster: children, finalizer, status.

Contract with the runtime: every pass starts from fresh GETs, makes each write at most once, and
never retries inside. A raised error (409 from a stale resourceVersion included) means "requeue
with backoff". A converged cluster costs GETs only: children are written when our fields differ
(`projection.py`), status when its meaning changed (`status.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pykube
from croniter import croniter
from pydantic import ValidationError
from pykube.exceptions import HTTPError

from . import resources
from .api import FINALIZER, MySQLClusterSpec, parse_spec
from .client import CONFLICT, INVALID, ApiClient, KubeClient, error_code
from .events import EventRecorder, EventType
from .finalizer import FinalBackup
from .kinds import CronJob, Kind, MySQLCluster, PersistentVolumeClaim, Secret, Service, StatefulSet
from .projection import owned_patch
from .runtime.types import Key, Result, split_key
from .status import (
    DEGRADED,
    ChildBlocked,
    Problem,
    compute_status,
    condition,
    status_equal,
    status_patch,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]

BLOCKED_RETRY_SECONDS = 60.0
"""A child the apiserver rejected is retried this slowly: a fix usually needs a spec change, which
wakes us anyway, but a 422 from an admission webhook may pass on its own."""

CRON_MACROS = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})


def valid_schedule(schedule: str) -> bool:
    """What the CronJob controller accepts: five fields or a macro (croniter alone allows six)."""
    schedule = schedule.strip()
    if schedule.startswith("@"):
        return schedule in CRON_MACROS
    return len(schedule.split()) == 5 and croniter.is_valid(schedule)


def describe(exc: ValidationError) -> str:
    parts = [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return "; ".join(parts) or "spec is invalid"


class ClusterGoing(Exception):
    """The cluster this pass read is being deleted (or is gone): stop writing children for it."""


def controller_of(obj: Obj) -> Obj | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def _merge(a: Obj, b: Obj) -> Obj:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class MySQLClusterReconciler:
    """`reconcile(key)` for MySQLCluster; see the module docstring for the contract."""

    def __init__(
        self,
        api: pykube.HTTPClient | ApiClient,
        *,
        recorder: EventRecorder | None = None,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.client: ApiClient = KubeClient(api) if isinstance(api, pykube.HTTPClient) else api
        self.recorder = recorder
        self.now = now or (lambda: datetime.now(UTC))
        self.final_backup = FinalBackup(self)

    def reconcile(self, key: Key) -> Result:
        namespace, name = split_key(key)
        cluster = self.client.get(MySQLCluster, namespace, name)
        if cluster is None:
            return Result()
        if cluster["metadata"].get("deletionTimestamp"):
            return self.final_backup.finalize(cluster)

        # Before anything else: from here on, deleting the cluster must wait for its final backup.
        cluster = self._ensure_finalizer(cluster)
        try:
            spec = parse_spec(cluster)
        except ValidationError as exc:
            return self._stop(cluster, Problem("InvalidSpec", describe(exc)))
        if spec.backup.enabled and not valid_schedule(spec.backup.schedule):
            message = (
                f"spec.backup.schedule {spec.backup.schedule!r} is not a cron schedule "
                "(five fields, or a macro such as @daily)"
            )
            return self._stop(cluster, Problem("InvalidSchedule", message))

        try:
            problems, sts = self._ensure_children(cluster, spec)
        except ClusterGoing:
            # The deletion's watch event brings the key back anyway; the requeue only makes sure.
            return Result(requeue=True)
        self.write_status(cluster, compute_status(cluster, sts, problems, now=self.now()))
        return Result(requeue_after=BLOCKED_RETRY_SECONDS) if problems else Result()

    # -- spec we cannot act on ---------------------------------------------------------------

    def _stop(self, cluster: Obj, problem: Problem) -> Result:
        """Report Failed and wait for the spec to change (its watch event wakes us): no retry storm."""
        meta = cluster["metadata"]
        sts = self.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        self.write_status(cluster, compute_status(cluster, sts, [problem], now=self.now()))
        return Result()

    # -- finalizer ---------------------------------------------------------------------------

    def _ensure_finalizer(self, cluster: Obj) -> Obj:
        meta = cluster["metadata"]
        finalizers = meta.get("finalizers") or []
        if FINALIZER in finalizers:
            return cluster
        # resourceVersion makes the patch conditional: a stale read gets 409 and a requeue.
        patch = {
            "metadata": {"finalizers": [*finalizers, FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        log.info("adding finalizer", extra={"cluster": meta["name"], "namespace": meta["namespace"]})
        return self.client.patch_merge(MySQLCluster, meta["namespace"], meta["name"], patch)

    # -- children ----------------------------------------------------------------------------

    def _ensure_children(self, cluster: Obj, spec: MySQLClusterSpec) -> tuple[list[Problem], Obj | None]:
        steps: list[tuple[Kind, Callable[[Obj], Obj]]] = [
            (Secret, resources.credentials_secret),
            (Service, resources.headless_service),
            (StatefulSet, resources.statefulset),
        ]
        if spec.backup.enabled:
            steps += [(PersistentVolumeClaim, resources.backup_pvc), (CronJob, resources.backup_cronjob)]
        problems: list[Problem] = []
        sts: Obj | None = None
        for kind, build in steps:
            try:
                live = self.ensure(kind, cluster, build(cluster))
            except ChildBlocked as blocked:
                problems.append(blocked.problem)
                continue
            if kind is StatefulSet:
                sts = live
        if not spec.backup.enabled:
            self._remove_owned(CronJob, cluster, resources.Names(cluster["metadata"]["name"]).cronjob)
        if sts is None:  # blocked: still report what is running
            meta = cluster["metadata"]
            sts = self.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        return problems, sts

    def ensure(self, kind: Kind, cluster: Obj, desired: Obj) -> Obj:
        """Create `desired`, or adopt and patch the live object where our fields differ.

        Children built without an ownerReference (PVCs, Jobs) are create-only.
        """
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        live = self.client.get(kind, namespace, name)
        if live is None:
            try:
                created = self.client.create(kind, desired)
            except HTTPError as exc:
                if error_code(exc) == INVALID:
                    raise self._rejected(kind, name, exc) from exc
                if error_code(exc) != CONFLICT:
                    raise
                # AlreadyExists: our earlier create whose reply was lost, or someone else's object.
                live = self.client.get(kind, namespace, name)
                if live is None:
                    raise
            else:
                log.info("created", extra={"kind": kind.kind, "object": name, "namespace": namespace})
                self.event(cluster, "Normal", "Created", f"created {kind.kind} {name}")
                return created

        patch: Obj = {}
        if meta.get("ownerReferences"):
            patch = self._adoption(kind, cluster, live)
        changes = owned_patch(kind.kind, desired, live)
        if changes:
            patch = _merge(changes, patch)
        if not patch:
            return live
        patch.setdefault("metadata", {})["resourceVersion"] = live["metadata"]["resourceVersion"]
        try:
            updated = self.client.patch_merge(kind, namespace, name, patch)
        except HTTPError as exc:
            if error_code(exc) == INVALID:
                raise self._rejected(kind, name, exc) from exc
            raise
        verb = "Updated" if changes else "Adopted"
        log.info(verb.lower(), extra={"kind": kind.kind, "object": name, "namespace": namespace})
        self.event(cluster, "Normal", verb, f"{verb.lower()} {kind.kind} {name}")
        return updated

    def _adoption(self, kind: Kind, cluster: Obj, live: Obj) -> Obj:
        """The patch that makes us the controller of `live`; {} when we already are."""
        uid = cluster["metadata"]["uid"]
        owner = controller_of(live)
        if owner is not None and owner.get("uid") == uid:
            return {}
        name = live["metadata"]["name"]
        if owner is not None:
            message = (
                f"{kind.kind} {name} is controlled by {owner.get('kind')} {owner.get('name')}; "
                "delete it or rename the cluster"
            )
            raise ChildBlocked(Problem("ChildConflict", message))
        # Adopt only for a cluster a fresh read shows alive (kube's ControllerRefManager rechecks the
        # deletionTimestamp the same way). An orphan may be the garbage collector's work for a
        # `propagationPolicy: Orphan` deletion that began after this pass read the cluster; adopting it
        # back would hand it to the garbage collector as soon as the cluster is gone.
        fresh = self.client.get(MySQLCluster, live["metadata"]["namespace"], cluster["metadata"]["name"])
        if fresh is None or fresh["metadata"]["uid"] != uid or fresh["metadata"].get("deletionTimestamp"):
            raise ClusterGoing(f"not adopting {kind.kind} {name}: the cluster is being deleted")
        refs = [r for r in live["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        return {"metadata": {"ownerReferences": [*refs, resources.owner_reference(cluster)]}}

    @staticmethod
    def _rejected(kind: Kind, name: str, exc: HTTPError) -> ChildBlocked:
        return ChildBlocked(Problem("ChildRejected", f"{kind.kind} {name} rejected by the apiserver: {exc}"))

    def _remove_owned(self, kind: Kind, cluster: Obj, name: str) -> None:
        namespace = cluster["metadata"]["namespace"]
        live = self.client.get(kind, namespace, name)
        owner = controller_of(live) if live else None
        if owner is None or owner.get("uid") != cluster["metadata"]["uid"]:
            return  # absent, or not ours to delete
        # Background: the CronJob's own Jobs and pods go with it.
        self.client.delete(kind, namespace, name, propagation_policy="Background")
        log.info("deleted", extra={"kind": kind.kind, "object": name, "namespace": namespace})
        self.event(cluster, "Normal", "Deleted", f"deleted {kind.kind} {name}: backups are disabled")

    # -- status and events -------------------------------------------------------------------

    def write_status(self, cluster: Obj, new: Obj, *, tolerate: tuple[int, ...] = ()) -> Obj:
        """Merge-patch /status when its meaning changed; returns the newest cluster we hold."""
        old = cluster.get("status")
        if status_equal(old, new):
            return cluster
        meta = cluster["metadata"]
        body = status_patch(old, new)
        body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        try:
            updated = self.client.patch_merge(
                MySQLCluster, meta["namespace"], meta["name"], body, subresource="status"
            )
        except HTTPError as exc:
            if error_code(exc) in tolerate:
                return cluster
            raise
        # One Warning per new problem, not per pass: the status only changes when the problem does.
        degraded, before = condition(new, DEGRADED) or {}, condition(old, DEGRADED) or {}
        said = (before.get("status"), before.get("reason"), before.get("message"))
        if degraded.get("status") == "True" and said != ("True", degraded["reason"], degraded["message"]):
            self.event(cluster, "Warning", degraded["reason"], degraded["message"])
        return updated

    def event(self, obj: Obj, type_: EventType, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(obj, type_, reason, message)
