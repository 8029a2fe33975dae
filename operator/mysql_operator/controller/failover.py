"""The steps that move the primary, for a failover and a planned switchover alike, each recorded in
`status.failover` before the next begins:

1. **Fencing** — the old primary loses its label (so the Service stops sending it writes) and is made
   read-only through exec. It counts as fenced when that succeeded, or when its server is not running
   (every server starts read-only; only the sidecar of a pod labelled primary makes it writable), or its
   pod is gone. Otherwise nothing is promoted: the step is tried again, and the cluster says why.
   A switchover then reads what the fenced primary has written (its GTIDs): the new primary applies all
   of it first, so a planned switchover loses nothing.
2. **Promoting** — the new primary applies what it received (a failover first stops receiving: its
   source is gone), then its replication is ended. The record then names it the primary; the next label
   pass labels it, and its sidecar makes it writable (never before: writable means labelled).
3. **Repointing** — once the new primary is ready (writable and in its Service), every other replica
   reconnects to the Service, and so to it: a connection to the old primary, which may be up and
   fenced, would otherwise stay open and bring nothing. Then Completed, with an Event.

A step that fails leaves the record where it was; the next reconcile takes it again from the top.
"""

from __future__ import annotations

import logging
from typing import Any

from ..api.v1 import SWITCHOVER_ANNOTATION, MySQLClusterSpec
from ..database import actions
from ..database.engines import Engine
from ..database.failover import Assessment, choose
from ..database.replication import REPLICA, ROLE_LABEL
from ..runtime.podexec import ExecError
from .children.problems import Problem
from .kinds import MySQLCluster, Pod
from .members import RETRY_SECONDS, Executor, Outcome, View, run
from .status import format_time
from .writer import Writer

log = logging.getLogger(__name__)

Obj = dict[str, Any]

READY_POLL_SECONDS = 2.0
"""How often a promoted primary is looked at until it is ready (pod changes wake the reconcile too)."""


