"""Reconcile one MySQLCluster: children, finalizer, status.

Contract with the runtime: every pass reads through `client.get` (the informer caches, with our own
writes laid over them, in the operator; see `cache.py`), makes each write at most once, and never
retries inside. A fresh GET happens only before a write that needs one (AlreadyExists, adoption). A
raised error (409 from a stale resourceVersion included) means "requeue with backoff". A converged
cluster costs no request at all: children are written when our fields differ (`projection.py`),
status when its meaning changed (`status.py`). Whose an existing child is: `ownership.py`.
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
from .api import FINALIZER, RETAINED_ANNOTATION, MySQLClusterSpec, parse_spec
from .client import CONFLICT, INVALID, ApiClient, KubeClient, error_code
from .events import EventRecorder, EventType
from .finalizer import FinalBackup
from .kinds import CronJob, Kind, MySQLCluster, PersistentVolumeClaim, Secret, Service, StatefulSet
from .ownership import Claim, claim, controller_of
from .projection import applies, drifted
from .runtime.types import Key, Result, split_key
from .ssa import applied_hash, config_hash, upgrade_patch, with_config_hash
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
        if spec.backup.enabled and not valid_schedule(spec.backup.schedule.cron):
            message = (
                f"spec.backup.schedule.cron {spec.backup.schedule.cron!r} is not a cron schedule "
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
        problems: list[Problem] = []
        sts: Obj | None = None
        secret_ok = self._ensure_step(Secret, cluster, resources.credentials_secret, problems) is not None
        self._ensure_step(Service, cluster, resources.headless_service, problems)
        self._ensure_step(Service, cluster, resources.primary_service, problems)
        if secret_ok:
            # Never start pods on a Secret that is not ours: its author would know the root password.
            sts = self._ensure_step(StatefulSet, cluster, resources.statefulset, problems)
        if spec.backup.enabled:
            self._ensure_step(PersistentVolumeClaim, cluster, resources.backup_pvc, problems)
            if secret_ok:
                self._ensure_step(CronJob, cluster, resources.backup_cronjob, problems)
        else:
            self._remove_owned(CronJob, cluster, resources.Names(cluster["metadata"]["name"]).cronjob)
        if sts is None:  # blocked: still report what is running
            meta = cluster["metadata"]
            sts = self.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        return problems, sts

    def _ensure_step(
        self, kind: Kind, cluster: Obj, build: Callable[[Obj], Obj], problems: list[Problem]
    ) -> Obj | None:
        try:
            return self.ensure(kind, cluster, build(cluster))
        except ChildBlocked as blocked:
            problems.append(blocked.problem)
            return None

    def ensure(self, kind: Kind, cluster: Obj, desired: Obj) -> Obj:
        """Create `desired`, or, if the live object is ours (`ownership.py`), apply our fields when
        they differ (`ssa.py`). Kinds without owned fields (Secret, PVCs, Jobs) are create-only."""
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        body = with_config_hash(desired) if applies(kind.kind) else desired
        live = self.client.get(kind, namespace, name)
        if live is None:
            try:
                created = self.client.create(kind, body)
            except HTTPError as exc:
                if error_code(exc) == INVALID:
                    raise self._rejected(kind, name, exc) from exc
                if error_code(exc) != CONFLICT:
                    raise
                # AlreadyExists: our earlier create whose reply was lost (it carries our reference),
                # an object our cache does not show (foreign ones are not labelled), or a race.
                live = self.client.get(kind, namespace, name, fresh=True)
                if live is None:
                    raise
            else:
                log.info("created", extra={"kind": kind.kind, "object": name, "namespace": namespace})
                self.event(cluster, "Normal", "Created", f"created {kind.kind} {name}")
                return created

        how = claim(kind.kind, cluster, live, owned=bool(meta.get("ownerReferences")))
        if how is Claim.MIGRATE:
            return self._retain(kind, cluster, live)
        if not applies(kind.kind):
            return live
        if how is Claim.ADOPT:
            self._check_alive(kind, cluster, live)
        elif applied_hash(live) == config_hash(desired) and not drifted(kind.kind, desired, live):
            return live
        return self._apply(kind, cluster, body, "Adopted" if how is Claim.ADOPT else "Updated")

    def _apply(self, kind: Kind, cluster: Obj, body: Obj, verb: str) -> Obj:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        # The one GET before a write: the cache drops managedFields (needed for the upgrade), and
        # the object may have changed hands since the cache saw it.
        fresh = self.client.get(kind, namespace, name, fresh=True)
        if fresh is None:
            # Deleted since the cache saw it: the watch event brings us back, and the create then.
            raise HTTPError(404, f"{kind.kind} {name} vanished before our write; the next pass creates it")
        claim(kind.kind, cluster, fresh, owned=bool(meta.get("ownerReferences")))
        ops = upgrade_patch(fresh)
        if ops is not None:
            self.client.patch_json(kind, namespace, name, ops)
            log.info(
                "managed fields upgraded", extra={"kind": kind.kind, "object": name, "namespace": namespace}
            )
        # The uid makes the apply a precondition-checked update of exactly this object: an apply to a
        # missing object would create it, bypassing the ownership rules.
        body = {**body, "metadata": {**meta, "uid": fresh["metadata"]["uid"]}}
        try:
            updated = self.client.apply(kind, body)
        except HTTPError as exc:
            if error_code(exc) == INVALID:
                raise self._rejected(kind, name, exc) from exc
            raise
        log.info(verb.lower(), extra={"kind": kind.kind, "object": name, "namespace": namespace})
        self.event(cluster, "Normal", verb, f"{verb.lower()} {kind.kind} {name}")
        return updated

    def _retain(self, kind: Kind, cluster: Obj, live: Obj) -> Obj:
        """Turn a credentials Secret an older operator owned into a retained one (never GC'd)."""
        uid = cluster["metadata"]["uid"]
        refs = [r for r in live["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        patch = {
            "metadata": {
                "ownerReferences": refs or None,
                "annotations": {RETAINED_ANNOTATION: "true"},
                "resourceVersion": live["metadata"]["resourceVersion"],
            }
        }
        meta = live["metadata"]
        updated = self.client.patch_merge(kind, meta["namespace"], meta["name"], patch)
        self.event(cluster, "Normal", "Retained", f"retained {kind.kind} {meta['name']} (no ownerReference)")
        return updated

    def _check_alive(self, kind: Kind, cluster: Obj, live: Obj) -> None:
        """Adopt only for a cluster a fresh read shows alive (kube's ControllerRefManager rechecks
        the deletionTimestamp the same way). An orphan may be the garbage collector's work for a
        `propagationPolicy: Orphan` deletion that began after this pass read the cluster; adopting it
        back would hand it to the garbage collector as soon as the cluster is gone."""
        uid = cluster["metadata"]["uid"]
        fresh = self.client.get(
            MySQLCluster, live["metadata"]["namespace"], cluster["metadata"]["name"], fresh=True
        )
        if fresh is None or fresh["metadata"]["uid"] != uid or fresh["metadata"].get("deletionTimestamp"):
            raise ClusterGoing(
                f"not adopting {kind.kind} {live['metadata']['name']}: the cluster is being deleted"
            )

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
