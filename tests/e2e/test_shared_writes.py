"""What several runs write to one cluster at the same moment, against the real apiserver: the same
CRDs installed by all of them at once, and each run's record renewed for as long as it lives.

Both once failed only on a real apiserver: a CRD replace met a 409 Conflict when the apiserver's
own controllers wrote the CRD's status between the read and the write, and a Lease cannot be
replaced without its resourceVersion (422) — fakes accept both.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests
import yaml

from envtest import crds, runs
from envtest.clusters import Cluster

RUNS_AT_ONCE = 4
ROUNDS = 3
RENEWALS = 3


def _crd(group: str, description: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def test_runs_installing_the_same_crds_at_once_all_succeed(
    envtest_cluster: Cluster, tmp_path: Path, timeouts: Any
) -> None:
    group = f"race-{uuid.uuid4().hex[:8]}.envtest.io"
    start = threading.Barrier(RUNS_AT_ONCE)
    conflicts: list[str] = []  # replaces the apiserver answered 409: the races the retry won

    def count_conflicts(resp: requests.Response, *_: Any, **__: Any) -> None:
        if resp.request.method == "PUT" and resp.status_code == 409:
            conflicts.append(resp.url)

    def one_run(index: int) -> list[str]:
        client = envtest_cluster.new_pykube()  # its own connections, as another process has
        client.session.hooks["response"].append(count_conflicts)
        names = []
        try:
            for round_ in range(ROUNDS):
                # Each round changes the CRD, so every replace writes something new.
                path = tmp_path / f"run{index}-round{round_}.yaml"
                path.write_text(yaml.safe_dump(_crd(group, f"round {round_}")))
                start.wait(timeout=timeouts(60))
                installed = crds.install(client.session, client.url, [path], timeout=timeouts(60))
                names += [crd["metadata"]["name"] for crd in installed]
        except BaseException:
            start.abort()  # the others stop waiting for this run at once; its own error is the one shown
            raise
        return names

    try:
        with ThreadPoolExecutor(RUNS_AT_ONCE) as pool:
            futures = [pool.submit(one_run, index) for index in range(RUNS_AT_ONCE)]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:  # the run that failed first, not those it released from the barrier
            raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
        print(f"{len(conflicts)} replaces met a 409 Conflict and were retried")  # how often the race was met
        results = [f.result() for f in futures]
        assert results == [[f"gadgets.{group}"] * ROUNDS] * RUNS_AT_ONCE
        served = envtest_cluster.pykube.session.get(
            f"{envtest_cluster.pykube.url}/{crds.CRD_API}/gadgets.{group}", timeout=timeouts(10)
        ).json()
        schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert schema["description"] == f"round {ROUNDS - 1}"
    finally:
        path = tmp_path / "uninstall.yaml"
        path.write_text(yaml.safe_dump(_crd(group, "")))
        crds.uninstall(
            envtest_cluster.pykube.session, envtest_cluster.pykube.url, [path], timeout=timeouts(60)
        )


def test_a_run_record_is_renewed_again_and_again(envtest_cluster: Cluster, timeouts: Any) -> None:
    client = envtest_cluster.new_pykube()
    first = datetime(2026, 12, 4, 9, 0, 0, tzinfo=UTC)
    moments = [first + timedelta(seconds=15 * i) for i in range(RENEWALS + 1)]
    clock = iter(moments)
    record = runs.RunRecord(
        client.session,
        client.url,
        f"renew-{uuid.uuid4().hex[:8]}",
        "gw0",
        interval=3600,
        clock=lambda: next(clock),
    )
    record.start()
    try:
        for moment in moments[1:]:
            assert record.renew(), f"renewal at {moment} refused by the apiserver (see the warning logged)"
            lease = client.session.get(record.url, timeout=timeouts(10)).json()
            assert lease["spec"]["renewTime"] == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            assert lease["spec"]["holderIdentity"] == runs.holder_identity()
    finally:
        record.stop()
    assert client.session.get(record.url, timeout=timeouts(10)).status_code == 404
