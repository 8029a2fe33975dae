"""etcd's JSON gateway speaks keys and values in base64, and a prefix as a range: shared by the
plane's template (envtest.plane.template) and its reset (envtest.plane.reset)."""

from __future__ import annotations

import base64


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def prefix_end(prefix: bytes) -> bytes:
    """The `range_end` that makes a range every key with ``prefix``: the prefix with its last byte + 1."""
    return prefix[:-1] + bytes([prefix[-1] + 1])
