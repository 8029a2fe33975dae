"""The reference MySQLCluster reconciler ported to kopf: the kopf peer of benchmarks/bench_scale.py.

    PYTHONPATH=benchmarks/peers KUBECONFIG=… python -m kopf run --standalone --namespace NS \
        --liveness http://127.0.0.1:PORT/healthz -m kopfmysql.handlers

The kopf way of the same behaviour: create/update/resume handlers write the children (create first;
kopf keeps no cache of them), each with the reference's controller ownerReference; the cluster's
status is written through the status subresource by one handler only - the StatefulSet's event
handler, which reads the cluster from a kopf index - so status writes are ordered by the
StatefulSet's own events and a stale write cannot land after a newer one; the deletion handler holds
the reference's finalizer name (`settings.persistence.finalizer`) and runs its final backup, waiting
with TemporaryError where the reference requeues. Children go through pykube-ng, as in the reference.
Like the reference, it makes each cluster's replication TLS Secret (`tls.py`) and labels pod 0 primary
(a pod event handler), writes the plane serves for the reference too. (The reference also labels other
pods replica; the benchmark's clusters have one replica.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf
import pykube
import requests
import tenacity
from pykube.exceptions import HTTPError

from kopfmysql import children as c
from kopfmysql import tls

Obj = dict[str, Any]
VERSION = c.VERSION
PLURAL = "mysqlclusters"
APPLIED = f"{c.GROUP}/applied-config"
POLL_SECONDS = 5.0
WORKERS = int(os.environ.get("KOPF_MYSQL_WORKERS", "2"))
"""Threads for the (synchronous) handlers: the reference's default worker count."""

KINDS = {
    "Secret": pykube.Secret,
    "Service": pykube.Service,
    "StatefulSet": pykube.StatefulSet,
    "CronJob": pykube.CronJob,
    "PersistentVolumeClaim": pykube.PersistentVolumeClaim,
    "Job": pykube.Job,
}
_local = threading.local()
_labelled: set[str] = set()
"""Pods labelled primary by this process: later events of the pod may still show it unlabelled. One
uid per cluster, kept for the process's life (a benchmark's run)."""


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = c.FINALIZER
    # The CRD's structural schema prunes status.kopf: keep kopf's own records in annotations.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.zalando.org")
    settings.execution.max_workers = WORKERS
    settings.posting.level = logging.WARNING  # the reference records events for changes only


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # Not via the `kubernetes` client (kopf's default when it is installed): it is not what we use.
    return kopf.login_with_kubeconfig(**kwargs)


def api() -> pykube.HTTPClient:
    """One client per handler thread: a requests session is not meant to be shared across threads."""
    if not hasattr(_local, "api"):
        _local.api = pykube.HTTPClient(pykube.KubeConfig.from_env())
    return _local.api


# -- children ------------------------------------------------------------------------------------


