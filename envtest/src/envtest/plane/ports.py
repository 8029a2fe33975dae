"""Free TCP ports that stay free across processes until a component binds them.

Asking the kernel for port 0 and closing the socket is the usual trick, but between closing it and the
component binding the port, another pytest-xdist worker asking the same way can be handed the very same
number. So every port we hand out is also *claimed* with a marker file under
``${XDG_CACHE_HOME:-~/.cache}/envtest/ports/<port>``, created with O_CREAT|O_EXCL so exactly one
process wins it. Claims are never released explicitly (the owner may be SIGKILLed); they expire after
``CLAIM_TTL`` seconds, long after any component has bound its port. A port still bound by a live
control plane is never reclaimed, because the kernel does not hand it out in the first place.

The claims are the user's own (a 0700 folder in their cache), not a world-writable folder in /tmp:
another user could fill or replace a shared one. Two users' runs on one host therefore only meet in
the kernel's own choice of free ports, which a bound port never re-enters.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from filelock import FileLock

from envtest.errors import EnvtestError

__all__ = ["CLAIM_TTL", "free_port"]

CLAIM_TTL = 600.0
"""Seconds a claim file reserves its port; older claims are stale and may be taken over."""

MAX_ATTEMPTS = 200
"""Ports to try before giving up; each failure means the kernel offered a port someone else claimed."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free now and claimed by no other process for CLAIM_TTL s."""
    claims = _claim_dir()
    for _ in range(MAX_ATTEMPTS):
        port = _kernel_port(host)
        if _claim(claims, port):
            return port
    raise EnvtestError(
        f"no free port on {host} after {MAX_ATTEMPTS} attempts; every port the kernel offered was "
        f"claimed in {claims} (delete that directory if no envtest run is active)"
    )


def _kernel_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _claim(claims: Path, port: int) -> bool:
    path = claims / str(port)
    if _create_exclusive(path):
        return True
    try:
        if time.time() - path.stat().st_mtime < CLAIM_TTL:
            return False
    except FileNotFoundError:
        pass  # a concurrent reclaim is in flight; settle it under the lock like any stale claim
    # Taking over a stale claim is check-then-act (stat, unlink, create), so it is serialized; without
    # the lock two processes could both judge it stale and the second unlink the first one's new claim.
    # Fresh claims never take the lock: O_EXCL alone is atomic, and an unlink only ever happens here.
    with FileLock(claims / ".reclaim.lock", mode=0o600, thread_local=False):
        try:
            if time.time() - path.stat().st_mtime < CLAIM_TTL:
                return False
            path.unlink()
        except FileNotFoundError:
            pass
        return _create_exclusive(path)


def _create_exclusive(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()}\n")  # who claimed it, for whoever debugs a port clash
    return True


def _claim_dir() -> Path:
    from envtest.binaries.cache import cache_root

    path = cache_root().parent / "ports"  # beside the binaries: ~/.cache/envtest/ports
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
