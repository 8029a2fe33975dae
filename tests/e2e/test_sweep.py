"""`envtest sweep` on a cluster that outlives its runs: a `-n 2` run killed with SIGKILL midway leaves
namespaces (one holding a custom resource with a finalizer nobody will process) and RBAC; the sweep
removes all of it, while a second run that was running beside it on the same cluster passes untouched.

Both runs are real pytest processes of their own (existing backend) against a plane of `envtest up`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from envtest import binaries, eventually, ownedtemp
from envtest.clusters import ExistingCluster
from envtest.runs import process_alive

pytestmark = pytest.mark.envtest_local  # local binaries for `envtest up`

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.sweep.envtest.io}
spec:
  group: sweep.envtest.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"""

# Each test makes a Widget with a finalizer in its namespace, says so, then waits for `go` to appear.
INNER = """
import os, pathlib, time

SIGNALS = pathlib.Path(os.environ["SWEEP_SIGNALS"])


def test_holds(namespace, cluster, i=0):
    url = f"{cluster.server}/apis/sweep.envtest.io/v1/namespaces/{namespace}/widgets"
    body = {"apiVersion": "sweep.envtest.io/v1", "kind": "Widget",
            "metadata": {"name": "w", "finalizers": ["sweep.envtest.io/never"]}}
    assert cluster.session.post(url, json=body, timeout=10).status_code == 201
    (SIGNALS / f"ready-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}").touch()
    deadline = time.monotonic() + 300
    while not (SIGNALS / "go").exists():
        assert time.monotonic() < deadline, "never told to go on"
        time.sleep(0.1)
    assert cluster.session.get(f"{url}/w", timeout=10).status_code == 200, "swept from under a live run"


def test_holds_too(namespace, cluster):
    test_holds(namespace, cluster)
"""


def _env(tmp_path: Path, run_id: str, kubeconfig: str, signals: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "ENVTEST_"))}
    env.update(
        KUBEBUILDER_ASSETS=str(binaries.cache_dir()),
        ENVTEST_KWOK_STAGES=str(binaries.kwok_stages_dir()),
        ENVTEST_RUN_ID=run_id,
        KUBECONFIG=kubeconfig,
        SWEEP_SIGNALS=str(signals),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    return env


def _owner_gone(folder: Path) -> bool:
    """Whether the process a private temporary folder names (envtest.ownedtemp) is gone."""
    owner = folder / ownedtemp.OWNER
    return owner.exists() and process_alive(owner.read_text()) is False


def _labelled(cluster: ExistingCluster, run_id: str | None, limit: float) -> list[str]:
    """`Kind/name` of every object still carrying the run's label (namespaces gone for good only)."""
    left = []
    for path, kind in (
        ("api/v1/namespaces", "Namespace"),
        ("apis/rbac.authorization.k8s.io/v1/clusterroles", "ClusterRole"),
        ("apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "ClusterRoleBinding"),
        ("apis/coordination.k8s.io/v1/namespaces/envtest-runs/leases", "Lease"),
    ):
        resp = cluster.session.get(
            f"{cluster.server}/{path}",
            params={"labelSelector": f"envtest.io/run={run_id}" if run_id else "envtest.io/run"},
            timeout=limit,
        )
        left += [f"{kind}/{i['metadata']['name']}" for i in resp.json().get("items", [])]
    return left


def _nothing_left(cluster: ExistingCluster, run_id: str | None, limit: float) -> None:
    left = _labelled(cluster, run_id, limit)
    assert left == [], f"run {run_id} left {left}"


def test_sweep_removes_a_killed_run_and_leaves_a_live_one(tmp_path: Path, timeouts: Any) -> None:
    cli = [sys.executable, "-m", "envtest.cli"]
    name = f"sweep-{os.getpid()}"
    base_env = _env(tmp_path, "unused", "", tmp_path)
    up = subprocess.run(
        [*cli, "up", "--name", name], capture_output=True, text=True, env=base_env, timeout=timeouts(600)
    )
    assert up.returncode == 0, up.stderr
    kubeconfig = next(
        ln.split("=", 1)[1].strip("'\"") for ln in up.stdout.splitlines() if "KUBECONFIG=" in ln
    )
    procs: list[subprocess.Popen[str]] = []
    try:
        cluster = ExistingCluster(Path(kubeconfig))
        project = tmp_path / "project"
        project.mkdir()
        (project / "crd.yaml").write_text(CRD)
        (project / "pytest.ini").write_text("[pytest]\nenvtest_backend = existing\nenvtest_crds = crd.yaml\n")
        (project / "test_hold.py").write_text(textwrap.dedent(INNER))
        scratch = tmp_path / "tmp"  # the runs' temporary directory (TMPDIR), to see what they leave
        scratch.mkdir()
        runs = {}
        for run_id in ("killed0001", "living0001"):
            signals = tmp_path / run_id
            signals.mkdir()
            proc = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"],
                cwd=project,
                env={**_env(tmp_path, run_id, kubeconfig, signals), "TMPDIR": str(scratch)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own process group: SIGKILL takes the controller and workers
            )
            procs.append(proc)
            runs[run_id] = (proc, signals)

        def both_ready() -> None:
            for run_id, (proc, signals) in runs.items():
                assert proc.poll() is None, (
                    f"{run_id} ended early:\n{proc.stdout.read() if proc.stdout else ''}"
                )
                assert len(list(signals.glob("ready-*"))) == 2, f"{run_id}: tests not holding yet"

        eventually(both_ready, timeout=timeouts(240), interval=0.2)
        killed, _ = runs["killed0001"]
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=timeouts(30))
        assert _labelled(cluster, "killed0001", timeouts(10)), (
            "the killed run left nothing: the test proves nothing"
        )

        # On this machine too: its processes' private folders (session kubeconfigs, keys written out).
        def left_folders() -> None:  # the workers may still be exiting: wait() reaps the controller
            orphans = [f for f in scratch.glob("envtest-*") if _owner_gone(f)]
            assert orphans, "the killed run left no private folder: the end of this test proves nothing"

        eventually(left_folders, timeout=timeouts(30), interval=0.2)

        sweep = subprocess.run(
            [*cli, "sweep", "--kubeconfig", kubeconfig],
            capture_output=True,
            text=True,
            env=base_env,
            timeout=timeouts(120),
        )
        assert sweep.returncode == 0, sweep.stderr
        assert "dead run killed0001" in sweep.stdout
        assert "live run living0001" in sweep.stdout
        eventually(
            lambda: _nothing_left(cluster, "killed0001", timeouts(10)), timeout=timeouts(120), interval=0.5
        )

        living, signals = runs["living0001"]
        (signals / "go").touch()
        out, _ = living.communicate(timeout=timeouts(300))
        assert living.returncode == 0, out
        assert "2 passed" in out
        eventually(
            lambda: _nothing_left(cluster, "living0001", timeouts(10)), timeout=timeouts(120), interval=0.5
        )

        # The next run of the same user removes the killed run's folders; every run has ended, so
        # nothing of theirs is left.
        following = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", "holds_too"],
            cwd=project,
            env={**_env(tmp_path, "next0001", kubeconfig, signals), "TMPDIR": str(scratch)},
            capture_output=True,
            text=True,
            timeout=timeouts(300),
        )
        assert following.returncode == 0, following.stdout[-3000:]
        assert not sorted(scratch.glob("envtest-*")), "a run's private folder outlived it"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeouts(30))
        subprocess.run(
            [*cli, "down", "--name", name], capture_output=True, env=base_env, timeout=timeouts(120)
        )