def config_hash(desired: Obj) -> str:
    text = json.dumps(desired, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def ensure(uid: str, desired: Obj) -> Obj:
    """Create `desired`; if it exists and is ours, apply it when the config we last wrote differs."""
    desired["metadata"].setdefault("annotations", {})[APPLIED] = config_hash(desired)
    kind = KINDS[desired["kind"]]
    try:
        obj = kind(api(), desired)
        obj.create()
        return obj.obj
    except HTTPError as exc:
        if exc.code != 409:
            raise
    meta = desired["metadata"]
    live = kind.objects(api(), namespace=meta["namespace"]).get(name=meta["name"]).obj
    owner = next((r for r in live["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if (owner or {}).get("uid") != uid:
        raise kopf.PermanentError(f"{desired['kind']} {meta['name']} exists and is not ours")
    if (live["metadata"].get("annotations") or {}).get(APPLIED) == meta["annotations"][APPLIED]:
        return live
    response = api().patch(
        version=desired["apiVersion"],
        namespace=meta["namespace"],
        url=f"{kind.endpoint}/{meta['name']}",
        params={"fieldManager": c.OPERATOR, "force": "true"},
        headers={"Content-Type": "application/apply-patch+yaml"},
        data=json.dumps(desired),
    )
    api().raise_for_status(response)
    return response.json()  # type: ignore[no-any-return]


def create_once(desired: Obj) -> None:
    """Kinds we never rewrite: the credentials Secret, the backup PVC, the final-backup Job."""
    try:
        KINDS[desired["kind"]](api(), desired).create()
    except HTTPError as exc:
        if exc.code != 409:
            raise
        if desired["kind"] == "Secret":
            meta = desired["metadata"]
            live = pykube.Secret.objects(api(), namespace=meta["namespace"]).get(name=meta["name"]).obj
            if (live["metadata"].get("annotations") or {}).get(c.RETAINED) != "true":
                # Never start pods on a Secret that is not ours: its author knows the root password.
                raise kopf.PermanentError(f"Secret {meta['name']} exists and is not ours") from exc


def ensure_tls(cluster: Obj, *, new: bool) -> None:
    """The TLS Secret, made (keys and all) only when there is none: kopf keeps no cache, so a cluster
    that is not new is asked about first; a new one has none unless a retry already made it (409)."""
    meta = cluster["metadata"]
    name = f"{meta['name']}-tls"
    if (
        not new
        and pykube.Secret.objects(api(), namespace=meta["namespace"]).get_or_none(name=name) is not None
    ):
        return
    try:
        pykube.Secret(api(), tls.tls_secret(cluster)).create()
    except HTTPError as exc:
        if exc.code != 409:
            raise


@kopf.on.resume(c.GROUP, VERSION, PLURAL)
@kopf.on.create(c.GROUP, VERSION, PLURAL)
@kopf.on.update(c.GROUP, VERSION, PLURAL, field="spec")
def reconcile(body: kopf.Body, reason: str, **_: Any) -> None:
    cluster = {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {})}
    uid = cluster["metadata"]["uid"]
    create_once(c.credentials_secret(cluster))
    ensure_tls(cluster, new=reason == "create")
    ensure(uid, c.headless_service(cluster))
    ensure(uid, c.primary_service(cluster))
    ensure(uid, c.statefulset(cluster))
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    if c.spec_of(cluster)["backup"]["enabled"]:
        create_once(c.backup_pvc(cluster))
        ensure(uid, c.backup_cronjob(cluster))
        return
    if reason == "create":
        return  # a new cluster (a new uid) owns no CronJob to remove yet
    cronjob = pykube.CronJob.objects(api(), namespace=namespace).get_or_none(name=f"{name}-backup")
    refs = cronjob.obj["metadata"].get("ownerReferences") or [] if cronjob else []
    if any(r.get("controller") and r.get("uid") == uid for r in refs):
        cronjob.delete(propagation_policy="Background")  # type: ignore[union-attr]


# -- status --------------------------------------------------------------------------------------


def entry(body: kopf.Body) -> Obj:
    """What the status needs of a cluster."""
    meta = body["metadata"]
    return {
        "generation": meta.get("generation"),
        "replicas": (body.get("spec") or {}).get("replicas"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "status": dict(body.get("status") or {}),
    }


@kopf.index(c.GROUP, VERSION, PLURAL)
def clusters(name: str, namespace: str, body: kopf.Body, **_: Any) -> dict[tuple[str, str], Obj]:
    """Every cluster's `entry`, kept current by kopf's watch, for the StatefulSet handler."""
    return {(namespace, name): entry(body)}


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cluster_status(
    name: str, namespace: str, cluster: Obj, sts: Obj | None, *, deleting: bool = False
) -> Obj:
    ready = ((sts or {}).get("status") or {}).get("readyReplicas", 0)
    st = (sts or {}).get("status") or {}
    generation = (sts or {}).get("metadata", {}).get("generation")
    converged = (
        sts is not None
        and st.get("observedGeneration") == generation
        and st.get("updatedReplicas", 0) == ready == cluster["replicas"]
    )
    if deleting:
        phase, cond = "Terminating", ("False", "Terminating", "the cluster is being deleted")
    elif converged:
        phase, cond = "Running", ("True", "AllReplicasReady", f"{ready} replicas ready")
    else:
        phase, cond = "Pending", ("False", "ReplicasNotReady", f"{ready} replicas ready")
    old = next((x for x in cluster["status"].get("conditions") or [] if x.get("type") == "Ready"), {})
    since = old.get("lastTransitionTime") if old.get("status") == cond[0] else now()
    status: Obj = {
        "phase": phase,
        "readyReplicas": ready,
        "primaryEndpoint": f"{name}-primary.{namespace}.svc:{c.PORT}",
        "observedGeneration": cluster["generation"],
        "conditions": [
            {
                "type": "Ready",
                "status": cond[0],
                "reason": cond[1],
                "message": cond[2],
                "observedGeneration": cluster["generation"],
                "lastTransitionTime": since,
            }
        ],
    }
    if cluster["status"].get("finalBackup"):
        status["finalBackup"] = cluster["status"]["finalBackup"]
    return status


def patch_status(namespace: str, name: str, status: Obj) -> None:
    response = api().patch(
        version=c.API_VERSION,
        namespace=namespace,
        url=f"{PLURAL}/{name}/status",
        headers={"Content-Type": "application/merge-patch+json"},
        data=json.dumps({"status": status}),
    )
    if response.status_code != 404:  # the cluster is gone: nothing to report to
        api().raise_for_status(response)


@kopf.on.event("apps", "v1", "statefulsets", labels={c.MANAGED_BY: c.OPERATOR})
def statefulset_changed(type: str, body: kopf.Body, namespace: str, clusters: kopf.Index, **_: Any) -> None:
    owner = next((r for r in body["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None or owner.get("kind") != "MySQLCluster":
        return
    for cluster in clusters.get((namespace, owner["name"]), []):
        if cluster["deleting"]:
            return  # the deletion handler reports from here on
        sts = None if type == "DELETED" else dict(body)
        status = cluster_status(owner["name"], namespace, cluster, sts)
        if status != cluster["status"]:
            patch_status(namespace, owner["name"], status)


def _first_pod(name: str, labels: kopf.Labels, **_: Any) -> bool:
    return name == f"{labels.get(c.INSTANCE)}-mysql-0"


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, HTTPError):
        return exc.code == 429 or exc.code >= 500
    return isinstance(exc, requests.ConnectionError | requests.Timeout)


@tenacity.retry(
    retry=tenacity.retry_if_exception(_transient),
    wait=tenacity.wait_exponential(multiplier=0.1, max=2),
    stop=tenacity.stop_after_attempt(6),
    reraise=True,
)
def _label_primary(name: str, namespace: str) -> None:
    pykube.Pod(api(), {"metadata": {"name": name, "namespace": namespace}}).patch(
        {"metadata": {"labels": {c.ROLE: "primary"}}}
    )


# Only unlabelled database pods 0 reach the handler (kopf filters them). kopf never retries an event
# handler, and kwok's pod may not change again once Ready, so a transient failure is retried here.
@kopf.on.event(
    "",
    "v1",
    "pods",
    labels={c.MANAGED_BY: c.OPERATOR, "app.kubernetes.io/component": "database", c.ROLE: kopf.ABSENT},
    when=_first_pod,
)
def first_primary(
    type: str, name: str, namespace: str, labels: kopf.Labels, meta: kopf.Meta, **_: Any
) -> None:
    """Pod 0 of a cluster's StatefulSet is labelled primary once it exists: the primary Service selects it."""
    if type == "DELETED" or meta.get("deletionTimestamp"):
        return
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), {})
    if owner.get("kind") != "StatefulSet" or owner.get("name") != f"{labels.get(c.INSTANCE)}-mysql":
        return
    if meta["uid"] in _labelled:
        return  # patched already: this event predates the label (kopf handles a pod's events in turn)
    try:
        _label_primary(name, namespace)
    except HTTPError as exc:
        if exc.code != 404:  # gone meanwhile: its successor's event labels that one
            raise
        return
    _labelled.add(meta["uid"])


# -- deletion: stop the database, archive its volume, record the outcome, then let go ------------


@kopf.on.delete(c.GROUP, VERSION, PLURAL)
def finalize(body: kopf.Body, name: str, namespace: str, **_: Any) -> None:
    """Returning lets kopf remove the finalizer; TemporaryError retries after `delay`."""
    annotations = body["metadata"].get("annotations") or {}
    backup = (body.get("spec") or {}).get("backup") or {}
    record = dict((body.get("status") or {}).get("finalBackup") or {})
    if backup.get("enabled") is not True or annotations.get(c.SKIP_FINAL_BACKUP) == "true":
        return
    if record.get("phase") in ("Succeeded", "Skipped"):
        return
    cluster = {"metadata": dict(body["metadata"]), "spec": dict(body.get("spec") or {})}
    step = final_backup(cluster, record)
    status = cluster_status(name, namespace, entry(body), None, deleting=True)
    status["finalBackup"] = {**record, **step.record, "message": step.message}
    if status != body.get("status"):
        patch_status(namespace, name, status)  # recorded before the finalizer comes off
    if step.then is not None:
        step.then()
    if step.wait is not None:
        raise kopf.TemporaryError(step.message, delay=step.wait)


@dataclass
class Step:
    record: Obj
    """Changes to status.finalBackup."""
    message: str
    wait: float | None = None
    """Seconds until the next look; None: done, the finalizer may come off."""
    then: Callable[[], object] | None = None
    """Done once the record is stored."""


def final_backup(cluster: Obj, record: Obj) -> Step:
    """One step of the final backup, as the reference's finalizer.py takes it."""
    meta = cluster["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    ns = {"namespace": namespace}
    if pykube.PersistentVolumeClaim.objects(api(), **ns).get_or_none(name=f"data-{name}-mysql-0") is None:
        return Step({"phase": "Skipped"}, "no data volume")
    sts = pykube.StatefulSet.objects(api(), **ns).get_or_none(name=f"{name}-mysql")
    owner = (
        next((r for r in (sts.obj["metadata"].get("ownerReferences") or []) if r.get("controller")), {})
        if sts
        else {}
    )
    ours, orphaning = owner.get("uid") == uid, "orphan" in (meta.get("finalizers") or [])
    if sts is not None and ours and not orphaning and sts.obj["spec"].get("replicas") != 0:
        sts.patch(
            {"spec": {"replicas": 0}, "metadata": {"resourceVersion": sts.obj["metadata"]["resourceVersion"]}}
        )
        message = f"scaled StatefulSet {name}-mysql to 0 for a consistent final backup"
        return Step({"phase": "Stopping"}, message, POLL_SECONDS)
    selector = ",".join(f"{k}={v}" for k, v in c.pod_labels(name, "database").items())
    pods = list(pykube.Pod.objects(api(), **ns).filter(selector=selector))
    if pods and sts is not None and (not ours or orphaning):
        return Step({"phase": "Skipped"}, f"final backup skipped: StatefulSet {name}-mysql was orphaned")
    if pods:
        return Step({"phase": "Stopping"}, f"waiting for {len(pods)} database pod(s) to stop", POLL_SECONDS)
    create_once(c.backup_pvc(cluster))
    job = pykube.Job.objects(api(), **ns).get_or_none(name=f"{name}-final-backup")
    if job is None:
        create_once(c.final_backup_job(cluster))
        return Step({"phase": "Running"}, f"Job {name}-final-backup running", POLL_SECONDS)
    if (job.obj["metadata"].get("annotations") or {}).get(c.CLUSTER_UID) != uid:
        # An earlier cluster's, kept for its TTL: says nothing about us.
        return Step({}, "an earlier cluster's final-backup Job is in the way", POLL_SECONDS, _delete(job))
    state = job_state(job.obj)
    if state == "succeeded":
        return Step({"phase": "Succeeded"}, f"Job {name}-final-backup succeeded")
    if state == "running":
        return Step({"phase": "Running"}, f"Job {name}-final-backup running", POLL_SECONDS)
    attempts = int(record.get("attempts") or 0)
    if record.get("lastFailedJob") != job.obj["metadata"]["uid"]:
        attempts += 1
    failed = {"phase": "Failed", "attempts": attempts, "lastFailedJob": job.obj["metadata"]["uid"]}
    message = f"final backup Job {name}-final-backup failed; attempt {attempts}"
    # Deleted once the failure is counted (its uid keeps it from being counted twice).
    wait = min(10.0 * 2 ** (attempts - 1), 600.0)
    return Step({**failed, "lastFailureTime": now()}, message, wait, _delete(job))


def _delete(job: pykube.Job) -> Callable[[], object]:
    return lambda: job.delete(propagation_policy="Background")


def job_state(job: Obj) -> str:
    status = job.get("status") or {}
    conditions = {x.get("type"): x.get("status") for x in status.get("conditions") or []}
    if status.get("succeeded") or "True" in (
        conditions.get("Complete"),
        conditions.get("SuccessCriteriaMet"),
    ):
        return "succeeded"
    if status.get("failed") or "True" in (conditions.get("Failed"), conditions.get("FailureTarget")):
        return "failed"
    return "running"
