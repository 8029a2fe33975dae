"""Webhooks through a real kube-apiserver: admission installed per test and scoped to its namespace,
the install probe, and webhook faults (slow, failing, unreachable; conversion down and back) on private
planes. A CRD of these tests' own (`data/gadgets-crd.yaml`) and the reference server, so they prove the
harness independent of the operator."""

from __future__ import annotations

import copy
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from mysqlkit import Timeouts, scaled

from envtest import crds, eventually
from envtest.webhooks import (
    PROBE_PATH,
    Endpoint,
    WebhookNotReady,
    WebhookServer,
    allow,
    deny,
    install,
    install_crds,
    load,
    repoint,
    serving_certs,
    wait_converting,
)

DATA = Path(__file__).parent / "data"
CRD = DATA / "gadgets-crd.yaml"
CONFIGS = DATA / "gadgets-webhooks.yaml"
GROUP = "apis/webhooks.envtest.io"


def gadget(name: str, size: int, version: str = "v1") -> dict[str, Any]:
    spec: dict[str, Any] = {"size": size} if version == "v1" else {"dimensions": {"size": size}}
    return {
        "apiVersion": f"webhooks.envtest.io/{version}",
        "kind": "Gadget",
        "metadata": {"name": name},
        "spec": spec,
    }


def validate(req: dict[str, Any]) -> dict[str, Any]:
    spec = req["object"].get("spec", {})
    size = spec.get("size", spec.get("dimensions", {}).get("size", 0))
    return deny(f"spec.size: {size} is larger than 10") if size > 10 else allow()


def default(req: dict[str, Any]) -> dict[str, Any]:
    if "colour" in req["object"].get("spec", {}):
        return allow()
    return allow(patch=[{"op": "add", "path": "/spec/colour", "value": "grey"}])


def convert(obj: dict[str, Any], to: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    spec = out.get("spec", {})
    if to.endswith("/v2") and "size" in spec:
        spec["dimensions"] = {"size": spec.pop("size")}
    elif to.endswith("/v1") and "dimensions" in spec:
        spec["size"] = spec.pop("dimensions").get("size")
    out["apiVersion"] = to
    return out


def expect_status(cluster: Any, ns: str, size: int, status: int) -> None:
    """Create a fresh gadget of ``size`` and assert the apiserver's answer (for `eventually`)."""
    resp = post(cluster, ns, gadget(f"g-{time.monotonic_ns()}", size))
    assert resp.status_code == status, resp.text


def post(cluster: Any, ns: str, body: dict[str, Any]) -> Any:
    version = body["apiVersion"].rsplit("/", 1)[1]
    return cluster.session.post(
        f"{cluster.server}/{GROUP}/{version}/namespaces/{ns}/gadgets", json=body, timeout=scaled(cluster, 30)
    )


@pytest.fixture(scope="session")
def gadgets_crd(cluster: Any) -> None:
    # Shared plane, no conversion: these tests read only the version they write.
    crds.install(cluster.session, cluster.server, [CRD])


# -- admission on the shared plane, per test ------------------------------------------------------------


def test_admission_webhooks_apply_to_the_test_namespace_only_and_go_with_remove(
    gadgets_crd: None,
    envtest_webhooks: Any,
    cluster: Any,
    namespace: str,
    envtest_context: Any,
    timeouts: Timeouts,
):
    server = envtest_webhooks.server()
    server.admission("/validate-gadget", validate)
    server.admission("/default-gadget", default)
    handle = envtest_webhooks.install([CONFIGS], endpoint=server)
    # The probe (one per configuration) proved the apiserver reaches the server before install returned.
    assert server.requests[PROBE_PATH] >= 2

    ok = post(cluster, namespace, gadget("small", 3))
    assert ok.status_code == 201, ok.text
    assert ok.json()["spec"]["colour"] == "grey"  # the mutating webhook ran
    big = post(cluster, namespace, gadget("big", 99))
    assert big.status_code == 403 and "spec.size: 99 is larger than 10" in big.json()["message"]

    other = envtest_context.create_namespace(cluster)  # another test's namespace, in effect
    elsewhere = post(cluster, other, gadget("big", 99))
    assert elsewhere.status_code == 201 and "colour" not in elsewhere.json()["spec"]

    handle.remove()
    eventually(lambda: expect_status(cluster, namespace, 99, 201), timeout=timeouts(30))


# The servers here listen on 127.0.0.1, which only a local plane's apiserver reaches (a kind node does not):
# the reasons asserted are those of the local network.
@pytest.mark.envtest_local
def test_install_fails_with_the_apiserver_reason_when_it_cannot_reach_the_server(
    gadgets_crd: None, cluster: Any, namespace: str, tmp_path: Path, timeouts: Timeouts
):
    # install() retries until its timeout and then names the last answer, so the timeout must cover
    # the apiserver loading the configuration (else the answer is "not loaded"), on a busy machine too.
    patience = timeouts(10)
    certs = serving_certs(tmp_path / "certs")
    with WebhookServer(certs) as server:  # a real server, but the CA we announce is another one
        wrong_ca = serving_certs(tmp_path / "other").ca_pem
        with pytest.raises(WebhookNotReady, match=r"x509|certificate"):
            install(
                cluster.session,
                cluster.server,
                [CONFIGS],
                endpoint=Endpoint(server.url, wrong_ca),
                namespace=namespace,
                run_id="probe-test",
                timeout=patience,
            )
        closed = f"https://127.0.0.1:{server.port}"
    with pytest.raises(WebhookNotReady, match="connection refused"):
        install(
            cluster.session,
            cluster.server,
            [CONFIGS],
            endpoint=Endpoint(closed, certs.ca_pem),
            namespace=namespace,
            run_id="probe-test",
            timeout=patience,
        )
    # A failed install removes what it created.
    url = f"{cluster.server}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    left = cluster.session.get(
        url, params={"labelSelector": "envtest.io/run=probe-test"}, timeout=timeouts(10)
    )
    assert left.json()["items"] == []