class Steps:
    """One pass's view of a failover or switchover (see the module docstring)."""

    def __init__(
        self,
        writer: Writer,
        executor: Executor | None,
        spec: MySQLClusterSpec,
        engine: Engine,
        view: View,
        out: Outcome,
    ) -> None:
        self.w, self.executor = writer, executor
        self.spec, self.engine, self.view, self.out = spec, engine, view, out
        self.moving = False
        """A step is under way that no pod may be labelled primary during."""

    # -- starting -------------------------------------------------------------------------------

    def failover(self, primary: str, found: Assessment) -> None:
        candidates = [m.name for m in self.view.others(primary) if m.running and not m.terminating]
        observed = {name: o for name in candidates if (o := self.observe(name)) is not None}
        silent = sorted(set(candidates) - set(observed))
        if silent:
            # One that runs but does not answer may hold more than any that does: never guess.
            message = (
                f"{found.message}; cannot read the GTIDs of {', '.join(silent)}, so none is promoted yet"
            )
            self._problem("FailoverWaiting", message)
            return
        choice = choose(observed)
        if choice.candidate is None:
            self._problem(choice.reason, f"{found.message}; {choice.message}")
            return
        position = observed[choice.candidate].received.text or "no GTIDs"
        message = f"{found.message}; promoting {choice.candidate}, which holds {position}"
        record = self._start("PrimaryLost", primary, choice.candidate, message)
        self.w.event(self.out.cluster, "Warning", "FailoverStarted", message)
        self.drive(record)

    def switchover(self, primary: str, target: str) -> None:
        member = self.view.member(target)
        if member is None or not member.ready or member.terminating:
            value = (self.out.cluster["metadata"].get("annotations") or {}).get(SWITCHOVER_ANNOTATION)
            message = f"{SWITCHOVER_ANNOTATION}={value}: pod {target} is not a ready replica of this cluster"
            self._problem("SwitchoverRefused", message)
            return
        message = f"switchover from {primary} to {target}, asked for by {SWITCHOVER_ANNOTATION}"
        record = self._start("Switchover", primary, target, message)
        self.w.event(self.out.cluster, "Normal", "SwitchoverStarted", message)
        self.drive(record)

    def _start(self, reason: str, old: str, new: str, message: str) -> Obj:
        record = {
            "reason": reason,
            "phase": "Fencing",
            "from": old,
            "to": new,
            "startedAt": format_time(self.w.now()),
            "message": message,
        }
        self._record({"failover": record})
        log.warning("moving the primary", extra={"from": old, "to": new, "reason": reason})
        return record

    # -- driving --------------------------------------------------------------------------------

    def drive(self, record: Obj) -> None:
        record = dict(record)
        self.moving = record["phase"] in ("Fencing", "Promoting")
        if record["phase"] == "Fencing":
            if not self._fence(record):
                return
            record["phase"] = "Promoting"
            self._record({"failover": record})
        if record["phase"] == "Promoting":
            if not self._promote(record):
                return
            record["phase"] = "Repointing"
            claim = self.view.claims.get(record["to"])
            self._record(
                {
                    "failover": record,
                    "primary": record["to"],
                    "primaryClaimUID": claim,
                    "primaryLostSince": None,
                }
            )
            self.out.roles.update(primary=record["to"], primaryClaimUID=claim, primaryLostSince=None)
            self.moving = False
        if record["phase"] == "Repointing":
            if not self._repoint(record):
                return
            record.update(phase="Completed", completedAt=format_time(self.w.now()))
            self._record({"failover": record})
            done = "FailedOver" if record["reason"] == "PrimaryLost" else "SwitchedOver"
            kind = "Warning" if record["reason"] == "PrimaryLost" else "Normal"
            self.w.event(
                self.out.cluster,
                kind,
                done,
                f"{record['to']} is the primary ({record['from']} was): "
                f"{record.get('message') or record['reason']}",
            )
            forget_switchover(self.w, self.out)

    def _fence(self, record: Obj) -> bool:
        old = record["from"]
        pod = self.view.pods.get(old)
        if pod is not None and (pod["metadata"].get("labels") or {}).get(ROLE_LABEL) != REPLICA:
            # Out of the Service first: from here on no new client reaches it.
            self.w.client.patch_merge(
                Pod, self.view.namespace, old, {"metadata": {"labels": {ROLE_LABEL: REPLICA}}}
            )
        member = self.view.member(old)
        if member is not None and member.running:
            try:
                result = run(self.executor, self.view, old, actions.fence(self.engine))
            except ExecError as exc:
                self._problem(
                    "FenceFailed", f"cannot fence pod {old}: {exc}; no replica is promoted until it is"
                )
                return False
            if result.code != 0:
                said = (result.stderr or result.stdout).strip()[-300:]
                self._problem(
                    "FenceFailed", f"cannot fence pod {old}: {said}; no replica is promoted until it is"
                )
                return False
        if record["reason"] == "Switchover":
            seen = self.observe(old) if member is not None and member.running else None
            if seen is None:
                self._problem("SwitchoverWaiting", f"cannot read what pod {old} wrote; retrying")
                return False
            record["position"] = seen.executed.text
        return True

    def _claim(self, pod: str) -> bool:
        try:
            result = run(self.executor, self.view, pod, actions.claim_datadir())
        except ExecError as exc:
            self._problem("PromotionWaiting", f"promoting pod {pod}: {exc}; retrying")
            return False
        if result.code != 0:
            message = f"promoting pod {pod}: its fresh marker not removed ({result.stderr.strip()[-200:]})"
            self._problem("PromotionWaiting", f"{message}; retrying")
        return result.code == 0

    def _promote(self, record: Obj) -> bool:
        new = record["to"]
        seen = self.observe(new)
        if seen is None:
            self._problem("PromotionWaiting", f"cannot reach pod {new} to promote it; retrying")
            return False
        if not seen.replicating:
            # Ended already (this step ran before, up to its end), or never replicating: its datadir is
            # the cluster's now, fresh or not (chosen for what it holds).
            return not seen.fresh or self._claim(new)
        if record["reason"] == "Switchover":
            script = actions.wait_applied(self.engine, record.get("position") or "", stop_receiving=False)
        else:
            script = actions.wait_applied(self.engine, seen.relay, stop_receiving=True)
        for step in (script, actions.end_replication(self.engine)):
            try:
                result = run(self.executor, self.view, new, step, timeout=actions.WAIT_APPLIED_SECONDS + 15)
            except ExecError as exc:
                self._problem("PromotionWaiting", f"promoting pod {new}: {exc}; retrying")
                return False
            if result.code != 0:
                said = (result.stderr or result.stdout).strip()[-300:]
                self._problem("PromotionWaiting", f"promoting pod {new}: {said}; retrying")
                return False
        return True

    def _repoint(self, record: Obj) -> bool:
        new = record["to"]
        member = self.view.member(new)
        # Serving: ready, and writable (its sidecar does that once it sees the label; a Ready condition
        # may still be the one it had as a replica).
        seen = self.observe(new) if member is not None and member.ready else None
        if seen is None or seen.read_only:
            self.out.requeue_after = READY_POLL_SECONDS
            return False
        host = self.view.names.primary_host(self.view.namespace)
        for other in self.view.others(new):
            if not other.running:
                continue  # a server that starts anew is pointed by its sidecar
            try:
                result = run(self.executor, self.view, other.name, actions.repoint(self.engine, host))
            except ExecError as exc:
                log.warning("repoint failed", extra={"pod": other.name, "error": str(exc)})
                continue
            if result.code != 0:
                log.warning("repoint failed", extra={"pod": other.name, "error": result.stderr[-300:]})
        return True

    # -- helpers --------------------------------------------------------------------------------

    def observe(self, pod: str) -> actions.Observed | None:
        """`pod`'s server as `actions.observe` prints it; None when it cannot be asked."""
        try:
            result = run(self.executor, self.view, pod, actions.observe(self.engine))
            if result.code != 0:
                raise ExecError(f"observe in {pod}: exit {result.code}: {result.stderr.strip()[-300:]}")
            return actions.parse_observed(self.engine, result.stdout)
        except (ExecError, ValueError) as exc:
            log.warning("cannot observe", extra={"pod": pod, "error": str(exc)})
            return None

    def _record(self, fields: Obj) -> None:
        self.out.cluster = self.w.record(self.out.cluster, fields)

    def _problem(self, reason: str, message: str) -> None:
        self.out.problems.append(Problem(reason, message, fatal=False))
        self.out.requeue_after = min(self.out.requeue_after or RETRY_SECONDS, RETRY_SECONDS)


def forget_switchover(writer: Writer, out: Outcome) -> None:
    """Remove the annotation of a switchover that is done (or was to where the primary already is):
    left, it would move the primary back after a later failover."""
    meta = out.cluster["metadata"]
    if SWITCHOVER_ANNOTATION not in (meta.get("annotations") or {}):
        return
    patch = {
        "metadata": {
            "annotations": {SWITCHOVER_ANNOTATION: None},
            "resourceVersion": meta["resourceVersion"],
        }
    }
    out.cluster = writer.client.patch_merge(MySQLCluster, meta["namespace"], meta["name"], patch)
