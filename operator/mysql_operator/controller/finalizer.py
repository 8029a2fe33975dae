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

Stopping is bounded. The database counts as stopped only when the StatefulSet says so (its status
has caught up with the scale to 0: `observedGeneration >= generation` and `replicas == 0`, or it is
gone) and no database pod is left: an empty pod list alone may just mean the controller has not got
round to it. The StatefulSet controller may never finish on its own: with OrderedReady it deletes
pods one at a time, highest ordinal first, and refuses while a lower pod is unready. So the time the
scale-down began is recorded (`status.finalBackup.stoppingSince`), and

* `grace + STOP_MARGIN_SECONDS` later (grace: the pods' terminationGracePeriodSeconds), the
  operator deletes the remaining pods itself, each with its uid as precondition and its own grace;
* a pod still Terminating `STOP_MARGIN_SECONDS` after its own deadline (its deletionTimestamp: the
  delete plus its grace; its kubelet does not answer, a lost node) is deleted with
  gracePeriodSeconds=0, as `kubectl delete --force` would. Judged per pod: one still inside its own
  grace period, shutting down cleanly, is never cut short.

Each forced deletion is a Warning Event `ForcedPodDeletion` naming the pods. Only pods whose
controller is our StatefulSet are forced: by its uid while it exists, else by the uid recorded while
it was being stopped (`status.finalBackup.statefulSetUID`; a foreground deletion may take the
StatefulSet first). Where no uid was ever seen (the StatefulSet already gone at the first pass, or a
record from an operator before this field), the StatefulSet's name is all there is to go by.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic import ValidationError
from pykube.exceptions import HTTPError

from ..api.v1 import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION, parse_spec
from ..runtime.types import Result
from .backupjob import data_node_affinity, last_words, why_stuck
from .children import backups, resources
from .children.ownership import controller_of, labelled_ours
from .children.problems import ChildBlocked, Problem
from .client import CONFLICT, INVALID, NOT_FOUND, delete_exactly, error_code, namespace_terminating
from .kinds import Job, MySQLCluster, PersistentVolumeClaim, Pod, StatefulSet
from .status import compute_status, format_time, parse_time
from .writer import Writer

log = logging.getLogger(__name__)

Obj = dict[str, Any]
JobState = Literal["running", "succeeded", "failed"]

FAILED = "FinalBackupFailed"
BLOCKED = "FinalBackupBlocked"
"""A final backup that cannot get on (a pod admission refuses, a volume that does not bind): reported as
soon as it shows, not after the Job's long deadline."""

POLL_SECONDS = 5.0
"""How often a running final backup, or pods still stopping, are looked at."""
BACKOFF_BASE_SECONDS = 10.0
"""Delay before the second attempt; doubles per failed attempt."""
BACKOFF_MAX_SECONDS = 600.0
WARN_AFTER_ATTEMPTS = 3
"""From this many failed attempts on, each failure also says how to give up (the skip annotation)."""
TERMINATING_MESSAGE = "final backup skipped: namespace terminating"
STOP_MARGIN_SECONDS = 30.0
"""How long past their termination grace period database pods may take to go before the operator
deletes them itself (and as long again past that before it deletes them with no grace)."""
DEFAULT_GRACE_SECONDS = 30
"""A pod's terminationGracePeriodSeconds when its spec leaves it out (the API default)."""
FORCED = "ForcedPodDeletion"


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


def scaled_to_zero(sts: Obj) -> bool:
    """The StatefulSet controller has seen the scale to 0 and counts no pod of it any more."""
    status = sts.get("status") or {}
    observed = status.get("observedGeneration")
    generation = sts["metadata"].get("generation") or 0
    return observed is not None and observed >= generation and status.get("replicas", 0) == 0


def pod_grace(pod: Obj) -> int:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(grace) if grace is not None else DEFAULT_GRACE_SECONDS


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
    """The deletion half of the controller; writes through the reconciler's `Writer`."""

    def __init__(self, writer: Writer) -> None:
        self.r = writer

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
        namespace = meta["namespace"]
        claim = resources.primary_data_claim(cluster)
        if self.r.client.get(PersistentVolumeClaim, namespace, claim) is None:
            # No pod ever got a volume: there is nothing to save, and a Job would wait forever.
            self.r.event(cluster, "Normal", "FinalBackupSkipped", f"no {claim} to back up")
            return Step({**recorded, "phase": "Skipped", "message": "no data volume"})
        stopping = self._stop_database(cluster, recorded)
        if stopping is not None:
            return stopping
        try:
            parse_spec(cluster)
            self.r.ensure(PersistentVolumeClaim, cluster, backups.backup_pvc(cluster))
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
        """Scale our StatefulSet to 0 and wait until it says it is at 0 and no database pod is left;
        None once there. Pods that outstay their grace are deleted (see the module's docstring)."""
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        sts = self.r.client.get(StatefulSet, namespace, names.statefulset)
        ours = sts is not None and (controller_of(sts) or {}).get("uid") == meta["uid"]
        orphaning = "orphan" in (meta.get("finalizers") or [])
        stopping = {**recorded, "phase": "Stopping"}
        if not recorded.get("stoppingSince"):
            stopping["stoppingSince"] = format_time(self.r.now())
        if sts is not None and ours:
            # Remembered so that, once the StatefulSet is gone (a foreground deletion takes it
            # first), only its own pods are ever forced, never those of a namesake.
            stopping["statefulSetUID"] = sts["metadata"]["uid"]
        if sts is not None and ours and not orphaning and (sts.get("spec") or {}).get("replicas") != 0:
            patch = {
                "spec": {"replicas": 0},
                "metadata": {"resourceVersion": sts["metadata"]["resourceVersion"]},
            }
            self.r.client.patch_merge(StatefulSet, namespace, names.statefulset, patch)
            message = f"scaled StatefulSet {names.statefulset} to 0 for a consistent final backup"
            self.r.event(cluster, "Normal", "StoppingDatabase", message)
            return Step({**stopping, "message": message}, Result(requeue_after=POLL_SECONDS))
        selector = resources.database_selector(meta["name"])
        # Fresh: which pods are gone, and which already have a deletion under way, decides what is
        # forced; a cache a moment behind would delete (and report) a pod twice.
        pods = self.r.client.list(Pod, namespace, selector, fresh=True)
        if sts is not None and (not ours or orphaning):
            if not pods:
                return None
            # propagationPolicy=Orphan: the user keeps the StatefulSet, and mysqld keeps running on
            # the volume. A copy of a live datadir is not a backup; the data is not going away.
            message = (
                f"final backup skipped: StatefulSet {names.statefulset} was orphaned and keeps running "
                "on the data volume"
            )
            self.r.event(cluster, "Warning", "FinalBackupSkipped", message)
            return Step({**recorded, "phase": "Skipped", "message": message}, strict=True)
        if not pods:
            if sts is None or scaled_to_zero(sts):
                return None
            status = sts.get("status") or {}
            message = (
                f"waiting for StatefulSet {names.statefulset} to report 0 replicas (observedGeneration "
                f"{status.get('observedGeneration')} of {sts['metadata'].get('generation')}, replicas "
                f"{status.get('replicas')})"
            )
            return Step({**stopping, "message": message}, Result(requeue_after=POLL_SECONDS))
        self._force_outstaying(cluster, stopping, pods, sts)
        message = f"waiting for {len(pods)} database pod(s) to stop before the final backup"
        return Step({**stopping, "message": message}, Result(requeue_after=POLL_SECONDS))

    def _force_outstaying(self, cluster: Obj, record: Obj, pods: list[Obj], sts: Obj | None) -> None:
        """Delete the database pods that outstay the bounds counted from `stoppingSince`."""
        since = parse_time(record.get("stoppingSince"))
        if since is None:
            return
        names = resources.Names(cluster["metadata"]["name"])
        # Only pods of our StatefulSet, by its uid: the live one's, else the one recorded while it
        # lived. A record from before the uid was kept has only the name to go by.
        uid = sts["metadata"]["uid"] if sts is not None else record.get("statefulSetUID")
        pods = [
            p
            for p in pods
            if (ref := controller_of(p)) is not None
            and ref.get("kind") == "StatefulSet"
            and ref.get("name") == names.statefulset
            and (uid is None or ref.get("uid") == uid)
        ]
        if not pods:
            return
        grace = max(pod_grace(p) for p in pods)
        bound = grace + STOP_MARGIN_SECONDS
        now = self.r.now()
        if (now - since).total_seconds() < bound:
            return
        # Never deleted yet (the controller stalled before them): a delete with their own grace, so
        # the server still shuts down cleanly.
        stalled = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        # Deleted, and still there STOP_MARGIN_SECONDS past their own deadline (deletionTimestamp is
        # the delete plus its grace): no kubelet answers for them. Judged per pod, so a pod still
        # inside its grace period (OrderedReady deletes one at a time) is never cut short.
        lost = [
            p
            for p in pods
            if (deadline := parse_time(p["metadata"].get("deletionTimestamp"))) is not None
            and p["metadata"].get("deletionGracePeriodSeconds") != 0
            and (now - deadline).total_seconds() >= STOP_MARGIN_SECONDS
        ]
        self._force(
            cluster,
            stalled,
            None,
            f"still there {int(bound)}s after the scale to 0 ({grace}s grace + {int(STOP_MARGIN_SECONDS)}s); "
            "deleted them with their own grace period",
        )
        self._force(
            cluster,
            lost,
            0,
            f"still Terminating {int(STOP_MARGIN_SECONDS)}s past their grace period; deleted them with "
            "gracePeriodSeconds=0 (their node does not answer)",
        )

    def _force(self, cluster: Obj, pods: list[Obj], grace: int | None, why: str) -> None:
        deleted = [
            p["metadata"]["name"]
            for p in pods
            if delete_exactly(self.r.client, Pod, p, grace_period_seconds=grace)
        ]
        if deleted:
            log.warning(
                "forced pod deletion", extra={"cluster": cluster["metadata"]["name"], "pods": deleted}
            )
            self.r.event(cluster, "Warning", FORCED, f"database pod(s) {', '.join(deleted)} {why}")

    def _drive_job(self, cluster: Obj, recorded: Obj) -> Step:
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        job = self.r.client.get(Job, namespace, names.final_backup_job)
        if job is None:
            return self._start(cluster, recorded)
        uid = (job["metadata"].get("annotations") or {}).get(backups.CLUSTER_UID_ANNOTATION)
        if uid != meta["uid"]:
            if not labelled_ours(job, meta["name"]):
                message = f"Job {names.final_backup_job} exists and is not ours; delete or rename it"
                problem = Problem("ChildConflict", message, fatal=False)
                return Step(recorded, Result(requeue_after=POLL_SECONDS), [problem])
            # Ours, left by an earlier cluster of this name (kept for its TTL): says nothing about us.
            # Replaced since we read it (409 on the uid): the next look judges the new one.
            delete_exactly(self.r.client, Job, job, propagation_policy="Background")
            return Step(recorded, Result(requeue_after=POLL_SECONDS))
        if job["metadata"].get("deletionTimestamp"):
            return Step(recorded, Result(requeue_after=POLL_SECONDS))
        state = job_state(job)
        if state == "running":
            stuck = why_stuck(self.r.client, cluster, job)
            if stuck is not None:
                # It may never fail by itself (its deadline is long): say why now, keep looking.
                blocked = {**recorded, "phase": "Running", "message": stuck}
                return Step(
                    blocked, Result(requeue_after=POLL_SECONDS), [Problem(BLOCKED, stuck, fatal=False)]
                )
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
            said = last_words(self.r.client, job)
            if said:
                message += f"; its pod said: {said}"
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
            # again, and its uid keeps it from being counted twice. The retry needs the name. The
            # uid precondition spares a Job of that name created since (not the one we counted).
            delete_exactly(self.r.client, Job, job, propagation_policy="Background")

        return Step(record, Result(requeue_after=backoff(attempts)), strict=True, then=delete_failed_job)

    def _start(self, cluster: Obj, recorded: Obj) -> Step:
        attempts = int(recorded.get("attempts") or 0)
        failed_at = parse_time(recorded.get("lastFailureTime"))
        if attempts and failed_at is not None:
            wait = (failed_at + timedelta(seconds=backoff(attempts)) - self.r.now()).total_seconds()
            if wait > 0:
                return Step(recorded, Result(requeue_after=wait))
        job = backups.final_backup_job(cluster, data_node_affinity(self.r.client, cluster))
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
