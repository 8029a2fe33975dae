"""Which pod is the primary: the label that says so, the failover that moves it, the switchover asked for.

The record is the cluster's status (`status.primary`, `primaryClaimUID`, `primaryLostSince`,
`failover`); the label `db.example.com/role` on each database pod follows it, and the Service
`<name>-primary` follows the label. Each pass:

1. A failover or switchover in progress (`status.failover.phase` not Completed) is driven on
   (`failover.Steps`): every step is idempotent and recorded before the next begins.
2. A switchover asked for (annotation `db.example.com/switchover-to: <pod or ordinal>`) starts.
3. The primary is assessed (`database.failover.assess`): lost since when, suspect (replicas are asked
   over exec whether they are cut off from it). Lost for `spec.failover.afterSeconds` (at once when its
   data volume was replaced), the replica whose GTIDs cover every other's is chosen and a failover
   starts; with failover off, or no candidate, the cluster is Degraded with the reason.
4. Labels are made to match: the primary (unless a step is moving it, or its data volume is not the
   one it was promoted on) `primary`, every other pod `replica`.

A cluster starts with pod 0 as its primary; a cluster from before roles existed had pod 0 as its primary
too, so both begin from `<statefulset>-0` — unless pod 0's data claim is younger than another pod's (or
missing beside one): then the cluster ran before (it was re-created over its kept claims) and pod 0's
volume was made anew, so pod 0 gets no role label (none serves writes) and the cluster is Degraded
(`PrimaryDataReplaced`) until a human restores that volume or deletes the older claims. A pod 0 that stays
unready because its datadir still replicates (re-created over the claims of a cluster that had failed over)
is reported
(`FirstPrimaryReplicates`), never promoted by the operator: no record says which pod was the primary.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from ..api.v1 import SWITCHOVER_ANNOTATION, MySQLClusterSpec
from ..database import actions
from ..database.engines import Engine
from ..database.failover import NOT_READY, PRIMARY_DATA_REPLACED, Assessment, assess, cut_off, due
from ..database.replication import PRIMARY, RAN_ANNOTATION, REPLICA, ROLE_LABEL, server_user
from ..runtime.podexec import ExecError
from .children import resources
from .children.problems import Problem
from .failover import Steps, forget_switchover
from .kinds import PersistentVolumeClaim, Pod
from .members import CONNECTION_ERRNOS, RETRY_SECONDS, Executor, Outcome, View, init_ended, run
from .status import format_time, parse_time
from .writer import Writer

log = logging.getLogger(__name__)

Obj = dict[str, Any]

FRESH_ASK_SECONDS = 5.0
"""How long asking an unready primary whether its datadir is fresh may take (its node may be gone)."""
FIRST_PRIMARY_REPLICATES = "FirstPrimaryReplicates"
"""The reason for a first primary whose datadir still replicates (see `Roles._first_refused`)."""


class Roles:
    """The role half of the reconciler: shares its writer; execs through `executor`."""

    def __init__(self, writer: Writer, executor: Executor | None) -> None:
        self.w = writer
        self.executor = executor

    # -- the pass -----------------------------------------------------------------------------------

    def reconcile(self, cluster: Obj, spec: MySQLClusterSpec, engine: Engine) -> Outcome:
        view = self._view(cluster)
        status = cluster.get("status") or {}
        out = Outcome(cluster)
        if not status.get("primary"):
            return self._bootstrap(view, spec, engine, out)
        primary = status["primary"]
        steps = Steps(self.w, self.executor, spec, engine, view, out)
        record = status.get("failover") or {}
        if record and record.get("phase") != "Completed":
            steps.drive(record)
        elif (target := self._switchover_target(cluster, view)) is not None and target != primary:
            steps.switchover(primary, target)
        else:
            if target == primary:
                forget_switchover(self.w, out)
            self._watch_primary(steps, spec, view, primary, out)
        # Pods made before `configure` named the owner: it is recorded once one that names it runs.
        self._record_owner(view, out)
        promoted_on = out.roles.get("primaryClaimUID") or (out.cluster.get("status") or {}).get(
            "primaryClaimUID"
        )
        self.label(view, out.roles.get("primary", primary), promoted_on, moving=steps.moving, ran=True)
        return out

    def _bootstrap(self, view: View, spec: MySQLClusterSpec, engine: Engine, out: Outcome) -> Outcome:
        """Before a primary has served: pod 0 is labelled primary (its sidecar makes it writable) and
        recorded once it is ready (in the same pass when it was ready before its label: not a real
        server's readiness). A primary that never served is starting, not lost: no failover.
        Unless pod 0's volume is younger than another pod's kept one: then it is not labelled primary;
        and a pod 0 that stays unready because its datadir still replicates is reported."""
        first = view.names.first_pod
        replaced, kept = None, ""
        if spec.restore is None:
            replaced, kept = self._replaced_first_volume(view, spec.replicas)
        if replaced is not None:
            out.problems.append(Problem(PRIMARY_DATA_REPLACED, replaced, fatal=False))
            self.label(view, first, None, moving=True, unlabelled=first, ran=True)  # none serves writes
            return out
        member = view.member(first)
        role = (view.pods[first]["metadata"].get("labels") or {}).get(ROLE_LABEL) if member else None
        # An unlabelled server passes this operator's probe only while it replicates, which a new
        # cluster's pod 0 cannot (the primary Service selects no pod yet): a pod 0 ready before its label
        # is ready by other means (kwok's pods), and is recorded in the pass that labels it, one status
        # write less. Not when a kept claim says the cluster ran (then only a labelled, ready one is),
        # nor for a pod going away (never labelled, its successor would be told the cluster ran), nor
        # before its claim is cached (the record names the volume it was made primary on).
        unlabelled_first = (
            role is None
            and not kept
            and member is not None
            and not member.terminating
            and member.claim_uid is not None
        )
        if member is not None and member.ready and (role == PRIMARY or unlabelled_first):
            out.roles.update(primary=first, primaryClaimUID=member.claim_uid)
            self._record_owner(view, out)
        elif member is not None and member.running and role == PRIMARY:
            found = self._first_refused(view, engine, kept)
            if found is not None:
                out.problems.append(Problem(*found, fatal=False))
        # Recorded with its label already there, or a kept claim says it ran before: a fresh datadir is
        # then never made writable. A pod 0 labelled in the pass that records it is a new cluster's first
        # primary, whose fresh datadir must be made writable: not told.
        ran = bool(kept) or (role == PRIMARY and "primary" in out.roles)
        self.label(view, first, None, moving=False, ran=ran)
        return out

    def _first_refused(self, view: View, engine: Engine, kept: str) -> tuple[str, str] | None:
        """(reason, message) when pod 0, labelled the first primary, is not writable and will not be by
        itself; None when it is not refused or cannot be asked yet.

        * Its datadir replicates from a source (a cluster re-created over the kept claims of one that
          failed over: the record of which pod was the primary went with the cluster object). Its
          sidecar waits for a promotion that, with no record, only a human can decide.
        * Its datadir is fresh (initialised, holding nothing of the cluster) while `kept`, another pod's
          claim, says the cluster ran: pod 0's kept volume was emptied in place."""
        first = view.names.first_pod
        try:
            result = run(self.executor, view, first, actions.observe(engine))
            seen = actions.parse_observed(engine, result.stdout) if result.code == 0 else None
        except (ExecError, ValueError):
            return None  # starting (its server not up yet), or no exec: nothing to say
        if seen is None:
            return None
        if seen.fresh and kept and not seen.replicating:
            return PRIMARY_DATA_REPLACED, (
                f"pod {first}'s datadir was initialised anew (it holds nothing of the cluster) while {kept} "
                "says the cluster ran: its volume was emptied in place, and an empty datadir is never served "
                f"as primary; restore {view.names.data_claim(first)} (or the cluster, from a backup), or "
                "delete the older claims to start afresh"
            )
        if not seen.replicating:
            return None
        return FIRST_PRIMARY_REPLICATES, (
            f"pod {first} is labelled the first primary, but its datadir replicates from "
            f"{seen.source or 'a source'}: the cluster ran before with another primary, and no record says "
            f"which; it stays read-only (and the other pods do not start) until someone decides. If {first} "
            f"holds every write to keep, run `{engine.reset_replication_sql}` in it (its sidecar then makes "
            "it writable); otherwise restore the last primary's volume as pod 0's"
        )

    def _replaced_first_volume(self, view: View, replicas: int) -> tuple[str | None, str]:
        """(why pod 0 must not become the first primary or None, another pod's claim that says the
        cluster ran or ""). A cluster's data claims are made in ordinal order (pod 1 starts once pod 0
        is ready), so a pod 0 claim younger than another pod's was made anew after the cluster ran: a
        cluster re-created over its kept claims but for pod 0's, whose empty datadir would otherwise be
        served while the replicas hold the data."""
        # Read from the apiserver, not the cache: a claim deleted and made anew may still be the old
        # one there, and either mistake is costly (an empty primary served, or a first primary held
        # back). Only until the first primary is recorded.
        # Pod 0's own claim only matters beside another's: not read at all for a cluster that has none.
        first, claims = view.names.first_pod, (PersistentVolumeClaim, view.namespace)
        own = view.names.data_claim(first)
        born: datetime | None = None
        kept, looked = "", False
        for ordinal in range(1, replicas):
            name = view.names.data_claim(view.names.pod(ordinal))
            other = self.w.client.get(*claims, name, fresh=True)
            older = parse_time((other or {}).get("metadata", {}).get("creationTimestamp"))
            if older is None:
                continue
            if not looked:
                mine = self.w.client.get(*claims, own, fresh=True)
                born, looked = parse_time((mine or {}).get("metadata", {}).get("creationTimestamp")), True
            made = f"{name} (made {format_time(older)})"
            kept = kept or made
            if born is not None and older >= born:
                continue
            # A missing claim 0 beside an older one is the same verdict: the one made for it will be new.
            # (The StatefulSet controller may also have made pod 0 while a stale cache still held the
            # deleted claim: such a pod has no claim at all.)
            if born is None:
                found = f"{own}) does not exist while {made} does: its datadir is gone"
            else:
                found = f"{own}, made {format_time(born)}) is younger than {made}: its datadir was replaced"
            return (
                f"pod {first}'s data volume (PersistentVolumeClaim {found} after the cluster ran, and an "
                f"empty datadir is never served as primary; restore {own} (or the cluster, from a backup), "
                "or delete the older claims to start afresh"
            ), made
        return None, kept

    def _watch_primary(
        self, steps: Any, spec: MySQLClusterSpec, view: View, primary: str, out: Outcome
    ) -> None:
        status = out.cluster.get("status") or {}
        promoted_on = out.roles.get("primaryClaimUID") or status.get("primaryClaimUID")
        found = assess(view.member(primary), primary, view.others(primary), promoted_on)
        if found.state == "suspect":
            found = self._confirm_cut_off(steps, view, primary, found)
        elif found.reason == NOT_READY:
            found = self._fresh_datadir(view, primary, found)
        if found.state == "available":
            out.roles["primaryLostSince"] = None
            return
        now = self.w.now()
        since = parse_time(status.get("primaryLostSince")) or now
        out.roles["primaryLostSince"] = format_time(since)
        at = due(since, now, spec.failover.after_seconds, immediate=found.immediate)
        if not spec.failover.enabled:
            message = f"{found.message} (since {format_time(since)}); spec.failover.enabled is false"
            out.problems.append(Problem(found.reason, message, fatal=False))
            if found.reason == NOT_READY:
                out.requeue_after = RETRY_SECONDS  # to say so once its datadir turns out fresh
            return
        if now < at:
            message = f"{found.message} (since {format_time(since)}); failing over at {format_time(at)}"
            out.problems.append(Problem(found.reason, message, fatal=False))
            out.requeue_after = (at - now).total_seconds()
            if found.reason == NOT_READY:
                # Its datadir may turn out fresh once its init ends, which no pod change announces.
                out.requeue_after = min(out.requeue_after, RETRY_SECONDS)
            return
        steps.failover(primary, found)

    def _confirm_cut_off(self, steps: Any, view: View, primary: str, found: Assessment) -> Assessment:
        observed = {m.name: o for m in view.others(primary) if (o := steps.observe(m.name))}
        connection = {n: o for n, o in observed.items() if o.io_errno in CONNECTION_ERRNOS}
        message = cut_off(connection) if len(connection) == len(observed) else None
        if message is None:
            return Assessment("available")
        return Assessment("lost", found.reason, f"pod {primary} is ready, but {message}")

    def _fresh_datadir(self, view: View, primary: str, found: Assessment) -> Assessment:
        """An unready primary whose datadir is fresh (initialised anew: emptied in place, same volume)
        is replaced at once: its sidecar never makes it writable, and nothing comes back by waiting."""
        member = view.member(primary)
        if member is None or member.terminating:
            return found
        try:
            result = run(self.executor, view, primary, actions.datadir_fresh(), timeout=FRESH_ASK_SECONDS)
        except ExecError:
            return found  # its sidecar not up (yet), or no exec: wait as for any unready primary
        if result.code != 0 or result.stdout.strip() != "datadir-fresh":
            return found
        message = (
            f"pod {primary}'s datadir was initialised anew after the cluster ran (its volume emptied in "
            "place): an empty datadir is never served as primary"
        )
        return Assessment("lost", PRIMARY_DATA_REPLACED, message, immediate=True)

    # -- labels ---------------------------------------------------------------------------------

    def label(
        self,
        view: View,
        primary: str,
        promoted_on: str | None,
        *,
        moving: bool,
        unlabelled: str = "",
        ran: bool = False,
    ) -> None:
        """Each database pod's role label as the record says: no primary while one is being moved, nor
        one on a data volume that is not the one it was promoted on. `unlabelled` gets no role: out of
        the primary Service and read-only, but not pointed at a source either (a `replica` label would
        have its sidecar make it one, which a first primary could not be afterwards). `ran`: the cluster
        has run, which a pod labelled from then on is told in the same patch (`RAN_ANNOTATION`): its
        sidecar then never makes a fresh datadir writable. A pod labelled before knows by itself (its
        sidecar saw its datadir hold the cluster's data), so no pod is written to only to be told."""
        for name, pod in view.pods.items():
            is_primary = name == primary and not moving
            if is_primary and promoted_on and view.claims.get(name) not in (None, promoted_on):
                is_primary = False
            wanted = None if name == unlabelled else PRIMARY if is_primary else REPLICA
            meta = pod["metadata"]
            # Told it ran when the cluster has not (its kept claims deleted to start afresh): untold.
            untell = not ran and (meta.get("annotations") or {}).get(RAN_ANNOTATION) is not None
            labelled = (meta.get("labels") or {}).get(ROLE_LABEL) == wanted
            if (labelled and not untell) or meta.get("deletionTimestamp"):
                continue
            patch: Obj = {"metadata": {"labels": {ROLE_LABEL: wanted}}}
            if ran or untell:
                patch["metadata"]["annotations"] = {RAN_ANNOTATION: "true" if ran else None}
            self.w.client.patch_merge(Pod, view.namespace, name, patch)
            log.info("labelled", extra={"pod": name, "namespace": view.namespace, "role": wanted})

    def _record_owner(self, view: View, out: Outcome) -> None:
        """`status.datadirOwner` (whom the backup pods run as) from the first database pod whose
        `configure` named the image's `mysql` user, unless recorded: read off the cached pods, never
        asked by exec. Recorded with the first primary, in the same status write; a cluster whose pods
        named none then (made by an older operator) gets it in a write of its own once one does."""
        if (out.cluster.get("status") or {}).get("datadirOwner"):
            return
        for name in sorted(view.pods):
            owner = server_user((init_ended(view.pods[name], "configure") or {}).get("message"))
            if owner:
                out.roles["datadirOwner"] = owner
                return

    # -- helpers --------------------------------------------------------------------------------

    def _view(self, cluster: Obj) -> View:
        meta = cluster["metadata"]
        namespace, names = meta["namespace"], resources.Names(meta["name"])
        pods = {
            p["metadata"]["name"]: p
            for p in self.w.client.list(Pod, namespace, resources.database_selector(meta["name"]))
        }
        claims: dict[str, str | None] = {}
        for name in pods:
            claim = self.w.client.get(PersistentVolumeClaim, namespace, names.data_claim(name))
            claims[name] = claim["metadata"].get("uid") if claim else None
        return View(namespace, names, pods, claims)

    def _switchover_target(self, cluster: Obj, view: View) -> str | None:
        value = ((cluster["metadata"].get("annotations") or {}).get(SWITCHOVER_ANNOTATION) or "").strip()
        if not value:
            return None
        return view.names.pod(int(value)) if value.isdigit() else value
