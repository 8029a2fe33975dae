"""Wiring: the MySQLCluster controller on a runtime Manager.

Separate from `__main__` so tests and the envtest runner build the same manager in-process
(one per test namespace) without argument parsing, signal handlers or logging setup.
"""

from __future__ import annotations

from collections.abc import Callable

import pykube

from .client import KubeClient
from .events import EventRecorder
from .kinds import CronJob, MySQLCluster, Secret, Service, StatefulSet
from .reconciler import MySQLClusterReconciler
from .runtime.controller import Controller
from .runtime.manager import Manager, ManagerOptions

CONTROLLER_NAME = "mysqlcluster"


def build_manager(
    api_factory: Callable[[], pykube.HTTPClient],
    *,
    namespace: str | None = None,
    workers: int = 2,
    leader_elect: bool = False,
    leader_election_namespace: str = "default",
    metrics_port: int | None = 0,
    health_port: int | None = 0,
    bind_address: str = "127.0.0.1",
    identity: str | None = None,
) -> Manager:
    """A manager running the MySQLCluster controller; call `.start()`, later `.stop()`.

    `api_factory` must return a new HTTPClient per call: every informer gets its own session
    (one shared urllib3 pool runs dry under many watches).
    """
    options = ManagerOptions(
        namespace=namespace,
        metrics_port=metrics_port,
        health_port=health_port,
        bind_address=bind_address,
        leader_elect=leader_elect,
        leader_election_namespace=leader_election_namespace,
        identity=identity,
    )
    manager = Manager(api_factory, options)
    recorder = EventRecorder(KubeClient(manager.new_client()), instance=manager.identity)
    reconciler = MySQLClusterReconciler(manager.new_client(), recorder=recorder)
    # The final-backup Job is not owned (it outlives the CR), so it is not watched: the reconciler
    # polls it with requeue_after while it runs.
    controller = (
        Controller(CONTROLLER_NAME, reconciler, workers=workers)
        .for_(MySQLCluster)
        .owns(StatefulSet, Service, Secret, CronJob)
    )
    manager.add(controller)
    return manager
