"""Deletion: the final backup, then the finalizer comes off.

The final-backup Job has no ownerReference (it must outlive the CR), so no watch event wakes us when
it finishes: while it runs the cluster is requeued every `POLL_SECONDS`. A failed Job is deleted and
the key requeued with the runtime's rate-limited backoff, so each retry creates a fresh Job later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError
from pykube.exceptions import HTTPError

from . import resources
from .api import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION, parse_spec
from .client import CONFLICT, INVALID, NOT_FOUND, error_code
from .kinds import Job, MySQLCluster, PersistentVolumeClaim, StatefulSet
from .runtime.types import Result
from .status import DEGRADED, ChildBlocked, Problem, compute_status, condition

if TYPE_CHECKING:
    from .reconciler import MySQLClusterReconciler

log = logging.getLogger(__name__)

Obj = dict[str, Any]
JobState = Literal["running", "succeeded", "failed"]

FAILED = "FinalBackupFailed"

POLL_SECONDS = 5.0
"""How often a running final backup is looked at."""


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


def earlier_failure(cluster: Obj) -> list[Problem]:
    """The failure of an earlier final backup, while its retry runs.

    The failed Job was deleted to make room for the retry, so the Degraded condition written when it
    failed is the only record left; without this the next pass would report "no problems" and the
    failure would show in status for a few milliseconds (until the retry's Job was created).
    """
    degraded = condition(cluster.get("status"), DEGRADED) or {}
    if degraded.get("status") == "True" and degraded.get("reason") == FAILED:
        return [Problem(FAILED, str(degraded.get("message", "")), fatal=False)]
    return []


class FinalBackup:
    """The deletion half of the reconciler; shares its client, events and status writer."""

    def __init__(self, reconciler: MySQLClusterReconciler) -> None:
        self.r = reconciler

    def finalize(self, cluster: Obj) -> Result:
        meta = cluster["metadata"]
        finalizers = meta.get("finalizers") or []
        if FINALIZER not in finalizers:
            return Result()
        if wants_final_backup(cluster):
            problems, wait = self._run(cluster)
            if wait is not None:
                problems = problems or earlier_failure(cluster)
                sts_name = resources.Names(meta["name"]).statefulset
                sts = self.r.client.get(StatefulSet, meta["namespace"], sts_name)
                status = compute_status(cluster, sts, problems, deleting=True, now=self.r.now())
                # Cosmetic while going away: a 404/409 here must not hold up the backup.
                self.r.write_status(cluster, status, tolerate=(NOT_FOUND, CONFLICT))
                return wait
        # A merge patch of the shortened list (pykube's update() cannot drop list items), made
        # conditional by resourceVersion: a stale read gets 409, never a lost finalizer of others.
        patch = {
            "metadata": {
                "finalizers": [f for f in finalizers if f != FINALIZER],
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

    def _run(self, cluster: Obj) -> tuple[list[Problem], Result | None]:
        """Drive the final-backup Job one step; (problems, None) once it is done."""
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        if self.r.client.get(PersistentVolumeClaim, namespace, names.primary_data_pvc) is None:
            # No pod ever got a volume: there is nothing to save, and a Job would wait forever.
            self.r.event(cluster, "Normal", "FinalBackupSkipped", f"no {names.primary_data_pvc} to back up")
            return [], None
        try:
            parse_spec(cluster)
            self.r.ensure(PersistentVolumeClaim, cluster, resources.backup_pvc(cluster))
        except ValidationError as exc:
            message = (
                f"cannot build the final backup ({exc.error_count()} spec errors); fix the spec or "
                f"annotate {SKIP_FINAL_BACKUP_ANNOTATION}=true"
            )
            return [Problem("InvalidSpec", message, fatal=False)], Result(requeue=True)
        except ChildBlocked as blocked:
            problem = Problem(blocked.problem.reason, blocked.problem.message, fatal=False)
            return [problem], Result(requeue=True)

        job = self.r.client.get(Job, namespace, names.final_backup_job)
        uid = (job or {}).get("metadata", {}).get("annotations", {}).get(resources.CLUSTER_UID_ANNOTATION)
        if job is not None and uid != meta["uid"]:
            # Left over from an earlier cluster of the same name: its result says nothing about ours.
            self.r.client.delete(Job, namespace, names.final_backup_job, propagation_policy="Background")
            return [], Result(requeue_after=POLL_SECONDS)
        if job is None:
            return self._start(cluster)
        if job["metadata"].get("deletionTimestamp"):
            return [], Result(requeue_after=POLL_SECONDS)

        state = job_state(job)
        if state == "running":
            return [], Result(requeue_after=POLL_SECONDS)
        # Background: the Job's pods are garbage-collected after it.
        self.r.client.delete(Job, namespace, names.final_backup_job, propagation_policy="Background")
        if state == "succeeded":
            self.r.event(cluster, "Normal", "FinalBackupSucceeded", f"Job {names.final_backup_job} succeeded")
            return [], None
        message = f"final backup Job {names.final_backup_job} failed ({failure_message(job)}); retrying"
        log.warning("final backup failed", extra={"cluster": meta["name"], "namespace": namespace})
        return [Problem(FAILED, message, fatal=False)], Result(requeue=True)

    def _start(self, cluster: Obj) -> tuple[list[Problem], Result | None]:
        job = resources.final_backup_job(cluster)
        name = job["metadata"]["name"]
        try:
            self.r.client.create(Job, job)
        except HTTPError as exc:
            if error_code(exc) == INVALID:
                message = f"Job {name} rejected by the apiserver: {exc}"
                problem = Problem("ChildRejected", message, fatal=False)
                return [problem], Result(requeue=True)
            if error_code(exc) != CONFLICT:  # AlreadyExists: the next look decides
                raise
        else:
            self.r.event(cluster, "Normal", "FinalBackupStarted", f"created Job {name}")
        return [], Result(requeue_after=POLL_SECONDS)
