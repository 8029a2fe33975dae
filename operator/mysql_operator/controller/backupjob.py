"""Where the final backup Job runs, and why it does not when it cannot.

`data_node_affinity`: the Job's pod must run where the primary's data volume is (a local volume names its
node, a zonal disk its zone); stating it also puts a new backup volume there. `why_stuck`: a running Job
that can never finish on its own (its pod refused at creation, or never scheduled because its backup
volume does not bind) says so from its first sign, with the apiserver's and the provisioner's words.
`last_words`: what a failed Job's pod said before it ended (its log's tail, kept by the kubelet as the
container's termination message), read before the Job and its pod are deleted for the retry.
"""

from __future__ import annotations

import logging
from typing import Any

from pykube.exceptions import HTTPError

from .children import resources
from .client import ApiClient
from .kinds import PersistentVolume, PersistentVolumeClaim, Pod

Obj = dict[str, Any]

log = logging.getLogger(__name__)

LAST_WORDS_MAX_CHARS = 400
"""How much of a failed pod's log tail goes into status and the Event: the end, where the error is."""


def why_stuck(client: ApiClient, cluster: Obj, job: Obj) -> str | None:
    """Why a running final backup Job cannot get on, from its first sign: its pod refused at
    creation (admission: a Pod Security level, a quota, a webhook), or its pod unschedulable (an
    unbound backup volume, with the provisioner's word for why). None while nothing says so."""
    meta, name = cluster["metadata"], job["metadata"]["name"]
    namespace = meta["namespace"]
    refused = [e for e in client.events(namespace, "Job", name) if e.get("reason") == "FailedCreate"]
    if refused and not (job.get("status") or {}).get("active"):
        said = refused[-1].get("message") or "refused"
        return f"Job {name} cannot create its pod: {said}"
    for pod in client.list(Pod, namespace, f"job-name={name}", fresh=True):
        conditions = (pod.get("status") or {}).get("conditions") or []
        unscheduled = next(
            (c for c in conditions if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"),
            None,
        )
        if unscheduled is None:
            continue
        message = f"pod {pod['metadata']['name']} cannot be scheduled: {unscheduled.get('message', '')}"
        claim_name = resources.Names(meta["name"]).backup_pvc
        claim = client.get(PersistentVolumeClaim, namespace, claim_name, fresh=True)
        if claim is not None and (claim.get("status") or {}).get("phase") == "Pending":
            why = [
                e.get("message", "")
                for e in client.events(namespace, "PersistentVolumeClaim", claim_name)
                if e.get("type") == "Warning"
            ]
            class_name = (claim.get("spec") or {}).get("storageClassName") or "the default class"
            detail = f"; {why[-1]}" if why else ""
            message += f"; PersistentVolumeClaim {claim_name} ({class_name}) is not bound{detail}"
        return message
    return None


def data_node_affinity(client: ApiClient, cluster: Obj) -> Obj | None:
    """`spec.nodeAffinity.required` of the PersistentVolume under the primary's data PVC (where the
    archive's pod must run, and its backup volume should be made), or None when it has none."""
    meta = cluster["metadata"]
    pvc = client.get(PersistentVolumeClaim, meta["namespace"], resources.primary_data_claim(cluster))
    volume = ((pvc or {}).get("spec") or {}).get("volumeName")
    pv = client.get(PersistentVolume, None, volume) if volume else None
    return (((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required")


def last_words(client: ApiClient, job: Obj) -> str | None:
    """The end of what a failed Job's pod wrote (`terminationMessagePolicy: FallbackToLogsOnError`
    makes the kubelet keep its log's tail), lines joined by " / ". None when there is none to read:
    no pod of this Job any more, or the read refused. Best effort: the failure is counted either way."""
    namespace, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"]["uid"]
    try:
        pods = client.list(Pod, namespace, f"job-name={name}", fresh=True)
    except HTTPError as exc:
        log.debug("cannot read the failed Job's pod: %s", exc, extra={"namespace": namespace})
        return None
    for pod in pods:
        if not any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or []):
            continue  # a pod of an earlier Job of this name
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (container.get("state") or {}).get("terminated") or {}
            lines = [line.strip() for line in (ended.get("message") or "").splitlines() if line.strip()]
            if ended.get("exitCode") and lines:
                said = " / ".join(lines)
                return said if len(said) <= LAST_WORDS_MAX_CHARS else "…" + said[-LAST_WORDS_MAX_CHARS:]
    return None
