"""What keeps a cluster from its spec (`Problem`), and the error that carries one out of a child's write.

A `Problem` becomes the Degraded condition (and, when fatal, phase Failed) in `controller.status`;
`ChildBlocked` is raised where a child may not be written (the apiserver refused it, or someone else
controls it) and turned into a Problem by the writer.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """Something that keeps the cluster from its spec, for conditions and phase."""

    reason: str
    """CamelCase, e.g. InvalidSchedule, ChildRejected, FinalBackupFailed."""
    message: str
    """Names the field or object at fault; must not change from pass to pass."""
    fatal: bool = True
    """Fatal: we cannot act on the spec (phase Failed). Otherwise the cluster is only Degraded."""


class ChildBlocked(Exception):
    """A child we may not write: rejected by the apiserver (422) or controlled by someone else."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem
