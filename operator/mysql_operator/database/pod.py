"""The database pod's spec: the `configure` init container, the server, the `replication` sidecar, and
the volumes they share. The scripts they run are `replication.py`'s.

Secrets reach the containers as environment variables from the credentials Secret (the image's
entrypoint reads the root password so) and, for the clients, as an option file `configure` writes onto a
memory-backed volume, 0600: never as a command-line argument, which the node shows in /proc to anyone.
"""

from __future__ import annotations

from typing import Any

from .engines import Engine
from .replication import (
    CONF_DIR,
    ENTRYPOINT,
    INITDB_DIR,
    PODINFO_DIR,
    REPLICATION_USER,
    RUN_DIR,
    TLS_SOURCE_DIR,
    configure_script,
    probe_script,
    replication_script,
    start_script,
)

Obj = dict[str, Any]

SIDECAR_RESOURCES = {"cpu": "20m", "memory": "32Mi"}
TERMINATION_GRACE_SECONDS = 120
"""mysqld shuts down cleanly on SIGTERM; the default 30 s can SIGKILL it mid-flush, and the final
backup relies on a cleanly stopped datadir (MyISAM tables and DDL are not crash-safe)."""
PROBE_PERIOD_SECONDS = 5
"""A promoted primary enters its Service at the first probe after the sidecar made it writable."""

__all__ = [
    "ENTRYPOINT",
    "PROBE_PERIOD_SECONDS",
    "SIDECAR_RESOURCES",
    "TERMINATION_GRACE_SECONDS",
    "mysql_pod_spec",
]


def mysql_pod_spec(
    *,
    engine: Engine,
    image: str,
    password_env: Obj,
    replication_password_env: Obj,
    primary_host: str,
    resources: Obj,
    data_volume: str,
    data_dir: str,
    port: int,
    tls_secret: str,
    semi_sync: bool = False,
    identity_env: tuple[Obj, ...] = (),
    first_init: tuple[Obj, ...] = (),
    volumes: tuple[Obj, ...] = (),
) -> Obj:
    """The pod template's spec. `first_init` runs before `configure` (a restore fills the datadir
    first); `volumes` are theirs. `primary_host` is where replicas replicate from: the Service that
    selects whichever pod is labelled primary. `identity_env`: what `configure` checks kept data against
    and records in a new datadir (`identity.py`): SERVER_VERSION, CLUSTER_NAME, CLUSTER_UID, UPGRADE_FROM."""
    semi = {"name": "SEMI_SYNC", "value": "on" if semi_sync else "off"}
    data = {"name": data_volume, "mountPath": data_dir}
    conf = {"name": "conf", "mountPath": CONF_DIR}
    initdb = {"name": "initdb", "mountPath": INITDB_DIR}
    run = {"name": "run", "mountPath": RUN_DIR}
    podinfo = {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True}
    configure = {
        "name": "configure",
        "image": image,  # has sh; one image to pull per node
        "command": ["sh", "-c", configure_script(engine, data_dir)],
        "env": [password_env, semi, *identity_env],
        # A refusal (data of another engine or release) is one line: the operator shows it in status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            conf,
            initdb,
            data,
            run,
            {"name": "tls", "mountPath": TLS_SOURCE_DIR, "readOnly": True},
        ],
    }
    server = {
        "name": "mysql",
        "image": image,
        "command": ["sh", "-c", start_script(engine, data_dir), "sh", engine.server],
        "ports": [{"name": "mysql", "containerPort": port}],
        "env": [password_env],  # the image's one-time init sets root's password from it
        "resources": resources,
        # TCP on 127.0.0.1 answers only once the real server is up: the image's init phase runs a
        # temporary server with networking off.
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", probe_script(engine)]},
            "initialDelaySeconds": 5,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": 5,
        },
        "volumeMounts": [data, conf, initdb, run, podinfo],
    }
    sidecar = {
        "name": "replication",
        "image": image,
        "command": ["sh", "-c", replication_script(engine, data_dir=data_dir)],
        # conf: for the wiped flag; data: for the datadir's fresh marker (replication.FRESH_MARKER)
        "volumeMounts": [conf, run, podinfo, data],
        "env": [
            replication_password_env,
            {"name": "REPLICATION_USER", "value": REPLICATION_USER},
            {"name": "PRIMARY_HOST", "value": primary_host},
            semi,
        ],
        # Requests equal limits, as the server's: the sidecar never makes the pod less than Guaranteed.
        "resources": {"requests": SIDECAR_RESOURCES, "limits": SIDECAR_RESOURCES},
    }
    labels_file = {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}
    annotations_file = {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
    return {
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "initContainers": [*first_init, configure],
        "containers": [server, sidecar],
        "volumes": [
            {"name": "conf", "emptyDir": {}},
            {"name": "initdb", "emptyDir": {}},
            # Memory-backed: the option file with root's password never reaches a disk.
            {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
            {"name": "podinfo", "downwardAPI": {"items": [labels_file, annotations_file]}},
            {"name": "tls", "secret": {"secretName": tls_secret, "defaultMode": 0o400}},
            *volumes,
        ],
    }
