"""What one pass sees of a cluster's database pods, what it concludes, and how it reaches the pods.

`View` is read from the caches (pods, their data claims); `init_ended` reads how a pod's init container
ended (its termination message); `Outcome` is what the role pass hands back to the reconciler (the newest
cluster object, the role records for the status, problems, when to look again); an `Executor` runs the
scripts of `database.actions` in a pod, through the apiserver's exec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..database import actions
from ..database.failover import Member
from ..runtime.podexec import ExecError, ExecResult, exec_in_pod
from .children import resources
from .children.problems import Problem

Obj = dict[str, Any]

EXEC_TIMEOUT_SECONDS = 20.0
CONNECTION_ERRNOS = frozenset({"2003", "2005", "2013"})
"""A replica's Last_IO_Errno when the network, not the primary's answer, failed: cannot connect, unknown
host, lost connection. Only these count as being cut off from the primary."""
RETRY_SECONDS = 10.0


def init_ended(pod: Obj, container: str) -> Obj | None:
    """The last termination of init container `container` of `pod`: its current state if it ended,
    else its previous one (one crash-looping waits between tries); None if it never ended."""
    for init in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if init.get("name") == container:
            return (init.get("state") or {}).get("terminated") or (init.get("lastState") or {}).get(
                "terminated"
            )
    return None


class Executor(Protocol):
    """Runs a script in a database pod's `replication` container (the real one: `PodExecutor`)."""

    def run(self, namespace: str, pod: str, script: str, *, timeout: float) -> ExecResult: ...


class PodExecutor:
    """`Executor` over the apiserver's exec (`runtime.podexec`), as the operator's identity."""

    def __init__(self, api_factory: Callable[[], Any]) -> None:
        self._api_factory = api_factory

    def run(self, namespace: str, pod: str, script: str, *, timeout: float) -> ExecResult:
        command = ["sh", "-c", script]
        return exec_in_pod(self._api_factory(), namespace, pod, actions.CONTAINER, command, timeout=timeout)


@dataclass
class Outcome:
    cluster: Obj
    """The newest cluster object held (a step's record may have been written)."""
    roles: Obj = field(default_factory=dict)
    """Role fields for the status (`status.ROLE_FIELDS`, and `datadirOwner`; None drops one)."""
    problems: list[Problem] = field(default_factory=list)
    requeue_after: float | None = None


@dataclass(frozen=True)
class View:
    """What this pass sees of the cluster's database pods."""

    namespace: str
    names: resources.Names
    pods: dict[str, Obj]
    claims: dict[str, str | None]
    """pod name → uid of its data claim (None: no claim)."""

    def member(self, name: str) -> Member | None:
        pod = self.pods.get(name)
        if pod is None:
            return None
        status = pod.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        server = next((c for c in status.get("containerStatuses") or [] if c.get("name") == "mysql"), {})
        return Member(
            name=name,
            ready=conditions.get("Ready") == "True",
            terminating=bool(pod["metadata"].get("deletionTimestamp")),
            running="running" in (server.get("state") or {}),
            claim_uid=self.claims.get(name),
        )

    def others(self, primary: str) -> list[Member]:
        return [m for n in sorted(self.pods) if n != primary and (m := self.member(n)) is not None]


def run(
    executor: Executor | None, view: View, pod: str, script: str, *, timeout: float = EXEC_TIMEOUT_SECONDS
) -> ExecResult:
    if executor is None:
        raise ExecError(f"exec in {view.namespace}/{pod}: this operator runs without exec")
    return executor.run(view.namespace, pod, script, timeout=timeout)
