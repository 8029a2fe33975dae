"""Reference MySQLCluster operator (`db.example.com/v1`; v1beta1 and v1alpha1 served) on pykube-ng.

    from mysql_operator import build_manager
    manager = build_manager(lambda: pykube.HTTPClient(config), namespace="demo")
    manager.start(); ...; manager.stop()

`python -m mysql_operator run` runs it from the command line; `python -m mysql_operator.manifests`
regenerates the CRD and ClusterRole from the models.
"""

from __future__ import annotations

from .api import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION, MySQLClusterSpec, MySQLClusterStatus
from .app import build_manager
from .reconciler import MySQLClusterReconciler

__version__ = "0.2.0"
"""The distribution's version: its pyproject.toml reads it from here (the one place it is set)."""

__all__ = [
    "FINALIZER",
    "SKIP_FINAL_BACKUP_ANNOTATION",
    "MySQLClusterReconciler",
    "MySQLClusterSpec",
    "MySQLClusterStatus",
    "build_manager",
]
