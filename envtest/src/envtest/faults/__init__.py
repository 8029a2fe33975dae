"""Fault injection between an operator and kube-apiserver: a TLS reverse proxy (`proxy`), the rules
that decide what happens to each request (`rules`), and the byte relay under both (`relay`)."""

from envtest.faults.proxy import Exchange, FaultProxy
from envtest.faults.rules import (
    FORWARD,
    WRITE_VERBS,
    CutWatch,
    DropReply,
    ExpireWatch,
    Forward,
    Precondition,
    Respond,
    Rule,
    already_exists,
    conflict,
    internal_error,
    invalid,
    no_precondition,
    not_found,
    stale_precondition,
    too_many_requests,
    unavailable,
)

__all__ = [
    "FORWARD",
    "WRITE_VERBS",
    "CutWatch",
    "DropReply",
    "Exchange",
    "ExpireWatch",
    "FaultProxy",
    "Forward",
    "Precondition",
    "Respond",
    "Rule",
    "already_exists",
    "conflict",
    "internal_error",
    "invalid",
    "no_precondition",
    "not_found",
    "stale_precondition",
    "too_many_requests",
    "unavailable",
]
