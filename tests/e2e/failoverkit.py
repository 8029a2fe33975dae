"""What the failover E2E tests do to a real cluster on kind: a steady writer that records what was
acknowledged, and a pod whose network is cut while its kubelet (and so exec) keeps working.

The writer is a pod of the database image writing through `<name>-primary` as an application account,
one row per ~0.2 s: `ack N` in its log means the server answered OK to the INSERT of row N (semi-sync:
only once a replica had it). A statement that hangs is killed after 10 s and counts as not acknowledged.

A datadir emptied in place is emptied in the kind node too: its volume's directory (local-path: a host
path on the node) is emptied while its server is stopped (SIGSTOP, from outside its pid namespace), then
the server is killed (SIGKILL), so it writes nothing more into it and its container restarts on an empty
datadir, same pod, same claim.

The cut is made in the kind node (docker exec): the pod's network namespace is entered by its CRI pod's
pid (crictl) and its interface taken down, so nothing reaches the pod and the pod reaches nothing,
while the kubelet still runs its probes and execs (they do not go through the pod's network). Putting
it up again restores the routes it had.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import kubernetes
from dbkit import CLIENT, ENGINE, VERSION
from mysqlkit import MySQLClusters, Timeouts

from envtest import eventually
from mysql_operator.database import images

WRITER_SCRIPT = """i=0
while :; do
  i=$((i + 1))
  if timeout 10 {client} --connect-timeout=2 -h "$HOST" -u app -N \\
      -e "INSERT INTO shop.writes VALUES ($i)" 2>/tmp/err; then
    echo "ack $i"
  else
    echo "fail $i $(head -c 160 /tmp/err | tr '\\n' ' ')"
  fi
  sleep 0.2
done
"""
APP_PASSWORD = "app-pw-e2e"
"""The writer's account, made by the test; it reaches the client through the environment."""


def prepare(sql: Any, primary: str) -> None:
    """The table and the application account the writer uses (no write bypass: not root)."""
    sql.ok(
        primary,
        "CREATE DATABASE shop; CREATE TABLE shop.writes (id INT PRIMARY KEY);"
        f" CREATE USER 'app'@'%' IDENTIFIED BY '{APP_PASSWORD}'; GRANT ALL ON shop.* TO 'app'@'%';",
    )


class Writer:
    """The writer pod of one test (see the module docstring)."""

    def __init__(
        self, core: kubernetes.client.CoreV1Api, mysql: MySQLClusters, cluster: str, name: str
    ) -> None:
        self.core, self.mysql, self.name = core, mysql, name
        host = f"{cluster}-primary.{mysql.namespace}.svc"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "writer",
                        "image": images.current().database(ENGINE, VERSION),
                        "command": ["sh", "-c", WRITER_SCRIPT.format(client=CLIENT)],
                        "env": [
                            {"name": "HOST", "value": host},
                            {"name": "MYSQL_PWD", "value": APP_PASSWORD},
                        ],
                    }
                ],
            },
        }
        core.create_namespaced_pod(mysql.namespace, body)

    def log(self) -> list[str]:
        try:
            return str(self.core.read_namespaced_pod_log(self.name, self.mysql.namespace)).splitlines()
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status == 400:  # its container is still being created: it has written nothing
                return []
            raise

    def acknowledged(self) -> list[int]:
        return [int(line.split()[1]) for line in self.log() if line.startswith("ack ")]

    def wait_acks(self, more_than: int, timeouts: Timeouts, what: str) -> list[int]:
        def enough() -> list[int]:
            acked = self.acknowledged()
            assert len(acked) > more_than, f"{len(acked)} acknowledged; last lines: {self.log()[-3:]}"
            return acked

        return eventually(enough, timeout=timeouts(180), interval=1, description=what)

    def stop(self) -> list[int]:
        """Stop writing; the rows acknowledged (read first: a deleted pod has no log; a row acknowledged
        in between is left out, which only makes the check the callers make weaker, never wrong)."""
        acked = self.acknowledged()
        self.core.delete_namespaced_pod(self.name, self.mysql.namespace, grace_period_seconds=0)
        return acked


def present(sql: Any, pod: str) -> set[int]:
    out = sql.ok(pod, "SELECT id FROM shop.writes")
    return {int(x) for x in out.split()}


class Isolation:
    """Cut and restore one pod's network inside the kind node (see the module docstring)."""

    def __init__(self, mysql: MySQLClusters, pod: str) -> None:
        docker = shutil.which("docker")
        assert docker is not None, "the isolation needs docker to reach the kind node"
        (node,) = [n["metadata"]["name"] for n in mysql.api.items("api/v1/nodes")]
        self.node_sh = [docker, "exec", node, "sh", "-c"]
        self.timeouts = mysql.timeouts
        pod_ids = self._run(f"crictl pods --name '^{pod}$' --namespace '^{mysql.namespace}$' -q").split()
        assert len(pod_ids) == 1, f"{pod} in crictl pods: {pod_ids}"
        info = json.loads(self._run(f"crictl inspectp {pod_ids[0]}"))
        self.enter = f"nsenter -t {info['info']['pid']} -n"
        self.routes = [r for r in self._run(f"{self.enter} ip route show").splitlines() if r.strip()]

    def _run(self, script: str) -> str:
        done = subprocess.run(
            [*self.node_sh, script], capture_output=True, text=True, timeout=self.timeouts(30), check=False
        )
        assert done.returncode == 0, f"{script}: {done.stderr.strip()}"
        return done.stdout

    def cut(self) -> None:
        self._run(f"{self.enter} ip link set eth0 down")

    def restore(self) -> None:
        self._run(f"{self.enter} ip link set eth0 up")
        for route in self.routes:  # the link's own route first: the default one goes through it
            eventually(
                lambda route=route: self._run(f"{self.enter} ip route replace {route}"),
                timeout=self.timeouts(30),
                description=f"route {route} back",
            )


def empty_datadir_in_place(mysql: MySQLClusters, pod: str, timeouts: Timeouts) -> None:
    """Empty `pod`'s data volume under its running server and kill the server (see the module docstring)."""
    docker = shutil.which("docker")
    assert docker is not None, "emptying a volume in place needs docker to reach the kind node"
    (node_name,) = [n["metadata"]["name"] for n in mysql.api.items("api/v1/nodes")]
    claim = mysql.api.get(f"api/v1/namespaces/{mysql.namespace}/persistentvolumeclaims/data-{pod}")
    volume = mysql.api.get(f"api/v1/persistentvolumes/{claim['spec']['volumeName']}")["spec"]
    path = (volume.get("hostPath") or volume.get("local") or {}).get("path")
    assert path, f"data-{pod}'s volume has no host path on the node: {volume}"

    def node(script: str) -> str:
        done = subprocess.run(
            [docker, "exec", node_name, "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeouts(30),
            check=False,
        )
        assert done.returncode == 0, f"{script}: {done.stderr.strip()}"
        return done.stdout.strip()

    ready = f"crictl pods --name '^{pod}$' --namespace '^{mysql.namespace}$' --state ready -q"
    (pod_id,) = node(ready).split()
    (server,) = node(f"crictl ps --pod {pod_id} --name '^mysql$' -q").split()
    pid = json.loads(node(f"crictl inspect {server}"))["info"]["pid"]
    # Stopped first: the server writes nothing into the directory while it is emptied.
    node(f"kill -STOP {pid} && find '{path}' -mindepth 1 ! -name lost+found -delete && kill -9 {pid}")
