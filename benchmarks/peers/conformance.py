"""The checks every MySQLCluster implementation passes before its scale numbers count.

    result = run(session, server, namespace)   # the implementation runs, scoped to `namespace`
    result["passed"], result["checks"]         # {"converges": "pass", "owner_gc": "fail: …", …}

What the reference operator promises and the E2E suite proves, asked of any implementation alike:

* converges: two clusters (backups off, backups on) reach phase Running with readyReplicas 1 and
  observedGeneration current, Ready=True, the status written through the status subresource;
* finalizer_added: both carry `db.example.com/final-backup`;
* children_match_reference: every child (credentials Secret, headless and primary Services,
  StatefulSet; backup PVC and CronJob when backups are on) matches what the reference's own
  builders (`mysql_operator.controller.children.resources`) make for that cluster - names, labels,
  owner references, specs - and the Secret has no owner (it is retained with the data) and holds
  both the root and the replication password; the replication TLS Secret exists, owned by the
  cluster, with its three files; and pod 0 is labelled primary (soon after Running: an
  implementation may write Running first);
* owner_gc: deleting the backups-off cluster with propagationPolicy=Background removes it (its
  finalizer released) and the garbage collector its owned children; the Secret stays;
* final_backup: deleting the backups-on cluster stops its database, archives the data volume with
  the `<name>-final-backup` Job (annotated with the cluster's uid, succeeded), and only then lets the
  cluster go - watched: status.finalBackup went through Stopping, and the object the apiserver
  deleted already says Succeeded; the backup PVC stays, the CronJob is collected.

The checks stop at the first failure; later ones are reported "not run".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import requests

from envtest import ABSENT, assert_matches, condition, eventually
from mysql_operator.api.v1 import API_VERSION, FINALIZER
from mysql_operator.controller.children import backups, resources
from mysql_operator.controller.children.quantity import parse_quantity
from mysql_operator.database.replication import PRIMARY, ROLE_LABEL

Obj = dict[str, Any]
PATHS = {
    "mysqlclusters": f"/apis/{API_VERSION}",
    "statefulsets": "/apis/apps/v1",
    "cronjobs": "/apis/batch/v1",
    "jobs": "/apis/batch/v1",
    "secrets": "/api/v1",
    "services": "/api/v1",
    "persistentvolumeclaims": "/api/v1",
    "pods": "/api/v1",
}
CHECKS = ("converges", "finalizer_added", "children_match_reference", "owner_gc", "final_backup")
PLAIN, BACKUP = "check-plain", "check-backup"


class Api:
    """Plain REST on one namespace with the plane's admin session."""

    def __init__(self, session: requests.Session, server: str, namespace: str) -> None:
        self.session, self.server, self.namespace = session, server, namespace

    def url(self, resource: str, name: str = "") -> str:
        base = f"{self.server}{PATHS[resource]}/namespaces/{self.namespace}/{resource}"
        return f"{base}/{name}" if name else base

    def get(self, resource: str, name: str) -> Obj | None:
        response = self.session.get(self.url(resource, name), timeout=30)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def must(self, resource: str, name: str) -> Obj:
        obj = self.get(resource, name)
        assert obj is not None, f"{resource}/{name} not found"
        return obj

    def create(self, resource: str, body: Obj) -> Obj:
        response = self.session.post(self.url(resource), json=body, timeout=30)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def delete(self, resource: str, name: str, propagation: str = "Background") -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        response = self.session.delete(self.url(resource, name), json=body, timeout=30)
        if response.status_code != 404:
            response.raise_for_status()


def cluster(name: str, *, backup: bool) -> Obj:
    spec: Obj = {"replicas": 1, "storage": {"size": "1Gi"}}
    if backup:
        spec["backup"] = {"enabled": True}
    return {
        "apiVersion": API_VERSION,
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": spec,
    }


