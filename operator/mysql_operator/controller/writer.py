"""Every write the controller makes: children (create, adopt, apply), the status, and Events.

The reconciler and the finalizer decide *what* to write; this decides *how*, the same way for both:
a child is created, or, if the live object is ours (`children.ownership`), applied when our fields
differ (`children.ssa`); the status is merge-patched only when its meaning changed
(`status.status_equal`); an Event goes to the recorder's queue, never to the apiserver on a reconcile's
thread. Each write is made at most once per call and never retried here: a raised error requeues.
Within `one_pass()`, the children a pass creates are told in one `Created` Event, not one each: an
Event is a write too, and a new cluster's first pass creates five children.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pykube.exceptions import HTTPError

from ..api.v1 import RETAINED_ANNOTATION
from .children.immutable import mutable_part
from .children.ownership import Claim, claim, controller_of
from .children.problems import ChildBlocked, Problem
from .children.projection import applies, drifted
from .children.ssa import applied_hash, config_hash, upgrade_patch, with_config_hash
from .client import CONFLICT, INVALID, ApiClient, delete_exactly, error_code
from .events import EventRecorder, EventType
from .kinds import Kind, MySQLCluster
from .status import DEGRADED, condition, status_equal, status_patch

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ClusterGoing(Exception):
    """The cluster this pass read is being deleted (or is gone): stop writing children for it."""


class Writer:
    """The writes of one controller: shares its client, its event recorder and its clock."""

    def __init__(
        self, client: ApiClient, recorder: EventRecorder | None, now: Callable[[], datetime]
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.now = now
        self._pass = threading.local()  # each worker's pass: the children it created so far

    @contextmanager
    def one_pass(self) -> Iterator[None]:
        """Tell the children created until the end of the block in one `Created` Event per cluster,
        sent when the block ends, whatever ends it (what was created was created)."""
        created: list[tuple[Obj, str]] = []
        outer, self._pass.created = getattr(self._pass, "created", None), created
        try:
            yield
        finally:
            self._pass.created = outer
            told: dict[tuple[str | None, ...], tuple[Obj, list[str]]] = {}
            for cluster, what in created:
                meta = cluster["metadata"]
                who = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
                told.setdefault(who, (cluster, []))[1].append(what)
            for cluster, whats in told.values():
                self.event(cluster, "Normal", "Created", f"created {', '.join(whats)}")

    def ensure_step(
        self, kind: Kind, cluster: Obj, build: Callable[[Obj], Obj], problems: list[Problem]
    ) -> Obj | None:
        try:
            return self.ensure(kind, cluster, build(cluster))
        except ChildBlocked as blocked:
            problems.append(blocked.problem)
            return None

    def ensure(self, kind: Kind, cluster: Obj, desired: Obj) -> Obj:
        """Create `desired`, or, if the live object is ours (`children.ownership`), apply our fields when
        they differ (`children.ssa`). Kinds without owned fields (Secret, PVCs, Jobs) are create-only."""
        meta = desired["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        live = self.client.get(kind, namespace, name)
        if live is None:
            # Only a create sends the whole object with its hash: a pass over a converged child
            # copies and hashes nothing more than the one comparison below needs.
            body = with_config_hash(desired) if applies(kind.kind) else desired
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
                pending: list[tuple[Obj, str]] | None = getattr(self._pass, "created", None)
                if pending is None:
                    self.event(cluster, "Normal", "Created", f"created {kind.kind} {name}")
                else:
                    pending.append((cluster, f"{kind.kind} {name}"))
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
        return self._apply(kind, cluster, desired, "Adopted" if how is Claim.ADOPT else "Updated")

    def _apply(self, kind: Kind, cluster: Obj, desired: Obj, verb: str) -> Obj:
        # Never the fields fixed at creation (`children.immutable`): a change there would be a 422 forever.
        body = with_config_hash(mutable_part(desired))
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        # The one GET before a write: the cache drops managedFields (needed for the upgrade), and
        # the object may have changed hands since the cache saw it.
        fresh = self.client.get(kind, namespace, name, fresh=True)
        if fresh is None:
            # Deleted since the cache saw it: the watch event brings us back, and the create then.
            raise HTTPError(404, f"{kind.kind} {name} vanished before our write; the next pass creates it")
        claim(kind.kind, cluster, fresh, owned=bool(meta.get("ownerReferences")))
        ops = upgrade_patch(fresh, desired)
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

    def remove_owned(self, kind: Kind, cluster: Obj, name: str) -> None:
        namespace = cluster["metadata"]["namespace"]
        live = self.client.get(kind, namespace, name)
        owner = controller_of(live) if live else None
        if owner is None or owner.get("uid") != cluster["metadata"]["uid"]:
            return  # absent, or not ours to delete
        # Background: the CronJob's own Jobs and pods go with it. Only the object we judged ours: a
        # namesake created since the cache saw it is not (delete_exactly's uid precondition).
        if not delete_exactly(self.client, kind, live, propagation_policy="Background"):
            return
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

    def record(self, cluster: Obj, fields: Obj) -> Obj:
        """Merge-patch only `fields` into /status (None removes one), conditional on the resourceVersion
        read: a step's record, stored before the step's effects are relied on (a 409 requeues, and the
        step is taken again from what the apiserver holds). Returns the updated cluster."""
        meta = cluster["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": fields}
        return self.client.patch_merge(
            MySQLCluster, meta["namespace"], meta["name"], body, subresource="status"
        )

    def event(self, obj: Obj, type_: EventType, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.event(obj, type_, reason, message)