# -- admission faults, on private planes -----------------------------------------------------------------


def _validating_with(policy: str, timeout: int) -> dict[str, Any]:
    (doc,) = [d for d in load([CONFIGS]) if d["kind"] == "ValidatingWebhookConfiguration"]
    doc["webhooks"][0].update(failurePolicy=policy, timeoutSeconds=timeout)
    return doc


class Fault(NamedTuple):
    breaks: Callable[[WebhookServer], None]
    heals: Callable[[WebhookServer], None]
    says: str
    """A pattern of what the apiserver answers under failurePolicy Fail."""


def _slow() -> Fault:
    """Every validation is held until the fault heals, so whatever the apiserver answers meanwhile is
    its own verdict after timeoutSeconds, before the webhook's: an order of events, not a duration a
    busy machine could stretch."""
    release = threading.Event()

    def held(req: dict[str, Any]) -> dict[str, Any]:
        release.wait(600)  # a handler thread of the server's own; heals() lets it go
        return validate(req)

    def heals(server: WebhookServer) -> None:
        release.set()
        server.admission("/validate-gadget", validate)

    return Fault(lambda s: s.admission("/validate-gadget", held), heals, "deadline exceeded")


FAULTS: dict[str, Callable[[], Fault]] = {
    "slow": _slow,
    "failing": lambda: Fault(
        lambda s: setattr(s, "fail_status", 500),
        lambda s: setattr(s, "fail_status", None),
        "an error on the server",
    ),
    # A new connection is refused; one the apiserver kept alive from before meets the cut as it writes.
    "unreachable": lambda: Fault(
        WebhookServer.stop, WebhookServer.start, "connection refused|broken pipe|connection reset by peer|EOF"
    ),
}


