"""Reference MySQLCluster operator (`db.example.com/v1`; v1beta1 and v1alpha1 served) on pykube-ng.

    from mysql_operator import build_manager
    manager = build_manager(lambda: pykube.HTTPClient(config), namespace="demo")
    manager.start(); ...; manager.stop()

`python -m mysql_operator run` runs it from the command line; `python -m mysql_operator.manifests`
regenerates the CRD, RBAC and webhook configurations from the models.

Packages, each importing only those below it (tests/unit/test_operator_layers.py):

    cli         the command line                           (imports controller, webhooks, api, ...)
    manifests   the generated deployment files              (webhooks' paths, api's models)
    webhooks    conversion, validation, defaulting          | controller  reconcile, finalizer, children
    api         the types of each served version, conversion
    database    engines, images, the pods' scripts, failover decisions
    runtime     the controller runtime: informers, workqueue, manager, leader election, webhook server
"""

from __future__ import annotations

from .api.v1 import FINALIZER, SKIP_FINAL_BACKUP_ANNOTATION, MySQLClusterSpec, MySQLClusterStatus
from .controller.reconciler import MySQLClusterReconciler
from .controller.wiring import build_manager

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
