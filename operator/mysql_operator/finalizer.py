"""Deletion: stop the database, archive its data volume, record the outcome, then let go.

Consistency. The final backup is a physical copy of pod 0's datadir taken after the StatefulSet was
scaled to 0 and every database pod is gone, not a logical dump from a running primary: a cleanly
shut-down datadir is consistent for every engine (MyISAM and DDL included), the copy needs no
credentials and no healthy server (a cluster being deleted is often a broken one), and the
ReadWriteOnce volume is free to attach wherever the Job's pod lands (no Multi-Attach hang). The cost,
downtime, does not matter to a cluster that is going away.

Idempotency. status.finalBackup is the deletion's memory: success is recorded there *before* the
finalizer comes off (a 409 or a crash in between finds the record and does not archive again), and
the succeeded Job is left to its TTL. A failure is counted there (once per Job, by uid) before its Job
is deleted, and the next attempt waits an exponential, capped delay measured from the recorded
failure time, so neither a requeue nor an operator restart resets the backoff.

The Job has no ownerReference (it must outlive the CR), so no watch event wakes us when it finishes:
while it runs, or while pods stop, the cluster is requeued every `POLL_SECONDS`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError
from pykube.exceptions import HTTPError

from . import resources
from .api import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION, parse_spec
from .client import CONFLICT, INVALID, NOT_FOUND, error_code, namespace_terminating
from .kinds import Job, MySQLCluster, PersistentVolumeClaim, Pod, StatefulSet
from .ownership import controller_of, labelled_ours
from .runtime.types import Result
from .status import ChildBlocked, Problem, compute_status, format_time

if TYPE_CHECKING:
    from .reconciler import MySQLClusterReconciler

log = logging.getLogger(__name__)

Obj = dict[str, Any]
JobState = Literal["running", "succeeded", "failed"]

FAILED = "FinalBackupFailed"

POLL_SECONDS = 5.0
"""How often a running final backup, or pods still stopping, are looked at."""
BACKOFF_BASE_SECONDS = 10.0
"""Delay before the second attempt; doubles per failed attempt."""
BACKOFF_MAX_SECONDS = 600.0
WARN_AFTER_ATTEMPTS = 3
"""From this many failed attempts on, each failure also says how to give up (the skip annotation)."""
TERMINATING_MESSAGE = "final backup skipped: namespace terminating"


def wants_final_backup(cluster: Obj) -> bool:
    # Raw reads: even a spec we cannot parse must not lose its data on deletion.
    backup = (cluster.get("spec") or {}).get("backup") or {}
    annotations = cluster["metadata"].get("annotations") or {}
    return backup.get("enabled") is True and annotations.get(SKIP_FINAL_BACKUP_ANNOTATION) != "true"


def job_state(job: Obj) -> JobState:
    status = job.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    done = "True" in (conditions.get("Complete"), conditions.get("SuccessCriteriaMet"))
    if done or status.get("succeeded"):
        return "succeeded"
    # backoffLimit 0: one failed pod fails the Job, whether or not the controller said so yet.
    failed = "True" in (conditions.get("Failed"), conditions.get("FailureTarget"))
    if failed or status.get("failed"):
        return "failed"
    return "running"


def failure_message(job: Obj) -> str:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Failed", "FailureTarget") and c.get("status") == "True":
            return f"{c.get('reason', 'Failed')}: {c.get('message', '')}".rstrip(": ")
    return "its pod failed"


def backoff(attempts: int) -> float:
    """Seconds between the `attempts`-th failure and the next attempt."""
    return min(BACKOFF_BASE_SECONDS * 2 ** min(max(attempts - 1, 0), 32), BACKOFF_MAX_SECONDS)


def parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


@dataclass
class Step:
    """Where one pass got to: the record to keep, what is wrong, and when to look again."""

    record: Obj
    """The new status.finalBackup."""
    result: Result | None = None
    """None: done, the finalizer may come off."""
    problems: list[Problem] = field(default_factory=list)
    strict: bool = False
    """The record must be stored before anything else happens (a 409 then raises and requeues)."""
    then: Callable[[], None] | None = None
    """Done once the record is stored."""


class FinalBackup:
    """The deletion half of the reconciler; shares its client, events and status writer."""

    def __init__(self, reconciler: MySQLClusterReconciler) -> None:
        self.r = reconciler

    def finalize(self, cluster: Obj) -> Result:
        meta = cluster["metadata"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return Result()
        recorded: Obj = dict((cluster.get("status") or {}).get("finalBackup") or {})
        if not wants_final_backup(cluster) or recorded.get("phase") in ("Succeeded", "Skipped"):
            return self._release(cluster)
        step = self._step(cluster, recorded)
        problems = step.problems or self._recorded_failure(cluster, step.record)
        sts = self.r.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        status = compute_status(
            cluster, sts, problems, deleting=True, now=self.r.now(), final_backup=step.record
        )
        # Progress reports are cosmetic (a 404/409 must not hold up the backup); outcomes are not.
        tolerate = () if step.strict else (NOT_FOUND, CONFLICT)
        cluster = self.r.write_status(cluster, status, tolerate=tolerate)
        if step.then is not None:
            step.then()
        return step.result if step.result is not None else self._release(cluster)

    @staticmethod
    def _recorded_failure(cluster: Obj, record: Obj) -> list[Problem]:
        """A failure stays reported while the retry waits or runs: the failed Job is gone by then.
        The message depends on the count only, so it does not change from pass to pass."""
        attempts = int(record.get("attempts") or 0)
        if attempts and record.get("phase") in ("Failed", "Running"):
            job = resources.Names(cluster["metadata"]["name"]).final_backup_job
            message = f"final backup Job {job} failed {attempts} time(s); retrying"
            return [Problem(FAILED, message, fatal=False)]
        return []

    def _release(self, cluster: Obj) -> Result:
        meta = cluster["metadata"]
        # A merge patch of the shortened list (pykube's update() cannot drop list items), made
        # conditional by resourceVersion: a stale read gets 409, never a lost finalizer of others.
        patch = {
            "metadata": {
                "finalizers": [f for f in meta.get("finalizers") or [] if f != FINALIZER],
                "resourceVersion": meta["resourceVersion"],
            }
        }
        try:
            self.r.client.patch_merge(MySQLCluster, meta["namespace"], meta["name"], patch)
        except HTTPError as exc:
            if error_code(exc) != NOT_FOUND:
                raise
        log.info("finalizer removed", extra={"cluster": meta["name"], "namespace": meta["namespace"]})
        return Result()

    # -- the steps ---------------------------------------------------------------------------

    def _step(self, cluster: Obj, recorded: Obj) -> Step:
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        if self.r.client.get(PersistentVolumeClaim, namespace, names.primary_data_pvc) is None:
            # No pod ever got a volume: there is nothing to save, and a Job would wait forever.
            self.r.event(cluster, "Normal", "FinalBackupSkipped", f"no {names.primary_data_pvc} to back up")
            return Step({**recorded, "phase": "Skipped", "message": "no data volume"})
        stopping = self._stop_database(cluster, recorded)
        if stopping is not None:
            return stopping
        try:
            parse_spec(cluster)
            self.r.ensure(PersistentVolumeClaim, cluster, resources.backup_pvc(cluster))
        except ValidationError as exc:
            message = (
                f"cannot build the final backup ({exc.error_count()} spec errors); fix the spec or "
                f"annotate {SKIP_FINAL_BACKUP_ANNOTATION}=true"
            )
            return Step(recorded, Result(requeue=True), [Problem("InvalidSpec", message, fatal=False)])
        except ChildBlocked as blocked:
            problem = Problem(blocked.problem.reason, blocked.problem.message, fatal=False)
            return Step(recorded, Result(requeue=True), [problem])
        except HTTPError as exc:
            if namespace_terminating(exc):
                return self._terminating(cluster, recorded)
            raise
        return self._drive_job(cluster, recorded)

    def _stop_database(self, cluster: Obj, recorded: Obj) -> Step | None:
        """Scale our StatefulSet to 0 and wait until no database pod is left; None once there."""
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        sts = self.r.client.get(StatefulSet, namespace, names.statefulset)
        ours = sts is not None and (controller_of(sts) or {}).get("uid") == meta["uid"]
        orphaning = "orphan" in (meta.get("finalizers") or [])
        if sts is not None and ours and not orphaning and (sts.get("spec") or {}).get("replicas") != 0:
            patch = {
                "spec": {"replicas": 0},
                "metadata": {"resourceVersion": sts["metadata"]["resourceVersion"]},
            }
            self.r.client.patch_merge(StatefulSet, namespace, names.statefulset, patch)
            message = f"scaled StatefulSet {names.statefulset} to 0 for a consistent final backup"
            self.r.event(cluster, "Normal", "StoppingDatabase", message)
            return Step(
                {**recorded, "phase": "Stopping", "message": message}, Result(requeue_after=POLL_SECONDS)
            )
        selector = ",".join(f"{k}={v}" for k, v in resources.pod_labels(meta["name"], "database").items())
        pods = self.r.client.list(Pod, namespace, selector)
        if not pods:
            return None
        if sts is not None and (not ours or orphaning):
            # propagationPolicy=Orphan: the user keeps the StatefulSet, and mysqld keeps running on
            # the volume. A copy of a live datadir is not a backup; the data is not going away.
            message = (
                f"final backup skipped: StatefulSet {names.statefulset} was orphaned and keeps running "
                "on the data volume"
            )
            self.r.event(cluster, "Warning", "FinalBackupSkipped", message)
            return Step({**recorded, "phase": "Skipped", "message": message}, strict=True)
        message = f"waiting for {len(pods)} database pod(s) to stop before the final backup"
        return Step({**recorded, "phase": "Stopping", "message": message}, Result(requeue_after=POLL_SECONDS))

    def _drive_job(self, cluster: Obj, recorded: Obj) -> Step:
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        job = self.r.client.get(Job, namespace, names.final_backup_job)
        if job is None:
            return self._start(cluster, recorded)
        uid = (job["metadata"].get("annotations") or {}).get(resources.CLUSTER_UID_ANNOTATION)
        if uid != meta["uid"]:
            if not labelled_ours(job, meta["name"]):
                message = f"Job {names.final_backup_job} exists and is not ours; delete or rename it"
                problem = Problem("ChildConflict", message, fatal=False)
                return Step(recorded, Result(requeue_after=POLL_SECONDS), [problem])
            # Ours, left by an earlier cluster of this name (kept for its TTL): says nothing about us.
            self.r.client.delete(Job, namespace, names.final_backup_job, propagation_policy="Background")
            return Step(recorded, Result(requeue_after=POLL_SECONDS))
        if job["metadata"].get("deletionTimestamp"):
            return Step(recorded, Result(requeue_after=POLL_SECONDS))
        state = job_state(job)
        if state == "running":
            running = {**recorded, "phase": "Running", "message": f"Job {names.final_backup_job} running"}
            return Step(running, Result(requeue_after=POLL_SECONDS))
        if state == "succeeded":
            message = f"Job {names.final_backup_job} succeeded"
            self.r.event(cluster, "Normal", "FinalBackupSucceeded", message)
            # Recorded before the finalizer comes off; the Job stays for its TTL.
            return Step({**recorded, "phase": "Succeeded", "message": message}, strict=True)
        return self._failed(cluster, recorded, job)

    def _failed(self, cluster: Obj, recorded: Obj, job: Obj) -> Step:
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], job["metadata"]["name"]
        attempts = int(recorded.get("attempts") or 0)
        record = recorded
        if recorded.get("lastFailedJob") != job["metadata"]["uid"]:
            attempts += 1
            message = f"final backup Job {name} failed ({failure_message(job)}); attempt {attempts}"
            record = {
                **recorded,
                "phase": "Failed",
                "attempts": attempts,
                "lastFailureTime": format_time(self.r.now()),
                "lastFailedJob": job["metadata"]["uid"],
                "message": message,
            }
            log.warning("final backup failed", extra={"cluster": meta["name"], "namespace": namespace})
            self.r.event(cluster, "Warning", FAILED, message)
            if attempts >= WARN_AFTER_ATTEMPTS:
                advice = (
                    f"final backup failed {attempts} times; fix the cause, or annotate the cluster "
                    f"{SKIP_FINAL_BACKUP_ANNOTATION}=true to delete it without a final backup"
                )
                self.r.event(cluster, "Warning", "FinalBackupFailing", advice)

        def delete_failed_job() -> None:
            # Only once the failure is counted in status: a crash before this finds the same Job
            # again, and its uid keeps it from being counted twice. The retry needs the name.
            self.r.client.delete(Job, namespace, name, propagation_policy="Background")

        return Step(record, Result(requeue_after=backoff(attempts)), strict=True, then=delete_failed_job)

    def _start(self, cluster: Obj, recorded: Obj) -> Step:
        attempts = int(recorded.get("attempts") or 0)
        failed_at = parse_time(recorded.get("lastFailureTime"))
        if attempts and failed_at is not None:
            wait = (failed_at + timedelta(seconds=backoff(attempts)) - self.r.now()).total_seconds()
            if wait > 0:
                return Step(recorded, Result(requeue_after=wait))
        job = resources.final_backup_job(cluster)
        name = job["metadata"]["name"]
        try:
            self.r.client.create(Job, job)
        except HTTPError as exc:
            if namespace_terminating(exc):
                return self._terminating(cluster, recorded)
            if error_code(exc) == INVALID:
                problem = Problem(
                    "ChildRejected", f"Job {name} rejected by the apiserver: {exc}", fatal=False
                )
                return Step(recorded, Result(requeue=True), [problem])
            if error_code(exc) != CONFLICT:  # AlreadyExists: the next look decides
                raise
        else:
            self.r.event(cluster, "Normal", "FinalBackupStarted", f"created Job {name}")
        running = {**recorded, "phase": "Running", "message": f"Job {name} running"}
        return Step(running, Result(requeue_after=POLL_SECONDS))

    def _terminating(self, cluster: Obj, recorded: Obj) -> Step:
        """The namespace is being deleted: its volumes go with it, the backup PVC too, and no Job may
        be created. Retrying would hold the namespace forever; say so and let go."""
        log.warning(TERMINATING_MESSAGE, extra={"cluster": cluster["metadata"]["name"]})
        self.r.event(cluster, "Warning", "FinalBackupSkipped", TERMINATING_MESSAGE)
        return Step({**recorded, "phase": "Skipped", "message": TERMINATING_MESSAGE})
