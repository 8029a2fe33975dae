"""The MySQLCluster API at `db.example.com/v1beta1`: the second version, still served, no longer stored.

v1beta1 is where the shape settled (`spec.storage: {size, storageClassName}`, `spec.backup.schedule:
{cron, timeZone}`, `spec.engine`); v1 declared that same shape stable. So this spoke has no models of
its own: its schema is the hub's (`v1`), generated from the same classes, and it cannot drift. Its
conversion (`conversion`) is the identity with `apiVersion` rewritten.

When v1 ever changes shape, this module gets its own models (as `v1alpha1` has) and
`conversion` a real pair of functions; nothing else needs to change.
"""

from __future__ import annotations

from .v1 import GROUP, MySQLClusterModel

VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

__all__ = ["API_VERSION", "VERSION", "MySQLClusterModel"]