CRASHING = """
import os, signal


def test_crashes_its_worker(namespace, cluster):
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies before any teardown or sweep of its own


def test_survives(namespace):
    pass
"""


def test_the_xdist_controller_sweeps_what_a_crashed_worker_left(tmp_path: Path, timeouts: Any) -> None:
    cli = [sys.executable, "-m", "envtest.cli"]
    name = f"crash-{os.getpid()}"
    env = _env(tmp_path, "unused", "", tmp_path)
    del env["ENVTEST_RUN_ID"]  # the default: the controller's own id, handed to its workers
    up = subprocess.run(
        [*cli, "up", "--name", name], capture_output=True, text=True, env=env, timeout=timeouts(600)
    )
    assert up.returncode == 0, up.stderr
    (kubeconfig,) = (ln.split("=", 1)[1].strip("'\"") for ln in up.stdout.splitlines() if "KUBECONFIG=" in ln)
    try:
        project = tmp_path / "project"
        project.mkdir()
        (project / "pytest.ini").write_text("[pytest]\nenvtest_backend = existing\n")
        (project / "test_crash.py").write_text(textwrap.dedent(CRASHING))
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"],
            cwd=project,
            env={**env, "KUBECONFIG": kubeconfig},
            capture_output=True,
            text=True,
            timeout=timeouts(300),
        )
        assert "worker 'gw" in run.stdout + run.stderr or "crashed" in run.stdout, run.stdout[-3000:]
        assert "1 passed" in run.stdout, run.stdout[-3000:]
        cluster = ExistingCluster(Path(kubeconfig))
        # The plane is this test's own: nothing labelled by any run may be left on it.
        eventually(lambda: _nothing_left(cluster, None, timeouts(10)), timeout=timeouts(120))
    finally:
        subprocess.run([*cli, "down", "--name", name], capture_output=True, env=env, timeout=timeouts(120))
