"""Tests on a real database server (kind): the E2E engine, SQL and shell in its pods through the
apiserver's exec (as `kubectl exec`), and waits on pod readiness.

The engine is E2E_DATABASE (`engine:version`): by default MariaDB 10.11, the offline image built from
Debian's packages (`tests/kit/engineimage.py`, loaded by `make kind-standins`); GitHub's kind job
sets `mysql:8.4`, the published image.
"""

from __future__ import annotations

import os
from typing import Any

import kubernetes
from kubernetes.stream import stream
from mysqlkit import MySQLClusters, Timeouts

from envtest import eventually

ENGINE, _, VERSION = os.environ.get("E2E_DATABASE", "mariadb:10.11").partition(":")
CLIENT = {"mysql": "mysql", "mariadb": "mariadb"}[ENGINE]
STOP, START = ("STOP SLAVE", "START SLAVE") if ENGINE == "mariadb" else ("STOP REPLICA", "START REPLICA")


def manifest(name: str, replicas: int, *, storage: str = "1Gi", **spec: Any) -> dict[str, Any]:
    """A cluster of the E2E engine; `spec` adds fields (backup, restore)."""
    return {
        "apiVersion": "db.example.com/v1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": {
            "engine": ENGINE,
            "version": VERSION,
            "replicas": replicas,
            "storage": {"size": storage},
            **spec,
        },
    }


class Sql:
    """SQL in a database pod, through the apiserver's exec (as `kubectl exec` does)."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str, timeouts: Timeouts) -> None:
        self.core, self.namespace, self.timeouts = core, namespace, timeouts

    def run(
        self, pod: str, statement: str, *, user: str = "root", password: str | None = None
    ) -> tuple[int, str]:
        """(exit code, stdout+stderr) of the engine's client running `statement` in `pod`."""
        auth = f'MYSQL_PWD="{password}"' if password else 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD"'
        return self.exec(pod, f'{auth} {CLIENT} -h 127.0.0.1 -u {user} -N -e "{statement}" 2>&1')

    def exec(self, pod: str, script: str) -> tuple[int, str]:
        """(exit code, stdout+stderr) of `sh -c script` in `pod`'s server container."""
        resp = stream(
            self.core.connect_get_namespaced_pod_exec,
            pod,
            self.namespace,
            container="mysql",
            command=["sh", "-c", script],
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
            _preload_content=False,
        )
        resp.run_forever(timeout=self.timeouts(60))
        code = resp.returncode  # first: read_all() also drops the error channel that carries it
        out = resp.read_all()
        resp.close()
        return code, out.strip()

    def ok(self, pod: str, statement: str, **kw: Any) -> str:
        code, out = self.run(pod, statement, **kw)
        assert code == 0, f"{pod}: {statement!r} exited {code}: {out}"
        return out

    def answers(self, pod: str, statement: str, expected: str) -> None:
        out = self.ok(pod, statement)
        assert out == expected, f"{pod}: {statement!r} gave {out!r}, not {expected!r}"

    def shell(self, pod: str, script: str) -> str:
        """stdout of `sh -c script` in `pod`, which must exit 0."""
        code, out = self.exec(pod, script)
        assert code == 0, f"{pod}: {script!r} exited {code}: {out}"
        return out


def pod_ready(mysql: MySQLClusters, pod: str) -> bool:
    obj = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod}")
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def readiness_is(mysql: MySQLClusters, pod: str, ready: bool) -> None:
    assert pod_ready(mysql, pod) == ready, f"{pod} ready is not {ready}"


def wait_all_ready(mysql: MySQLClusters, name: str, replicas: int, timeouts: Timeouts) -> None:
    def ready() -> None:
        cr = mysql.must_get(name)
        assert (cr.get("status") or {}).get("readyReplicas") == replicas, cr.get("status")

    eventually(ready, timeout=timeouts(240), description=f"{name}: {replicas} ready")


def kill(mysql: MySQLClusters, pod: str) -> str:
    """Delete `pod` with no grace, as a node failure would; its uid."""
    path = f"api/v1/namespaces/{mysql.namespace}/pods/{pod}"
    uid: str = mysql.api.get(path)["metadata"]["uid"]
    assert mysql.api.delete(path, gracePeriodSeconds=0) == 200
    return uid


def wait_replaced_and_ready(mysql: MySQLClusters, pod: str, uid: str, timeouts: Timeouts) -> None:
    def replaced_and_ready() -> None:
        obj = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/pods/{pod}")
        assert obj is not None and obj["metadata"]["uid"] != uid, "not replaced yet"
        assert pod_ready(mysql, pod), f"{pod} not ready"

    eventually(replaced_and_ready, timeout=timeouts(240), description=f"{pod} replaced and ready")
