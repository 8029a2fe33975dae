"""The operator as a user runs it: its image built here (operator/config/Dockerfile), loaded into the
kind node, deployed by `make deploy` with its generated RBAC (`make kind-deploy` does all three).

No in-process operator here: the Deployment's pods do the work, as its own ServiceAccount. Skipped
unless that Deployment exists (so `make e2e-kind`, which runs the operator in-process, never races it).
"""

from __future__ import annotations

from typing import Any

import pytest
from mysqlkit import FINALIZER, MySQLClusters, sample

from envtest import eventually

DEPLOYMENT = "apis/apps/v1/namespaces/mysql-operator-system/deployments/mysql-operator"
FULL = sample("mysqlcluster_full.yaml")
BACKED_UP = {**FULL, "spec": {**FULL["spec"], "replicas": 1}}


@pytest.fixture
def deployed(cluster: Any, api: Any) -> dict[str, Any]:
    if cluster.backend == "local":
        pytest.skip("the operator's image runs in a real cluster only (kind)")
    deployment = api.get(DEPLOYMENT)
    if deployment is None:
        pytest.skip("no deployed operator: run `make kind-deploy` first")

    def available() -> dict[str, Any]:
        dep = api.get(DEPLOYMENT)
        conditions = {c["type"]: c["status"] for c in (dep or {}).get("status", {}).get("conditions", [])}
        assert conditions.get("Available") == "True", f"Deployment conditions: {conditions}"
        return dep  # type: ignore[no-any-return]

    return eventually(available, timeout=api.timeouts(120))  # type: ignore[no-any-return]


@pytest.mark.kind_deployed
def test_deployed_operator_runs_the_sample_and_releases_its_finalizer(
    deployed: dict[str, Any], mysql: MySQLClusters
) -> None:
    mysql.create(BACKED_UP)
    cr = mysql.wait_running("sample-full", timeout=mysql.timeouts(60))
    assert FINALIZER in cr["metadata"]["finalizers"], "the deployed operator did not add its finalizer"
    (pod,) = mysql.database_pods("sample-full")
    assert pod["status"]["phase"] == "Running"

    assert mysql.delete("sample-full") == 200
    mysql.wait_gone(
        "sample-full", timeout=mysql.timeouts(60)
    )  # x6 on kind: the final backup Job really runs first
    job = mysql.child("job", "sample-full")
    assert job is not None and (job.get("status") or {}).get("succeeded") == 1, "no successful final backup"
