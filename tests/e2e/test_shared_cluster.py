"""Many machines, one cluster: CI jobs (or developers) pointing their runs at one existing cluster.

Two pytest processes with their own ENVTEST_RUN_ID run the project's real configuration (CRDs, the
operator with its RBAC) at the same time against one `envtest up` plane. Both use the same process
label (`main`), so only the run label keeps one run's session sweep off the other's objects: the
first run to finish sweeps while the second still has a namespace, a cluster-scoped binding and a
leftover namespace (what a killed test leaves) live, and the second checks they survived."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envtest import binaries, eventually
from envtest.clusters import ExistingCluster
from envtest.plugin.sweep import RUN_LABEL

# An `envtest up` plane and its binaries: the local backend's tests.
pytestmark = pytest.mark.envtest_local

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("shared-a", "shared-b")
"""Run ids: `shared-a` outlives `shared-b` and checks nothing of its own was swept with it."""
CONVERGE_SECONDS = 120.0
"""An inner run's wait for its operator to act on a change (≈ 3 s on a loaded 2-core machine)."""
WAIT_SECONDS = 240.0
"""An inner run's wait for the other to start or to finish (≈ 15 s: its session start and a reconcile)."""
INNER_SECONDS = 60 + 2 * CONVERGE_SECONDS + 2 * WAIT_SECONDS
"""The outer limit: longer than an inner run's own waits together, so those fail first and say why."""

INNER_TEST = """
import json, os, pathlib, time

import pykube

from envtest import eventually
from envtest.plugin.sweep import RUN_LABEL, WORKER_LABEL

SYNC = pathlib.Path(os.environ["SHARED_SYNC"])
RUN, OTHER = os.environ["ENVTEST_RUN_ID"], os.environ["OTHER_RUN_ID"]
MYSQL = "apis/db.example.com/v1/namespaces/{}/mysqlclusters"


WAIT, CONVERGE = float(os.environ["SHARED_WAIT"]), float(os.environ["SHARED_CONVERGE"])


def wait_for(path):
    deadline = time.monotonic() + WAIT
    while True:
        # The outer test marks each run finished when its process ends, whatever its outcome;
        # read before `path`, so a run that wrote it and then ended is not taken for a failed one.
        ended = (SYNC / f"{OTHER}.finished").exists()
        if path.exists():
            return
        assert not ended, f"{OTHER} ended before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.2)


def live(cluster, path):
    resp = cluster.session.get(f"{cluster.server}/{path}", timeout=10)
    assert resp.status_code == 200, f"{path}: {resp.status_code} (swept by the other run?)"
    assert "deletionTimestamp" not in resp.json()["metadata"], f"{path} is being deleted"
    return resp.json()


def statefulset_replicas(cluster, namespace, want):
    sts = live(cluster, f"apis/apps/v1/namespaces/{namespace}/statefulsets/db-mysql")
    assert sts["spec"]["replicas"] == want


def test_converges_beside_the_other_run(operator, namespace, cluster, kube):
    labels = pykube.Namespace.objects(kube).get(name=namespace).labels
    (SYNC / f"{RUN}.labels").write_text(json.dumps(labels))
    # What a test killed mid-way leaves: only this run's sweep may remove it.
    own = {RUN_LABEL: labels[RUN_LABEL], WORKER_LABEL: labels[WORKER_LABEL]}
    pykube.Namespace(kube, {"metadata": {"name": f"leftover-{RUN}", "labels": own}}).create()
    cr = {"apiVersion": "db.example.com/v1", "kind": "MySQLCluster", "metadata": {"name": "db"},
          "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}
    resp = cluster.session.post(f"{cluster.server}/{MYSQL.format(namespace)}", json=cr, timeout=10)
    assert resp.status_code == 201, resp.text
    eventually(lambda: statefulset_replicas(cluster, namespace, 1), timeout=CONVERGE)

    (SYNC / f"{RUN}.started").write_text("")
    wait_for(SYNC / f"{OTHER}.started")  # both operators are up on the one cluster now
    if RUN == "shared-b":
        return
    deadline = time.monotonic() + WAIT
    while not (SYNC / f"{OTHER}.finished").exists():  # its session end, and with it its sweep, is over
        assert time.monotonic() < deadline, f"{OTHER} still running"
        time.sleep(0.2)
    live(cluster, f"api/v1/namespaces/{namespace}")
    live(cluster, f"api/v1/namespaces/leftover-{RUN}")
    bindings = cluster.session.get(
        f"{cluster.server}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        params={"labelSelector": f"{RUN_LABEL}={RUN}"}, timeout=10,
    ).json()["items"]
    assert bindings, "this run's operator binding was swept"
    # And the operator still has every right it needs: a change still reaches the StatefulSet.
    resp = cluster.session.patch(
        f"{cluster.server}/{MYSQL.format(namespace)}/db", json={"spec": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"}, timeout=10,
    )
    assert resp.status_code == 200, resp.text
    eventually(lambda: statefulset_replicas(cluster, namespace, 2), timeout=CONVERGE)
"""


