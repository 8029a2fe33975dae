"""Timeouts written for the local plane, stretched for the backend a suite runs on.

A wait that fits the local plane (kwok makes pods Ready at once, the apiserver is a local process)
times out on kind, where a kubelet pulls and starts real containers, and on a remote cluster. Write
every timeout for the local plane and pass it through the scale: `eventually(check,
timeout=timeouts(60))` — 60 s locally, 360 s on kind. ENVTEST_TIMEOUT_SCALE overrides the factor
(a slow machine, a busy CI runner).
"""

from __future__ import annotations

import os
from typing import Any

from envtest.errors import ConfigError

__all__ = ["SCALE", "Timeouts", "scaled"]

SCALE = {"local": 1.0, "existing": 4.0, "kind": 6.0}
"""Factor per backend; a backend not listed gets the `existing` one."""


class Timeouts:
    """`timeouts(seconds)` → seconds for this backend (the `timeouts` fixture is one of these)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        override = os.environ.get("ENVTEST_TIMEOUT_SCALE")
        if override:
            try:
                self.scale = float(override)
            except ValueError:
                raise ConfigError(f"ENVTEST_TIMEOUT_SCALE={override!r} is not a number") from None
            if self.scale <= 0:
                raise ConfigError(f"ENVTEST_TIMEOUT_SCALE={override!r} must be above 0")
        else:
            self.scale = SCALE.get(backend, SCALE["existing"])

    def __call__(self, seconds: float) -> float:
        return seconds * self.scale


def scaled(cluster: Any, seconds: float) -> float:
    """`seconds` written for the local plane, stretched for `cluster`'s backend (for helpers that are
    handed a cluster rather than the `timeouts` fixture)."""
    return Timeouts(cluster.backend)(seconds)
