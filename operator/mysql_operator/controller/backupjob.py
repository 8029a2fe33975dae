"""Where the final backup Job runs, and why it does not when it cannot.

`data_node_affinity`: the Job's pod must run where the primary's data volume is (a local volume names its
node, a zonal disk its zone); stating it also puts a new backup volume there. `why_stuck`: a running Job
that can never finish on its own (its pod refused at creation, or never scheduled because its backup
volume does not bind) says so from its first sign, with the apiserver's and the provisioner's words.
"""

from __future__ import annotations

from typing import Any

from .children import resources
from .client import ApiClient
from .kinds import PersistentVolume, PersistentVolumeClaim, Pod

Obj = dict[str, Any]


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
