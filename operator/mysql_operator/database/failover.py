"""When the primary counts as lost, and which replica takes its place: decisions only, no I/O, no clock of
their own (the caller passes `now`), so every rule is tested by stepping time.

The primary is **lost** when its pod is gone or being deleted, its server is not ready, or its data
volume is not the one it was promoted on (a claim deleted and made anew is an empty datadir over a
cluster that has run: never served as primary), or, asked by the caller when it is not ready, its datadir
is fresh (its volume emptied in place). It is **suspect** when it is ready but every replica is
not: then the replicas are asked (by the caller) whether they lost their connection to it, as a network
that isolates the primary's pod, not its kubelet, would show.

A lost primary is replaced once it has been lost for `afterSeconds` (a restart or a rolling update of
the primary is usually back sooner), at once when its data volume was replaced (nothing to wait for).

The **candidate** is the replica whose GTIDs (received, applied or not) cover every other's; ties go to
the lowest ordinal. None is promoted when their positions diverged (promoting one would silently drop
what only another holds), nor one without any GTID while another has some.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from .actions import Observed
from .gtid import Position, most_advanced

State = Literal["available", "lost", "suspect"]

DEFAULT_AFTER_SECONDS = 30
"""spec.failover.afterSeconds's default: a primary restarting in place (a crash, a rolling update on a
warm node) is usually ready again well within it; a lost node or volume is not."""


@dataclass(frozen=True)
class Member:
    """One database pod as the apiserver shows it."""

    name: str
    ready: bool = False
    terminating: bool = False
    running: bool = False
    """Its server container is running (not waiting to start, not terminated)."""
    claim_uid: str | None = None
    """The uid of its data PersistentVolumeClaim, if it has one."""


@dataclass(frozen=True)
class Assessment:
    state: State
    reason: str = ""
    """CamelCase: PrimaryGone, PrimaryTerminating, PrimaryNotReady, PrimaryDataReplaced, ReplicasCutOff."""
    message: str = ""
    immediate: bool = False
    """Replace it now, without waiting for afterSeconds."""


NOT_READY = "PrimaryNotReady"
PRIMARY_DATA_REPLACED = "PrimaryDataReplaced"
"""A primary on a data volume made anew or emptied in place (or never recorded, before a first
primary): never served."""


def assess(
    primary: Member | None, name: str, replicas: list[Member], promoted_claim: str | None
) -> Assessment:
    """How the primary `name` (its pod `primary`, None when there is none) is doing."""
    if primary is None:
        return Assessment("lost", "PrimaryGone", f"pod {name} is gone")
    if promoted_claim and primary.claim_uid and primary.claim_uid != promoted_claim:
        message = (
            f"pod {name}'s data volume is not the one it was promoted on (claim uid {primary.claim_uid}, "
            f"promoted on {promoted_claim}): an empty datadir is never served as primary"
        )
        return Assessment("lost", PRIMARY_DATA_REPLACED, message, immediate=True)
    if primary.terminating:
        return Assessment("lost", "PrimaryTerminating", f"pod {name} is being deleted")
    if not primary.ready:
        return Assessment("lost", NOT_READY, f"pod {name} is not ready")
    if replicas and not any(r.ready for r in replicas) and all(r.running for r in replicas):
        message = f"pod {name} is ready, every replica is not: are they cut off from it?"
        return Assessment("suspect", "ReplicasCutOff", message)
    return Assessment("available")


def due(since: datetime | None, now: datetime, after_seconds: int, *, immediate: bool = False) -> datetime:
    """When a primary lost since `since` (None: just now) is to be replaced."""
    start = since or now
    return start if immediate else start + timedelta(seconds=after_seconds)


def cut_off(observed: dict[str, Observed]) -> str | None:
    """A message when every replica observed is replicating but its IO thread is not connected (the
    evidence for a primary its replicas cannot reach); None otherwise."""
    if not observed or not all(o.replicating and o.io_running != "Yes" for o in observed.values()):
        return None
    errors = sorted({o.io_error or f"IO thread {o.io_running or 'stopped'}" for o in observed.values()})
    return f"every replica lost its connection to the primary ({'; '.join(errors)})"


@dataclass(frozen=True)
class Choice:
    candidate: str | None
    reason: str = ""
    """When there is none: NoCandidate, ReplicasDiverged, NoCandidateWithData."""
    message: str = ""


def choose(observed: dict[str, Observed]) -> Choice:
    """The replica to promote among those observed (those that answered)."""
    if not observed:
        return Choice(None, "NoCandidate", "no replica answered: none can be promoted")
    positions: dict[str, Position] = {name: o.received for name, o in observed.items()}
    if all(p.empty for p in positions.values()):
        # Equal, but with nothing in them: a cluster that has run had data on its primary.
        return Choice(
            None,
            "NoCandidateWithData",
            f"no replica holds any transaction ({', '.join(sorted(positions))}): promoting one would "
            "serve an empty database; restore the primary's volume or the cluster from a backup",
        )
    ranking = most_advanced({n: p for n, p in positions.items() if not p.empty})
    if ranking.best is None:
        held = "; ".join(f"{n}: {p.text or 'none'}" for n, p in sorted(positions.items()))
        return Choice(
            None,
            "ReplicasDiverged",
            f"no replica holds every transaction the others hold ({held}); promoting any would drop "
            "what only another has: promote one by hand (the switchover annotation) after deciding",
        )
    return Choice(ranking.best)