def run(session: requests.Session, server: str, namespace: str, timeout: float = 120.0) -> Obj:
    api = Api(session, server, namespace)
    live: dict[str, Obj] = {}

    def converges() -> None:
        for name, backup in ((PLAIN, False), (BACKUP, True)):
            api.create("mysqlclusters", cluster(name, backup=backup))
        for name in (PLAIN, BACKUP):
            live[name] = eventually(lambda n=name: running(api.must("mysqlclusters", n)), timeout=timeout)

    def finalizer_added() -> None:
        for name in (PLAIN, BACKUP):
            assert FINALIZER in (live[name]["metadata"].get("finalizers") or []), f"{name}: no {FINALIZER}"

    def children_match_reference() -> None:
        for name in (PLAIN, BACKUP):
            for resource, expected in expected_children(live[name]):
                assert_matches(api.must(resource, expected["metadata"]["name"]), expected)
            first = resources.Names(name).first_pod
            eventually(
                lambda p=first: assert_matches(
                    api.must("pods", p), {"metadata": {"labels": {ROLE_LABEL: PRIMARY}}}
                ),
                timeout=timeout,
                description=f"pod {first} labelled primary",
            )
        assert api.get("cronjobs", resources.Names(PLAIN).cronjob) is None, "a CronJob with backups off"

    def owner_gc() -> None:
        api.delete("mysqlclusters", PLAIN)
        eventually(
            lambda: gone(api, "mysqlclusters", PLAIN), timeout=timeout, description="finalizer released"
        )
        names = resources.Names(PLAIN)
        owned = [("services", names.service), ("services", names.primary_service)]
        owned.append(("statefulsets", names.statefulset))
        for resource, child in owned:
            eventually(
                lambda r=resource, c=child: gone(api, r, c), timeout=timeout, description=f"GC of {child}"
            )
        api.must("secrets", names.secret)  # retained: the kept data's password

    def final_backup() -> None:
        uid = live[BACKUP]["metadata"]["uid"]
        since = api.must("mysqlclusters", BACKUP)["metadata"]["resourceVersion"]
        api.delete("mysqlclusters", BACKUP)
        names = resources.Names(BACKUP)
        phases = final_backup_phases(api, BACKUP, since, timeout)
        # Each step recorded in order, and success recorded before the finalizer came off.
        assert phases[-1:] == ["Succeeded"], f"status.finalBackup.phase at deletion: {phases}"
        assert "Stopping" in phases, f"the database was not stopped first: {phases}"
        job = api.must("jobs", names.final_backup_job)
        assert_matches(job, {"metadata": {"annotations": {backups.CLUSTER_UID_ANNOTATION: uid}}})
        assert (job.get("status") or {}).get("succeeded"), f"Job {names.final_backup_job} has not succeeded"
        api.must("persistentvolumeclaims", names.backup_pvc)
        eventually(
            lambda: gone(api, "cronjobs", names.cronjob), timeout=timeout, description="GC of the CronJob"
        )

    steps: dict[str, Callable[[], None]] = {
        "converges": converges,
        "finalizer_added": finalizer_added,
        "children_match_reference": children_match_reference,
        "owner_gc": owner_gc,
        "final_backup": final_backup,
    }
    checks: dict[str, str] = dict.fromkeys(CHECKS, "not run")
    for name, step in steps.items():
        try:
            step()
        except Exception as exc:  # a check's failure is a result to record, whatever raised it
            checks[name] = f"fail: {' '.join(str(exc).split())[:1500]}"
            break
        checks[name] = "pass"
    return {"passed": all(v == "pass" for v in checks.values()), "checks": checks}


def running(obj: Obj) -> Obj:
    status = obj.get("status") or {}
    assert status.get("phase") == "Running", f"{obj['metadata']['name']}: phase {status.get('phase')}"
    assert status.get("readyReplicas") == 1, f"readyReplicas {status.get('readyReplicas')}"
    assert status.get("observedGeneration") == obj["metadata"]["generation"], "observedGeneration stale"
    ready = condition(obj, "Ready") or {}
    assert ready.get("status") == "True", f"Ready condition {ready}"
    fields = obj["metadata"].get("managedFields") or []
    assert any(f.get("subresource") == "status" for f in fields), "status not written through /status"
    return obj


def final_backup_phases(api: Api, name: str, since: str, timeout: float) -> list[str]:
    """status.finalBackup.phase of every state the cluster passed through from `since` until it was
    deleted, the deleted object's last; a watch, so no state is missed between two looks."""
    params = {"watch": "1", "resourceVersion": since, "fieldSelector": f"metadata.name={name}"}
    params["timeoutSeconds"] = str(int(timeout))
    phases: list[str] = []
    with api.session.get(
        api.url("mysqlclusters"), params=params, stream=True, timeout=timeout + 30
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            event = json.loads(line) if line else {}
            if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            phase = ((event["object"].get("status") or {}).get("finalBackup") or {}).get("phase")
            if phase and phase != (phases[-1:] or [None])[0]:
                phases.append(phase)
            if event["type"] == "DELETED":
                return phases
    raise AssertionError(f"{name} not deleted within {timeout:.0f}s; final backup phases so far: {phases}")


def gone(api: Api, resource: str, name: str) -> None:
    assert api.get(resource, name) is None, f"{resource}/{name} still there"


def same_quantity(expected: str) -> Callable[[str], bool]:
    """A matcher: the live quantity has `expected`'s value, whatever its spelling."""
    return lambda live: parse_quantity(live) == parse_quantity(expected)


def expected_children(cluster_obj: Obj) -> list[tuple[str, Obj]]:
    """What the reference builds for this live cluster, in the shape the apiserver returns it."""
    secret = resources.credentials_secret(cluster_obj)
    del secret["stringData"]  # returned as data, and a random password anyway
    secret["metadata"]["ownerReferences"] = ABSENT
    secret["data"] = {
        key: lambda v: len(v) > 8 for key in (resources.PASSWORD_KEY, resources.REPLICATION_PASSWORD_KEY)
    }
    tls = resources.tls_secret(cluster_obj)
    tls["data"] = {key: lambda v: len(v) > 100 for key in tls["data"]}  # keys of its own: not equal
    out = [
        ("secrets", secret),
        ("secrets", tls),
        ("services", resources.headless_service(cluster_obj)),
        ("services", resources.primary_service(cluster_obj)),
        ("statefulsets", resources.statefulset(cluster_obj)),
    ]
    if (cluster_obj["spec"].get("backup") or {}).get("enabled"):
        pvc = backups.backup_pvc(cluster_obj)
        # The apiserver stores a quantity in canonical form (the reference's `5120Mi` comes back `5Gi`).
        requests = pvc["spec"]["resources"]["requests"]
        requests["storage"] = same_quantity(requests["storage"])
        out.append(("persistentvolumeclaims", pvc))
        out.append(("cronjobs", backups.backup_cronjob(cluster_obj)))
    # No deepcopy here: it would copy ABSENT too, and the matcher knows the sentinel by identity.
    return out