@pytest.mark.envtest_private(components="minimal")
@pytest.mark.parametrize("fault", FAULTS)
def test_webhook_fault_blocks_writes_under_fail_admits_under_ignore_and_never_blocks_deletes(
    fault: str, private_cluster: Any, envtest_webhooks: Any, envtest_context: Any
):
    crds.install(private_cluster.session, private_cluster.server, [CRD])
    server = envtest_webhooks.server()
    server.admission("/validate-gadget", validate)
    strict, lenient = (envtest_context.create_namespace(private_cluster) for _ in range(2))
    envtest_webhooks.install([_validating_with("Fail", 1)], endpoint=server, namespace=strict)
    envtest_webhooks.install([_validating_with("Ignore", 1)], endpoint=server, namespace=lenient)
    assert post(private_cluster, strict, gadget("kept", 1)).status_code == 201
    assert post(private_cluster, strict, gadget("big", 99)).status_code == 403  # healthy: it validates

    breaks, heals, says = FAULTS[fault]()
    breaks(server)
    try:
        refused = post(private_cluster, strict, gadget("during", 1))
        assert refused.status_code >= 400, refused.text
        message = refused.json()["message"]
        assert 'failed calling webhook "vgadget.webhooks.envtest.io"' in message, message
        assert re.search(says, message), message
        admitted = post(private_cluster, lenient, gadget("during", 99))  # Ignore: admitted, unvalidated
        assert admitted.status_code == 201, admitted.text
        # DELETE is not in the rules, chosen so an outage never blocks cleanup.
        gone = private_cluster.session.delete(
            f"{private_cluster.server}/{GROUP}/v1/namespaces/{strict}/gadgets/kept",
            timeout=scaled(private_cluster, 30),
        )
        assert gone.status_code == 200, gone.text
    finally:
        heals(server)
    eventually(lambda: expect_status(private_cluster, strict, 1, 201), timeout=scaled(private_cluster, 30))
    assert post(private_cluster, lenient, gadget("big-after", 99)).status_code == 403  # validated again


# -- conversion, on a private plane (it is per plane: never re-point the shared one) ------------------


@pytest.mark.envtest_private(components="minimal")
def test_unreachable_conversion_webhook_fails_reads_at_the_other_version_and_recovers(
    private_cluster: Any, envtest_context: Any, tmp_path: Path
):
    s, api = private_cluster.session, private_cluster.server
    timeouts = Timeouts(private_cluster.backend)
    server = WebhookServer(serving_certs(tmp_path / "certs")).start()
    server.conversion("/convert", convert)
    try:
        install_crds(s, api, yaml.safe_load_all(CRD.read_text()), f"{server.url}/convert", server.ca_pem)
        ns = envtest_context.create_namespace(private_cluster)
        assert post(private_cluster, ns, gadget("a", 5)).status_code == 201
        v2 = f"{api}/{GROUP}/v2/namespaces/{ns}/gadgets"
        assert wait_converting(s, f"{v2}/a")["spec"] == {"dimensions": {"size": 5}}
        assert post(private_cluster, ns, gadget("b", 7, "v2")).status_code == 201  # stored as v1
        stored = s.get(f"{api}/{GROUP}/v1/namespaces/{ns}/gadgets/b", timeout=timeouts(10)).json()
        assert stored["spec"] == {"size": 7}
        assert server.requests["/convert"] >= 2

        server.stop()
        down = s.get(f"{v2}/a", timeout=timeouts(30))
        assert down.status_code >= 500 and "conversion webhook" in down.json()["message"], down.text
        # Writes at v2 must be converted to the storage version: they fail too. (A list at v2 may still
        # be answered from the watch cache, so it is no evidence either way.)
        write = post(private_cluster, ns, gadget("c", 1, "v2"))
        assert write.status_code >= 500 and "conversion webhook" in write.json()["message"], write.text
        assert s.get(f"{api}/{GROUP}/v1/namespaces/{ns}/gadgets/a", timeout=timeouts(10)).status_code == 200

        server.start()  # same port: the CRD's clientConfig is valid again
        assert wait_converting(s, f"{v2}/a")["spec"] == {"dimensions": {"size": 5}}

        # A new endpoint (a later run attaching to a kept plane): re-point, and conversion follows it.
        server.stop()
        with WebhookServer(serving_certs(tmp_path / "certs2")) as moved:
            moved.conversion("/convert", convert)
            repoint(s, api, ["gadgets.webhooks.envtest.io"], f"{moved.url}/convert", moved.ca_pem)
            assert wait_converting(s, f"{v2}/b")["spec"] == {"dimensions": {"size": 7}}
            assert moved.requests["/convert"] >= 1
    finally:
        server.stop()
