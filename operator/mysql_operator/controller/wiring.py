"""Wiring: the MySQLCluster controller on a runtime Manager.

Separate from `__main__` so tests and the envtest runner build the same manager in-process
(one per test namespace) without argument parsing, signal handlers or logging setup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pykube

from ..runtime.controller import Controller
from ..runtime.manager import Manager, ManagerOptions
from ..runtime.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from ..runtime.types import Key, make_key
from .cache import CachedClient
from .children.resources import INSTANCE_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from .client import KubeClient
from .events import EventRecorder
from .kinds import CronJob, MySQLCluster, PersistentVolumeClaim, Pod, Secret, Service, StatefulSet
from .members import PodExecutor
from .reconciler import MySQLClusterReconciler

CONTROLLER_NAME = "mysqlcluster"


def build_manager(
    api_factory: Callable[[], pykube.HTTPClient],
    *,
    namespace: str | None = None,
    namespaces: Sequence[str] = (),
    workers: int = 2,
    leader_elect: bool = False,
    leader_election_namespace: str | None = None,
    metrics_port: int | None = 0,
    health_port: int | None = 0,
    bind_address: str = "127.0.0.1",
    identity: str | None = None,
    exit_on_lost_lease: bool = False,
    queue_qps: float = DEFAULT_QPS,
    queue_burst: int = DEFAULT_BURST,
) -> Manager:
    """A manager running the MySQLCluster controller; call `.start()`, later `.stop()`.

    `namespace` (one) or `namespaces` (several) limit what it watches; neither: every namespace.

    `api_factory` must return a new HTTPClient per call: every informer gets its own session
    (one shared urllib3 pool runs dry under many watches).
    """
    if namespace is not None and namespaces:
        raise ValueError("build_manager: give namespace or namespaces, not both")
    options = ManagerOptions(
        namespaces=(namespace,) if namespace is not None else tuple(namespaces),
        metrics_port=metrics_port,
        health_port=health_port,
        bind_address=bind_address,
        leader_elect=leader_elect,
        leader_election_namespace=leader_election_namespace,
        identity=identity,
        exit_on_lost_lease=exit_on_lost_lease,
    )
    manager = Manager(api_factory, options)
    ours = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    for kind in (StatefulSet, Service, CronJob, Pod, PersistentVolumeClaim):
        # Only our children: a foreign object of a child's name is found by the create's 409. Pods and
        # claims (the StatefulSet's) carry our labels too: read for the roles, never listed anew.
        manager.configure_informer(kind, label_selector=ours)
    # Existence and labels are all we read of the credentials Secret (created once, never diffed);
    # its data never enters this process's caches.
    manager.configure_informer(Secret, label_selector=ours, metadata_only=True)
    recorder = EventRecorder(
        KubeClient(manager.new_client()), instance=manager.identity, registry=manager.registry
    )
    # Events leave on the recorder's own thread, never on a reconcile's; it runs leader or not.
    manager.add_runnable(recorder)
    client = CachedClient(KubeClient(manager.new_client()), manager.informer)
    # Exec (failover, switchover) through clients of its own: a stream holds its connection for a while.
    reconciler = MySQLClusterReconciler(client, recorder=recorder, executor=PodExecutor(manager.new_client))
    # The final-backup Job is not owned (it outlives the CR), so it is not watched: the reconciler
    # polls it with requeue_after while it runs. The Secret has no ownerReference (it is retained):
    # its events map to the cluster by label.
    controller = (
        Controller(CONTROLLER_NAME, reconciler, workers=workers, qps=queue_qps, burst=queue_burst)
        .for_(MySQLCluster)
        .owns(StatefulSet, Service, CronJob)
        .watches(Secret, cluster_of)
        # A pod's readiness or a claim's replacement is news for the roles (who is primary).
        .watches(Pod, cluster_of)
        .watches(PersistentVolumeClaim, cluster_of)
    )
    manager.add(controller)
    return manager


def cluster_of(obj: dict[str, Any]) -> list[Key]:
    """The cluster a labelled child belongs to (for children without an ownerReference)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or not labels.get(INSTANCE_LABEL):
        return []
    return [make_key(meta.get("namespace"), labels[INSTANCE_LABEL])]