@pytest.fixture
def shared_plane(tmp_path: Path, timeouts: Any) -> Iterator[tuple[Path, dict[str, str]]]:
    """An `envtest up` plane (the namespace controller included, so deleted namespaces really go),
    with its state in a temporary XDG dir; stopped afterwards."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env["KUBEBUILDER_ASSETS"] = str(binaries.cache_dir())  # binaries from the real cache
    envtest = [sys.executable, "-m", "envtest.cli"]
    components = "etcd,kube-apiserver,kube-controller-manager"
    up = subprocess.run(
        [*envtest, "up", "--name", "shared", "--components", components, "--crd", str(ROOT / "api" / "crd")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeouts(300),
    )
    assert up.returncode == 0, up.stderr
    try:
        yield Path(up.stdout.strip().split("=", 1)[1].strip("'")), env
    finally:
        down = subprocess.run(
            [*envtest, "down", "--name", "shared"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeouts(120),
        )
        assert down.returncode == 0, down.stderr


def test_two_runs_share_one_cluster_and_each_sweeps_only_its_own(
    shared_plane: tuple[Path, dict[str, str]], tmp_path: Path, timeouts: Any
) -> None:
    kubeconfig, env = shared_plane
    project = tmp_path / "project"
    sync = project / "sync"
    sync.mkdir(parents=True)
    (project / "test_shared_run.py").write_text(INNER_TEST)
    procs = {}
    for run, other in (RUNS, RUNS[::-1]):
        cmd = [
            sys.executable, "-m", "pytest", "test_shared_run.py", "-p", "no:cacheprovider",
            # The project's own configuration (CRDs, operator, RBAC; paths relative to the root).
            "-c", str(ROOT / "pyproject.toml"),
            "--envtest-backend=existing", f"--envtest-kubeconfig={kubeconfig}",
            f"--basetemp={tmp_path / run}", f"--envtest-artifacts-dir={tmp_path / run / 'artifacts'}",
            # Concurrent runs would each re-point the CRDs' conversion at their own endpoint: one
            # run's endpoint ends with it (see docs/sharding.md, many machines, one cluster).
            "-o", "envtest_conversion_webhook=",
        ]  # fmt: skip
        run_env = {**env, "ENVTEST_RUN_ID": run, "OTHER_RUN_ID": other, "SHARED_SYNC": str(sync)}
        run_env["SHARED_WAIT"] = str(timeouts(WAIT_SECONDS))
        run_env["SHARED_CONVERGE"] = str(timeouts(CONVERGE_SECONDS))
        log = (tmp_path / f"{run}.log").open("w")
        procs[run] = subprocess.Popen(cmd, cwd=project, env=run_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Each run is marked finished as it ends: shared-a then checks what shared-b's sweep left,
        # and a run that failed early ends the other's wait for it at once.
        deadline = time.monotonic() + timeouts(INNER_SECONDS)
        running = set(RUNS)
        while running and time.monotonic() < deadline:
            for run in [r for r in running if procs[r].poll() is not None]:
                (sync / f"{run}.finished").write_text("")
                running.discard(run)
            time.sleep(0.2)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    logs = {run: (tmp_path / f"{run}.log").read_text() for run in RUNS}
    outcome = "\n\n".join(f"{run} (exit {procs[run].returncode}):\n{logs[run][-4000:]}" for run in RUNS)
    assert not running, (
        f"{sorted(running)} killed, still running after {timeouts(INNER_SECONDS):.0f}s\n{outcome}"
    )
    assert all(procs[run].returncode == 0 for run in RUNS), outcome
    for run in RUNS:
        assert "1 passed" in logs[run], logs[run][-2000:]
        labels = json.loads((sync / f"{run}.labels").read_text())
        assert labels[RUN_LABEL] == run, f"{run}'s objects are labelled {labels}"

    # Nothing of either run is left: namespaces (with their objects) and cluster-scoped RBAC.
    cluster = ExistingCluster(kubeconfig)
    session = cluster.session
    selector = f"{RUN_LABEL} in ({','.join(RUNS)})"

    def nothing_left() -> None:
        left = {}
        for path in (
            "api/v1/namespaces",
            "apis/rbac.authorization.k8s.io/v1/clusterroles",
            "apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        ):
            resp = session.get(
                f"{cluster.server}/{path}", params={"labelSelector": selector}, timeout=timeouts(10)
            )
            resp.raise_for_status()
            names = [item["metadata"]["name"] for item in resp.json()["items"]]
            if names:
                left[path] = names
        assert left == {}, f"left on the cluster: {left}"

    try:
        eventually(nothing_left, timeout=timeouts(120))
    finally:
        cluster.close()
