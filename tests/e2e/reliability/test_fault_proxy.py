"""The fault proxy itself, against the real apiserver: what a client sees for each fault, and that
the proxy counts what it did. The operator's ServiceAccount is the client, so RBAC applies."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pykube
import pytest
import requests
from mysqlkit import Timeouts

from envtest import Cluster, eventually
from envtest.faults import (
    CutWatch,
    DropReply,
    ExpireWatch,
    FaultProxy,
    Rule,
    conflict,
    too_many_requests,
)
from envtest.plugin.context import TestContext


@pytest.fixture
def client(
    envtest_context: TestContext, cluster: Cluster, namespace: str, faults: FaultProxy, tmp_path: Path
) -> pykube.HTTPClient:
    """pykube as the operator's ServiceAccount, through the proxy, labelled "probe"."""
    identity = envtest_context.operator_kubeconfig(cluster, namespace)
    return Cluster.new_pykube_from(faults.kubeconfig_for(identity, tmp_path / "kc", client="probe"))


def _secret(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}})


def test_forwards_with_the_clients_own_identity_and_counts(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str
) -> None:
    assert client.get(url="secrets", namespace=namespace).status_code == 200
    # RBAC still applies: the operator's role may not list namespaces.
    assert client.get(url="namespaces").status_code == 403
    assert faults.requests(verb="list", resource="secrets", client="probe") == 1
    assert faults.requests(client="probe") == 2


def test_injected_conflict_is_a_real_status_and_reaches_nothing(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str, api: Any
) -> None:
    rule = faults.add(Rule(conflict(), verb="create", resource="secrets", times=1))
    resp = client.post(url="secrets", namespace=namespace, data=_secret("s1"))
    assert resp.status_code == 409
    body = resp.json()
    assert body["reason"] == "Conflict" and body["code"] == 409
    assert body["details"] == {"name": "s1", "group": "", "kind": "secrets"}
    assert api.get(f"api/v1/namespaces/{namespace}/secrets/s1") is None
    assert rule.fired == 1
    assert client.post(url="secrets", namespace=namespace, data=_secret("s1")).status_code == 201


def test_too_many_requests_carries_retry_after(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str
) -> None:
    faults.add(Rule(too_many_requests(retry_after=2), verb="get"))
    resp = client.get(url="secrets/x", namespace=namespace)
    assert resp.status_code == 429
    assert resp.headers["Retry-After"] == "2"
    assert resp.json()["details"]["retryAfterSeconds"] == 2


def test_dropped_reply_means_the_write_happened_unheard(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str, api: Any
) -> None:
    faults.add(Rule(DropReply(), verb="create", resource="secrets", times=1))
    with pytest.raises(requests.ConnectionError):
        client.post(url="secrets", namespace=namespace, data=_secret("s2"))
    assert api.get(f"api/v1/namespaces/{namespace}/secrets/s2") is not None
    retry = client.post(url="secrets", namespace=namespace, data=_secret("s2"))
    assert (retry.status_code, retry.json()["reason"]) == (409, "AlreadyExists")


def _watch(
    client: pykube.HTTPClient, namespace: str, timeouts: Timeouts, rv: str | None = None
) -> requests.Response:
    params = {"watch": "true", "timeoutSeconds": str(round(timeouts(30)))}
    if rv:
        params["resourceVersion"] = rv
    return client.get(url="secrets", namespace=namespace, params=params, stream=True, timeout=timeouts(40))


def test_watch_events_stream_through_unbuffered(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str, api: Any, timeouts: Timeouts
) -> None:
    resp = _watch(client, namespace, timeouts)
    seen: list[tuple[float, str]] = []

    def read() -> None:
        try:
            for line in resp.iter_lines(chunk_size=1):
                if line:
                    seen.append((time.monotonic(), json.loads(line)["object"]["metadata"]["name"]))
        except (requests.RequestException, AttributeError):
            pass  # closed under our feet at the end of the test

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    for i in range(2):
        api.create(f"api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": f"w{i}"}})
        # w1 is created only once w0 came through, and it comes through the same stream: so w0 was
        # delivered while the watch was still open. A proxy holding events back until a buffer fills
        # or the stream ends would deliver w0 at the end, and w1 never.
        eventually(lambda i=i: _arrival(seen, f"w{i}"), timeout=timeouts(10))
    resp.raw.shutdown()  # wakes the reader blocked on the open stream
    reader.join(5)
    resp.close()


def _arrival(seen: list[tuple[float, str]], name: str) -> float:
    times = [t for t, n in seen if n == name]
    assert times, f"no event for {name} yet"
    return times[0]


def test_watch_cut_after_events_and_expired_watch(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str, api: Any, timeouts: Timeouts
) -> None:
    for i in range(2):
        api.create(f"api/v1/namespaces/{namespace}/secrets", {"metadata": {"name": f"c{i}"}})
    faults.add(Rule(CutWatch(after_events=1), verb="watch", resource="secrets", times=1))
    lines = []
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for line in _watch(client, namespace, timeouts, rv="0").iter_lines():
            lines.append(line)
    assert len([x for x in lines if x]) == 1

    faults.add(Rule(ExpireWatch(), verb="watch", resource="secrets", times=1))
    resp = _watch(client, namespace, timeouts, rv="1")
    assert resp.status_code == 200
    events = [json.loads(x) for x in resp.iter_lines() if x]
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    assert faults.injections(CutWatch) == 1 and faults.injections(ExpireWatch) == 1


def test_disconnect_and_kill_client(
    client: pykube.HTTPClient, faults: FaultProxy, namespace: str, timeouts: Timeouts
) -> None:
    resp = _watch(client, namespace, timeouts)
    assert resp.status_code == 200
    assert faults.disconnect_watches(resource="secrets") == 1
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        list(resp.iter_lines())
    faults.kill_client("probe")
    with pytest.raises(requests.ConnectionError):
        client.get(url="secrets", namespace=namespace)
