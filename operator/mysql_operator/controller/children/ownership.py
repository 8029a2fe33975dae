"""Whose is a same-named object we find where a child should be? Decided before any write to it.

The operator writes with rights over every StatefulSet, Service, Secret and CronJob of the namespace,
and a child it controls is garbage-collected with the cluster. So adopting "any object of the right
name" would let anyone who may create a MySQLCluster rewrite or delete those objects. The rules:

* controlled by this cluster (ownerReference with our uid, controller=true): ours. Our creates always
  carry that reference, so a create whose reply was lost comes back as ours without adopting;
* controlled by anything else: a conflict;
* no controller, and labelled as ours (`app.kubernetes.io/instance=<cluster>` and
  `app.kubernetes.io/managed-by=mysql-operator`): an orphan of ours, e.g. left by a
  `propagationPolicy: Orphan` deletion of an earlier cluster of this name - adopted, except:
* Secrets are never adopted. The credentials Secret is retained (no ownerReference, marked by
  RETAINED_ANNOTATION) and reused as it is, so the root password of kept data survives;
* create-only children (backup PVC, final-backup Job) have no owner by design: ours iff labelled.

Anything else is a ChildConflict: reported in status and as a Warning Event naming the object,
and left untouched.
"""

from __future__ import annotations

import enum
from typing import Any

from ...api.v1 import RETAINED_ANNOTATION
from .problems import ChildBlocked, Problem
from .resources import labels

Obj = dict[str, Any]

CHILD_CONFLICT = "ChildConflict"


class Claim(enum.Enum):
    OURS = "ours"
    """Ours already: compare and write as needed."""
    ADOPT = "adopt"
    """An orphan of ours: add our controller reference (after rechecking the cluster is alive)."""
    MIGRATE = "migrate"
    """A credentials Secret an older operator made with our ownerReference: make it retained."""


def controller_of(obj: Obj) -> Obj | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def labelled_ours(obj: Obj, cluster_name: str) -> bool:
    have = obj["metadata"].get("labels") or {}
    return all(have.get(k) == v for k, v in labels(cluster_name).items())


def retained_secret(obj: Obj, cluster_name: str) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    return labelled_ours(obj, cluster_name) and annotations.get(RETAINED_ANNOTATION) == "true"


def claim(kind: str, cluster: Obj, live: Obj, *, owned: bool) -> Claim:
    """How we may treat `live`; raises ChildBlocked(ChildConflict) when it is not ours.

    `owned`: whether the desired child carries our controller reference (Services, StatefulSet,
    CronJob) rather than labels only (Secret, PVC, Job).
    """
    meta = cluster["metadata"]
    name = live["metadata"]["name"]
    owner = controller_of(live)
    if owner is not None and owner.get("uid") == meta["uid"]:
        return Claim.MIGRATE if kind == "Secret" else Claim.OURS
    if owner is not None:
        raise conflict(
            kind,
            name,
            f"is controlled by {owner.get('kind')} {owner.get('name')}; delete it or rename the cluster",
        )
    if kind == "Secret":
        if retained_secret(live, meta["name"]):
            return Claim.OURS
        raise conflict(
            kind,
            name,
            f"exists and is not a credentials Secret retained by mysql-operator for {meta['name']} "
            f"(labels {ours_selector(meta['name'])}, annotation {RETAINED_ANNOTATION}=true); "
            "delete or rename it, or rename the cluster",
        )
    if labelled_ours(live, meta["name"]):
        return Claim.ADOPT if owned else Claim.OURS
    raise conflict(
        kind,
        name,
        f"exists and is not ours (no controller, not labelled {ours_selector(meta['name'])}); "
        "delete or rename it, or rename the cluster",
    )


def conflict(kind: str, name: str, why: str) -> ChildBlocked:
    return ChildBlocked(Problem(CHILD_CONFLICT, f"{kind} {name} {why}"))


def ours_selector(cluster_name: str) -> str:
    """The labels that mark a child as the cluster's, as a selector (for messages)."""
    return ",".join(f"{k}={v}" for k, v in labels(cluster_name).items() if k != "app.kubernetes.io/name")
