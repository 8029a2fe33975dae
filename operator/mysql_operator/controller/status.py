"""Status as a pure function of what was observed, and the comparison that keeps it quiet.

`compute_status` has no clock of its own beyond `now`, which is used only for a condition whose
status flips; every message is stable while nothing changes. So a converged cluster computes the
same status on every pass, `status_equal` says so, and no status write (and no watch event that
would wake the reconcile again) follows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .children.problems import Problem
from .children.resources import MYSQL_PORT, Names
from .versions import running_tag

Obj = dict[str, Any]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
CONDITION_TYPES = (READY, PROGRESSING, DEGRADED)
ROLE_FIELDS = ("primary", "primaryClaimUID", "primaryLostSince", "failover")
"""Status fields that record the database's roles (`roles`)."""
RECORDED_FIELDS = (*ROLE_FIELDS, "upgradeFrom", "datadirOwner")
"""Records: kept by every status write, changed only by the pass that names them (`records`)."""


def format_time(when: datetime) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    """A metav1.Time as written by `format_time` (or any RFC 3339); None for none or garbage."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def statefulset_converged(sts: Obj | None, replicas: int | None) -> bool:
    """The StatefulSet controller has seen its latest spec and every replica is updated and ready."""
    if sts is None or replicas is None:
        return False
    status = sts.get("status") or {}
    return (
        status.get("observedGeneration") == sts["metadata"].get("generation")
        and status.get("updatedReplicas", 0) == status.get("readyReplicas", 0) == replicas
    )


def compute_status(
    cluster: Obj,
    sts: Obj | None,
    problems: list[Problem] | tuple[Problem, ...] = (),
    *,
    deleting: bool = False,
    now: datetime | None = None,
    final_backup: Obj | None = None,
    records: Obj | None = None,
) -> Obj:
    """The status the cluster should have, given its StatefulSet (None: not there) and problems.

    `final_backup` replaces status.finalBackup; None keeps the one recorded (it is the deletion's
    memory, see `finalizer`, and must survive every other status write).
    """
    meta = cluster["metadata"]
    generation = meta.get("generation")
    replicas = (cluster.get("spec") or {}).get("replicas")
    ready = ((sts or {}).get("status") or {}).get("readyReplicas", 0)
    fatal = next((p for p in problems if p.fatal), None)
    converged = statefulset_converged(sts, replicas)

    if deleting:
        phase = "Terminating"
    elif fatal:
        phase = "Failed"
    else:
        phase = "Running" if converged else "Pending"

    counted = f"{ready} of {replicas} replicas ready"
    if phase == "Running":
        ready_cond = ("True", "AllReplicasReady", counted)
        progressing = ("False", "Converged", "StatefulSet is up to date")
    elif deleting:
        ready_cond = ("False", "Terminating", "the cluster is being deleted")
        progressing = ("True", "Terminating", "running finalizers before the cluster goes away")
    elif fatal:
        ready_cond = ("False", fatal.reason, fatal.message)
        progressing = ("False", fatal.reason, "cannot act on the spec until it is fixed")
    else:
        ready_cond = ("False", "ReplicasNotReady", counted)
        reason = "Creating" if sts is None else "RollingOut"
        progressing = ("True", reason, f"StatefulSet {Names(meta['name']).statefulset}: {counted}")
    if problems:
        degraded = ("True", problems[0].reason, "; ".join(p.message for p in problems))
    else:
        degraded = ("False", "AsExpected", "no problems")

    wanted = {READY: ready_cond, PROGRESSING: progressing, DEGRADED: degraded}
    previous = {c.get("type"): c for c in (cluster.get("status") or {}).get("conditions") or []}
    stamp = format_time(now or datetime.now(UTC))
    conditions = []
    for ctype in CONDITION_TYPES:
        status, reason, message = wanted[ctype]
        old = previous.get(ctype)
        # metav1 semantics: the transition time moves only when status flips.
        since = old["lastTransitionTime"] if old and old.get("status") == status else stamp
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "observedGeneration": generation,
                "lastTransitionTime": since,
                "reason": reason,
                "message": message,
            }
        )
    namespace = meta["namespace"]
    status: Obj = {
        "phase": phase,
        "readyReplicas": ready,
        "primaryEndpoint": f"{Names(meta['name']).primary_host(namespace)}:{MYSQL_PORT}",
        "observedGeneration": generation,
        "conditions": conditions,
    }
    recorded = final_backup if final_backup is not None else (cluster.get("status") or {}).get("finalBackup")
    if recorded:
        status["finalBackup"] = recorded
    # The tag every pod ran: taken once a rollout completed, kept through the next one (which may
    # never start: a tag that does not exist). A record, like finalBackup below.
    tag = running_tag(sts) if converged else None
    version = tag or (cluster.get("status") or {}).get("version")
    if version:
        status["version"] = version
    restored = (cluster.get("status") or {}).get("restoredFrom")
    if restored:  # a record, like finalBackup: kept by every later status write
        status["restoredFrom"] = restored
    for key in RECORDED_FIELDS:
        value = (records or {}).get(key, (cluster.get("status") or {}).get(key))
        if value is not None:
            status[key] = value
    return status


def _normalized(status: Obj | None) -> Obj:
    out = {k: v for k, v in (status or {}).items() if v is not None}
    if "conditions" in out:
        out["conditions"] = {
            c.get("type"): {k: v for k, v in c.items() if v is not None} for c in out["conditions"]
        }
    return out


def status_equal(old: Obj | None, new: Obj | None) -> bool:
    """Same meaning: missing equals None, and condition order does not matter."""
    return _normalized(old) == _normalized(new)


def status_patch(old: Obj | None, new: Obj) -> Obj:
    """Merge patch body for /status: `new`, plus None for old keys it drops (None deletes)."""
    patch: Obj = {k: None for k in (old or {}) if k not in new}
    patch.update(new)
    return {"status": patch}


def condition(status: Obj | None, ctype: str) -> Obj | None:
    """The condition of type `ctype` in a status, if any."""
    return next((c for c in (status or {}).get("conditions") or [] if c.get("type") == ctype), None)
