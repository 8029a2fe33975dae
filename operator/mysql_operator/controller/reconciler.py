"""Reconcile one MySQLCluster: children, finalizer, status.

Contract with the runtime: every pass reads through `client.get` (the informer caches, with our own
writes laid over them, in the operator; see `cache`), makes each write at most once, and never
retries inside. A fresh GET happens only before a write that needs one (AlreadyExists, adoption). A
raised error (409 from a stale resourceVersion included) means "requeue with backoff". A converged
cluster costs no request at all: children are written when our fields differ (`children.projection`),
status when its meaning changed (`status`). Whose an existing child is: `children.ownership`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pykube
from pydantic import ValidationError

from ..api.schedule import valid_schedule
from ..api.v1 import FINALIZER, RETAINED_ANNOTATION, MySQLClusterSpec, parse_spec
from ..database.engines import engine
from ..database.identity import FAIL as DATADIR_MISMATCH
from ..runtime.types import Key, Result, split_key
from . import versions
from .children import backups, resources
from .children.immutable import STORAGE_IMMUTABLE, storage_refused
from .children.ownership import ours_selector
from .children.problems import Problem
from .client import ApiClient, KubeClient
from .events import EventRecorder
from .finalizer import FinalBackup
from .kinds import CronJob, MySQLCluster, PersistentVolumeClaim, Pod, Secret, Service, StatefulSet
from .members import Executor, init_ended
from .roles import Roles
from .status import compute_status
from .writer import ClusterGoing, Writer

log = logging.getLogger(__name__)

Obj = dict[str, Any]

BLOCKED_RETRY_SECONDS = 60.0
"""A child the apiserver rejected is retried this slowly: a fix usually needs a spec change, which
wakes us anyway, but a 422 from an admission webhook may pass on its own."""

CREDENTIALS_MISSING = "CredentialsMissing"
RESTORE_SOURCE_MISSING = "RestoreSourceMissing"
RESTORE_FAILED = "RestoreFailed"
RESTORE_POLL_SECONDS = 10.0
"""How often a restoring cluster looks at pod 0 (pod changes do not wake the reconcile)."""


def describe(exc: ValidationError) -> str:
    parts = [f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
    return "; ".join(parts) or "spec is invalid"


class MySQLClusterReconciler:
    """`reconcile(key)` for MySQLCluster; see the module docstring for the contract."""

    def __init__(
        self,
        api: pykube.HTTPClient | ApiClient,
        *,
        recorder: EventRecorder | None = None,
        now: Callable[[], datetime] | None = None,
        executor: Executor | None = None,
    ) -> None:
        self.client: ApiClient = KubeClient(api) if isinstance(api, pykube.HTTPClient) else api
        self.recorder = recorder
        self.now = now or (lambda: datetime.now(UTC))
        self.writer = Writer(self.client, recorder, self.now)
        self.final_backup = FinalBackup(self.writer)
        self.roles = Roles(self.writer, executor)
        """Labels the primary and moves it (failover, switchover); `executor` reaches the pods."""

    def reconcile(self, key: Key) -> Result:
        with self.writer.one_pass():
            return self._reconcile(key)

    def _reconcile(self, key: Key) -> Result:
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

        live_sts = self.client.get(StatefulSet, namespace, resources.Names(name).statefulset)
        recorded = (cluster.get("status") or {}).get("version")
        choice = versions.choose(spec, live_sts, recorded)
        if choice.reason is None and versions.rolls_back(spec, live_sts):
            # Only then do the pods matter (one LIST): did any of them start the newer tag?
            started = versions.started_tags(
                self.client.list(Pod, namespace, resources.database_selector(name))
            )
            choice = versions.choose(spec, live_sts, recorded, started)
        upgrade = versions.upgrade_record(cluster, choice)
        try:
            # Children are built with the chosen engine and tag: an unset version keeps what ran.
            problems, sts = self._ensure_children(versions.building(cluster, choice, upgrade), spec)
        except ClusterGoing:
            # The deletion's watch event brings the key back anyway; the requeue only makes sure.
            return Result(requeue=True)
        if choice.reason and choice.message:
            problems.append(Problem(choice.reason, choice.message, fatal=False))
        restored_now = False
        if spec.restore is not None and not (cluster.get("status") or {}).get("restoredFrom"):
            restored_now, restore_problems = self._restore_progress(cluster, spec, sts)
            problems += restore_problems
        if sts is not None:
            problems += self._configure_failures(cluster)
        roles = self.roles.reconcile(cluster, spec, engine(choice.engine)) if sts is not None else None
        if roles is not None:
            cluster, problems = roles.cluster, [*problems, *roles.problems]
        records = {**(roles.roles if roles else {}), **upgrade}
        status = compute_status(cluster, sts, problems, now=self.now(), records=records)
        if restored_now and spec.restore is not None:
            status["restoredFrom"] = spec.restore.from_cluster
        self.writer.write_status(cluster, status)
        if restored_now and spec.restore is not None:  # once: the record above ends the restore
            source = resources.Names(spec.restore.from_cluster)
            notes = self._restore_notes(cluster)
            message = (
                f"pod 0 is ready on the final backup of cluster {source.cluster} "
                f"(PersistentVolumeClaim {source.source_backup_pvc}){': ' + notes if notes else ''}"
            )
            self.writer.event(cluster, "Normal", "Restored", message)
            if "after skipping" in notes:  # the newest archive failed its check: an older one was used
                self.writer.event(cluster, "Warning", "RestoreFellBack", notes)
        waits = [BLOCKED_RETRY_SECONDS] if problems else []
        if spec.restore is not None and "restoredFrom" not in status:
            waits.append(RESTORE_POLL_SECONDS)
        if roles is not None and roles.requeue_after is not None:
            waits.append(roles.requeue_after)
        return Result(requeue_after=min(waits)) if waits else Result()

    # -- spec we cannot act on ---------------------------------------------------------------

    def _stop(self, cluster: Obj, problem: Problem) -> Result:
        """Report Failed and wait for the spec to change (its watch event wakes us): no retry storm."""
        meta = cluster["metadata"]
        sts = self.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        self.writer.write_status(cluster, compute_status(cluster, sts, [problem], now=self.now()))
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
        secret_ok = self._ensure_credentials(cluster, spec, problems)
        if secret_ok:
            self._ensure_replication_key(cluster)
        self.writer.ensure_step(Service, cluster, resources.headless_service, problems)
        self.writer.ensure_step(Service, cluster, resources.primary_service, problems)
        if secret_ok and self._ensure_tls(cluster, problems):
            # Never start pods on a Secret that is not ours: its author would know the root password.
            desired_sts = resources.statefulset(cluster)
            sts = self.writer.ensure_step(StatefulSet, cluster, lambda _: desired_sts, problems)
            refused = storage_refused(desired_sts, sts) if sts is not None else None
            if refused:
                problems.append(Problem(STORAGE_IMMUTABLE, refused, fatal=False))
        if spec.backup.enabled:
            self.writer.ensure_step(PersistentVolumeClaim, cluster, backups.backup_pvc, problems)
            if secret_ok:
                self.writer.ensure_step(CronJob, cluster, backups.backup_cronjob, problems)
        else:
            self.writer.remove_owned(CronJob, cluster, resources.Names(cluster["metadata"]["name"]).cronjob)
        if sts is None:  # blocked: still report what is running
            meta = cluster["metadata"]
            sts = self.client.get(StatefulSet, meta["namespace"], resources.Names(meta["name"]).statefulset)
        return problems, sts

    def _ensure_tls(self, cluster: Obj, problems: list[Problem]) -> bool:
        """The replication TLS Secret, made (keys and all) only when the cache has none: it is never
        rewritten, and making keys on every pass would cost for nothing."""
        meta = cluster["metadata"]
        if self.client.get(Secret, meta["namespace"], resources.Names(meta["name"]).tls_secret) is not None:
            return True
        build = lambda c: resources.tls_secret(c, self.now())  # noqa: E731
        return self.writer.ensure_step(Secret, cluster, build, problems) is not None

    def _ensure_replication_key(self, cluster: Obj) -> None:
        """A Secret made before the replication account existed gets its password added (the pods'
        sidecar reads it); the root password is never touched. Conditional on the resourceVersion
        read: a 409 requeues and the next pass looks again."""
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], resources.Names(meta["name"]).secret
        cached = self.client.get(Secret, namespace, name)
        annotations = ((cached or {}).get("metadata") or {}).get("annotations") or {}
        if cached is None or annotations.get(resources.REPLICATION_KEY_ANNOTATION) == "true":
            return
        live = self.client.get(Secret, namespace, name, fresh=True)
        if live is None:
            return
        patch: Obj = {
            "metadata": {
                "annotations": {resources.REPLICATION_KEY_ANNOTATION: "true"},
                "resourceVersion": live["metadata"]["resourceVersion"],
            }
        }
        added = resources.REPLICATION_PASSWORD_KEY not in (live.get("data") or {})
        if added:
            patch["stringData"] = {resources.REPLICATION_PASSWORD_KEY: secrets.token_urlsafe(24)}
        self.client.patch_merge(Secret, namespace, name, patch)
        if added:
            message = (
                f"added key {resources.REPLICATION_PASSWORD_KEY} to Secret {name} for the replication account"
            )
            self.writer.event(cluster, "Normal", "ReplicationPasswordAdded", message)

    def _restore_progress(
        self, cluster: Obj, spec: MySQLClusterSpec, sts: Obj | None
    ) -> tuple[bool, list[Problem]]:
        """A restoring cluster, until pod 0 first becomes ready: (ready now, what keeps it from
        restoring). The caller records `restoredFrom`, which ends these looks."""
        assert spec.restore is not None
        meta = cluster["metadata"]
        namespace, source = meta["namespace"], resources.Names(spec.restore.from_cluster)
        # OrderedReady: no other pod starts before pod 0 is ready, so one ready replica is pod 0.
        if ((sts or {}).get("status") or {}).get("readyReplicas", 0) >= 1:
            return True, []
        pvc = source.source_backup_pvc
        if (
            self.client.get(PersistentVolumeClaim, namespace, pvc) is None
            and self.client.get(PersistentVolumeClaim, namespace, pvc, fresh=True) is None
        ):
            message = (
                f"spec.restore.fromCluster: PersistentVolumeClaim {source.source_backup_pvc} (the backups of "
                f"cluster {source.cluster}) does not exist; pod 0 waits for it"
            )
            return False, [Problem(RESTORE_SOURCE_MISSING, message, fatal=False)]
        selector = resources.database_selector(meta["name"])
        for pod in self.client.list(Pod, namespace, selector):
            if pod["metadata"]["name"] != resources.Names(meta["name"]).first_pod:
                continue
            ended = init_ended(pod, "restore")
            if ended and ended.get("exitCode"):
                said = (ended.get("message") or "").strip() or f"exit code {ended['exitCode']}"
                message = f"pod {pod['metadata']['name']}'s restore container failed: {said}"
                return False, [Problem(RESTORE_FAILED, message, fatal=False)]
        return False, []

    def _restore_notes(self, cluster: Obj) -> str:
        """What pod 0's restore said when it succeeded (the archive, and any newer one it skipped)."""
        meta = cluster["metadata"]
        pod = self.client.get(Pod, meta["namespace"], resources.Names(meta["name"]).first_pod)
        ended = init_ended(pod, "restore") if pod else None
        return (ended or {}).get("message", "").strip() if ended and not ended.get("exitCode") else ""

    def _configure_failures(self, cluster: Obj) -> list[Problem]:
        """Database pods whose `configure` refused to start them (data of another engine or release,
        `database.identity`), with its one-line reason."""
        meta = cluster["metadata"]
        problems = []
        for pod in self.client.list(Pod, meta["namespace"], resources.database_selector(meta["name"])):
            ended = init_ended(pod, "configure")
            if not ended or not ended.get("exitCode"):
                continue
            said = (ended.get("message") or "").strip() or f"exit code {ended['exitCode']}"
            reason = DATADIR_MISMATCH if said.startswith(DATADIR_MISMATCH) else "ConfigureFailed"
            message = (
                f"pod {pod['metadata']['name']} cannot start: {said.removeprefix(DATADIR_MISMATCH + ': ')}"
            )
            problems.append(Problem(reason, message, fatal=False))
        return problems

    def _ensure_credentials(self, cluster: Obj, spec: MySQLClusterSpec, problems: list[Problem]) -> bool:
        """The credentials Secret, generated for a new cluster only. Missing while data is left, it
        is reported (CredentialsMissing) and nothing is generated: the kept datadir opens only with
        its old root password, and a new one would lock the operator and every client out while
        looking healthy. A human restores the Secret (README, "Operations notes")."""
        meta = cluster["metadata"]
        namespace, name = meta["namespace"], resources.Names(meta["name"]).secret
        if self.client.get(Secret, namespace, name) is None:
            left = self._data_left(cluster, spec)
            # The fresh read rules out a cache that has not seen the Secret yet.
            if left and self.client.get(Secret, namespace, name, fresh=True) is None:
                message = (
                    f"credentials Secret {name} is missing while the cluster's data remains ({left}); "
                    "a new root password would not open that data, so none is generated and nothing "
                    f"is started: restore Secret {name} (key {resources.PASSWORD_KEY}, labels "
                    f"{ours_selector(meta['name'])}, annotation {RETAINED_ANNOTATION}=true), or delete "
                    "the cluster and its data PersistentVolumeClaims to start afresh"
                )
                problems.append(Problem(CREDENTIALS_MISSING, message, fatal=False))
                return False
            if spec.restore is not None:
                return self._restore_credentials(cluster, spec, problems)
        return self.writer.ensure_step(Secret, cluster, resources.credentials_secret, problems) is not None

    def _restore_credentials(self, cluster: Obj, spec: MySQLClusterSpec, problems: list[Problem]) -> bool:
        """A restoring cluster's new Secret is a copy of the source cluster's: the restored datadir
        opens only with the source's root password. No source Secret, no Secret and no pods."""
        assert spec.restore is not None
        namespace = cluster["metadata"]["namespace"]
        source = resources.Names(spec.restore.from_cluster).secret
        # Fresh: the Secret cache holds metadata only, never a password. One GET per pass, and only
        # until this cluster's own Secret exists.
        found = self.client.get(Secret, namespace, source, fresh=True)
        if found is None or not (found.get("data") or {}).get(resources.PASSWORD_KEY):
            message = (
                f"spec.restore.fromCluster: credentials Secret {source} (key {resources.PASSWORD_KEY}) is "
                "missing; the restored data opens only with its root password, so nothing is started "
                f"until Secret {source} exists"
            )
            problems.append(Problem(RESTORE_SOURCE_MISSING, message, fatal=False))
            return False
        build = lambda c: resources.credentials_secret(c, copied_from=found)  # noqa: E731
        return self.writer.ensure_step(Secret, cluster, build, problems) is not None

    def _data_left(self, cluster: Obj, spec: MySQLClusterSpec) -> str | None:
        """What shows this cluster (or an earlier one of its name) has data, or None.

        Status first (no request); then the data PVCs the StatefulSet controller names
        `data-<statefulset>-<ordinal>`, retained when a cluster goes. GETs, not a list (the operator
        may only get PVCs), of the ordinals the spec asks for: pod 0's comes first and is scaled
        away last, so it is there whenever any is."""
        status = cluster.get("status") or {}
        if status.get("phase") == "Running" or status.get("readyReplicas"):
            return "status says it ran"
        meta = cluster["metadata"]
        sts = resources.Names(meta["name"]).statefulset
        for ordinal in range(spec.replicas):
            pvc = f"{resources.DATA_VOLUME}-{sts}-{ordinal}"
            if self.client.get(PersistentVolumeClaim, meta["namespace"], pvc) is not None:
                return f"PersistentVolumeClaim {pvc} exists"
        return None
