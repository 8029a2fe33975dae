"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Rules (one `try_acquire_or_renew()` step; the Manager calls it every retry_period):
* the lease is free when it is absent, has no holder, or expired. Expiry is judged on *our* clock
  only, as client-go does: a record (holder, renewTime, ...) counts as renewed at the local
  monotonic time we first saw it change, and expires leaseDurationSeconds after that. The holder's
  renewTime is another machine's wall clock; comparing it with ours lets clock skew make two leaders.
  A candidate that has just started has seen no change yet, so it waits one full lease duration;
* every write carries the resourceVersion we read, so of two candidates racing for a free lease one
  gets 409 and stays a follower;
* the leader's term is valid until `renew_deadline` after the moment it *sent* its last successful
  renewal (not when the reply came back: the server may have stored it at any point in between, and
  a standby's clock starts no earlier than that). renew_deadline < lease_duration, so the leader
  stops before any standby may start, however slow the requests (`holds_lease()` is what fences
  writes; see manager.py);
* `release()` clears holderIdentity, so a standby takes over at its next step instead of waiting
  out the lease;
* `problem()` says why this candidate cannot take part in the election: the Lease API refused it
  (401/403: a rotated token not picked up, a Role in another namespace) or has not answered for
  `unreachable_grace`. A conflict is an answer (we lost a race). The manager's /readyz reports it:
  a replica set of which no member can ever lead must not look healthy.

The Lease's namespace (`election_namespace`), in this order: what the caller configured
(--leader-election-namespace), $POD_NAMESPACE (the Downward API), the ServiceAccount's namespace
file a pod gets mounted; out of a cluster there is no good guess (the RBAC Role that grants the
Lease lives in one namespace), so it is an error that names the option, as in controller-runtime.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pykube
from pykube.objects import NamespacedAPIObject

from .client import CONFLICT, raise_for_status, status_code
from .clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class Lease(NamespacedAPIObject):
    version = "coordination.k8s.io/v1"
    endpoint = "leases"
    kind = "Lease"


SERVICEACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class LeaseConflict(Exception):
    """Someone else wrote the lease between our read and our write (HTTP 409)."""


class NoElectionNamespace(Exception):
    """Out of a cluster with no namespace configured for the Lease."""


def election_namespace(
    configured: str | None,
    *,
    environ: Mapping[str, str] | None = None,
    serviceaccount_file: Path | None = None,
) -> str:
    """The namespace of the Lease: `configured`, else $POD_NAMESPACE, else the pod's ServiceAccount
    namespace file; NoElectionNamespace out of a cluster (see the module doc for why no default)."""
    if configured:
        return configured
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE", "").strip():
        return env["POD_NAMESPACE"].strip()
    serviceaccount_file = serviceaccount_file or SERVICEACCOUNT_NAMESPACE
    try:
        namespace = serviceaccount_file.read_text().strip()
    except OSError:
        namespace = ""
    if namespace:
        return namespace
    raise NoElectionNamespace(
        "leader election namespace: not configured, $POD_NAMESPACE unset and no "
        f"{serviceaccount_file} (not in a pod); set leader_election_namespace "
        "(--leader-election-namespace) to the namespace whose Role grants the Lease"
    )


class LeaseStore(Protocol):
    """Reads and writes one Lease; writes raise LeaseConflict on a stale resourceVersion."""

    def get(self) -> dict[str, Any] | None: ...

    def create(self, lease: dict[str, Any]) -> dict[str, Any]: ...

    def update(self, lease: dict[str, Any]) -> dict[str, Any]: ...


class PykubeLeaseStore:
    def __init__(self, api: pykube.HTTPClient, namespace: str, name: str, timeout: float = 5.0) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.timeout = timeout
        """Seconds per request: well under renew_deadline, so a hung apiserver cannot stall renewal."""

    def _kwargs(self, name: str | None) -> dict[str, Any]:
        url = f"{Lease.endpoint}/{name}" if name else Lease.endpoint
        return {"version": Lease.version, "namespace": self.namespace, "url": url, "timeout": self.timeout}

    def get(self) -> dict[str, Any] | None:
        response = self.api.get(**self._kwargs(self.name))
        if response.status_code == 404:
            return None
        raise_for_status(response)
        return response.json()

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        return self._write("post", None, lease)

    def update(self, lease: dict[str, Any]) -> dict[str, Any]:
        # PUT, not pykube's update(): a full replace is checked against metadata.resourceVersion.
        return self._write("put", self.name, lease)

    def _write(self, method: str, name: str | None, lease: dict[str, Any]) -> dict[str, Any]:
        response = getattr(self.api, method)(**self._kwargs(name), data=json.dumps(lease))
        try:
            raise_for_status(response)
        except Exception as exc:
            if status_code(exc) == CONFLICT:
                raise LeaseConflict(str(exc)) from exc
            raise
        return response.json()


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def format_micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        namespace: str = "default",
        name: str = "leader",
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        on_change: Callable[[bool], None] | None = None,
        unreachable_grace: float | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > retry_period > 0, got "
                f"{lease_duration} / {renew_deadline} / {retry_period}"
            )
        self.store, self.identity = store, identity
        self.namespace, self.name = namespace, name
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock or SYSTEM_CLOCK
        self.on_change = on_change
        """Called with the new value whenever is_leader flips, on the thread that flipped it."""
        self._is_leader = False
        # Monotonic time at which our last successful write was *sent*, while leading.
        self._last_renew: float | None = None
        self._observed: tuple[Any, ...] | None = None  # the last lease record (spec) we read
        self._observed_at = 0.0  # our monotonic time when that record was first seen
        self.unreachable_grace = lease_duration if unreachable_grace is None else unreachable_grace
        """Seconds of failed steps in a row (other than 401/403) before problem() reports them: one
        lease duration, the time in which a healthy standby would have noticed a dead leader."""
        self._failing_since: float | None = None  # monotonic time of the first failed step in a row
        self._failure = ""  # what the last failed step said
        self._denied = False  # the last failed step was a 401/403

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @is_leader.setter
    def is_leader(self, value: bool) -> None:
        changed, self._is_leader = value != self._is_leader, value
        if changed and self.on_change is not None:
            self.on_change(value)

    def holds_lease(self) -> bool:
        """Leader, and within renew_deadline of the last renewal sent: safe to write right now."""
        if not self._is_leader or self._last_renew is None:
            return False
        return self._clock.monotonic() - self._last_renew < self.renew_deadline

    def try_acquire_or_renew(self) -> bool:
        """One election step; returns whether we lead afterwards. Never raises for API failures."""
        self._check_deadline()
        try:
            self._step()
        except Exception as exc:
            lost_race = isinstance(exc, LeaseConflict)
            log.log(logging.DEBUG if lost_race else logging.WARNING, "lease %s: %s", self.name, exc)
            if lost_race:
                self._reached()
            else:
                self._failed(exc)
        else:
            self._reached()
        # Again after the step: a renewal that succeeded too slowly has already run out.
        self._check_deadline()
        return self.is_leader

    def _reached(self) -> None:
        self._failing_since, self._failure, self._denied = None, "", False

    def _failed(self, exc: Exception) -> None:
        if self._failing_since is None:
            self._failing_since = self._clock.monotonic()
        code = status_code(exc)
        self._denied = code in (401, 403)
        self._failure = f"HTTP {code}: {exc}" if code is not None else f"{type(exc).__name__}: {exc}"

    def problem(self) -> str | None:
        """Why this candidate cannot lead nor stand by usefully right now, or None."""
        if self._failing_since is None:
            return None
        failing = self._clock.monotonic() - self._failing_since
        if self._denied:
            return f"lease {self.namespace}/{self.name} refused (for {failing:.0f}s): {self._failure}"
        if failing >= self.unreachable_grace:
            return f"lease {self.namespace}/{self.name} unreachable for {failing:.0f}s: {self._failure}"
        return None

    def denied_for(self) -> float:
        """Seconds the Lease API has answered 401/403 in a row; 0 when it does not."""
        if not self._denied or self._failing_since is None:
            return 0.0
        return self._clock.monotonic() - self._failing_since

    def _step(self) -> None:
        sent = self._clock.monotonic()  # before any request: the term is measured from here
        now = self._clock.time()
        lease = self.store.get()
        if lease is None:
            fresh = {"metadata": {"name": self.name, "namespace": self.namespace}}
            self.store.create(self._lease(fresh, now))
            self._won(sent)
            return
        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity and not self._expired(spec):
            if self.is_leader:
                log.warning("lease %s: taken over by %s", self.name, holder)
            self.is_leader = False
            return
        self.store.update(self._lease(lease, now))
        self._won(sent)

    def _observe(self, spec: dict[str, Any]) -> None:
        record = tuple(
            spec.get(k)
            for k in (
                "holderIdentity",
                "renewTime",
                "acquireTime",
                "leaseTransitions",
                "leaseDurationSeconds",
            )
        )
        if record != self._observed:
            # Read after the GET returned: the latest local time that can stand for "renewed".
            self._observed, self._observed_at = record, self._clock.monotonic()

    def _lease(self, lease: dict[str, Any], now: float) -> dict[str, Any]:
        spec = dict(lease.get("spec") or {})
        stamp = format_micro_time(now)
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = stamp
            if "resourceVersion" in lease["metadata"]:  # an existing lease changes hands
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.setdefault("leaseTransitions", 0)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(round(self.lease_duration), 1),
            renewTime=stamp,
        )
        # metadata (with resourceVersion) travels unchanged: that is what makes the write conditional.
        return {"apiVersion": Lease.version, "kind": Lease.kind, "metadata": lease["metadata"], "spec": spec}

    def _expired(self, spec: dict[str, Any]) -> bool:
        duration = spec.get("leaseDurationSeconds")
        if duration is None:
            return True
        return self._observed_at + float(duration) <= self._clock.monotonic()

    def _won(self, sent: float) -> None:
        if not self.is_leader:
            log.info("lease %s/%s: %s is now the leader", self.namespace, self.name, self.identity)
        self._last_renew = sent
        self.is_leader = True

    def _check_deadline(self) -> None:
        if not self.is_leader or self._last_renew is None:
            return
        if self._clock.monotonic() - self._last_renew > self.renew_deadline:
            log.warning(
                "lease %s: not renewed for %.1fs (renew_deadline); giving up leadership",
                self.name,
                self._clock.monotonic() - self._last_renew,
            )
            self.is_leader = False

    def next_wait(self) -> float:
        """Seconds until the next step: retry_period, or less when the renew deadline comes sooner."""
        if not self.is_leader or self._last_renew is None:
            return self.retry_period
        until_deadline = self._last_renew + self.renew_deadline - self._clock.monotonic()
        return max(min(self.retry_period, until_deadline + 0.01), 0.0)

    def release(self) -> bool:
        """Hand the lease back if we hold it; True if it was released."""
        if not self.is_leader:
            return False
        self.is_leader = False
        try:
            lease = self.store.get()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            spec = dict(lease["spec"])
            spec.pop("holderIdentity", None)
            spec.update(leaseDurationSeconds=1, renewTime=format_micro_time(self._clock.time()))
            self.store.update({**lease, "spec": spec})
        except Exception as exc:  # the lease then simply expires; stop must still finish
            log.warning("lease %s: release failed: %s", self.name, exc)
            return False
        log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        return True
