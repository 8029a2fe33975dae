"""What a process of the run created on the cluster, and how its session end removes what is left.

Everything the harness creates on a cluster carries two labels: the run (shared by every xdist
worker) and the creating process (`gw0`, `gw1`, … or `main`). The sweep at a process's session end
selects both, so the first worker to finish can never delete the namespaces of workers still running
their tests — which a run-wide sweep did on kind, existing clusters and kept planes.
"""

from __future__ import annotations

import os

import pytest
import requests

from envtest import objects
from envtest.plugin import rbac

RUN_LABEL = "envtest.io/run"
WORKER_LABEL = "envtest.io/worker"


def worker_id(config: pytest.Config) -> str:
    """`gw0`, `gw1`, … in an xdist worker; `main` otherwise."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "workerid" in workerinput:
        return str(workerinput["workerid"])
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def labels(run: str, worker: str) -> dict[str, str]:
    return {RUN_LABEL: run, WORKER_LABEL: worker}


def selector(run: str, worker: str) -> str:
    """The label selector of what this process created in this run (and nothing of its siblings)."""
    return ",".join(f"{k}={v}" for k, v in labels(run, worker).items())


def sweep(session: requests.Session, server: str, label_selector: str, cr_paths: list[str]) -> list[str]:
    """Delete the namespaces (finalizers of their custom resources stripped first: no operator is left
    to process them) and the cluster-scoped RBAC objects matching `label_selector`. Returns the
    namespaces it deleted."""
    resp = session.get(f"{server}/api/v1/namespaces", params={"labelSelector": label_selector}, timeout=10)
    names = [ns["metadata"]["name"] for ns in resp.json().get("items", [])] if resp.ok else []
    for name in names:
        objects.strip_finalizers(session, server, name, cr_paths)
        session.delete(f"{server}/api/v1/namespaces/{name}", timeout=10)
    rbac.delete_labelled(session, server, label_selector)
    from envtest.webhooks.install import sweep as sweep_webhooks  # deferred: ssl/http.server stay unloaded

    sweep_webhooks(session, server, label_selector)  # per-test webhook configurations a killed test left
    return names
