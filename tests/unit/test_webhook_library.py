"""envtest.webhooks without a cluster: rewriting, selectors, the CRD conversion patch, certificates and
the reference server (real HTTPS on 127.0.0.1)."""

from __future__ import annotations

import base64
import copy
import http.client
import ipaddress
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cryptography import x509

from envtest.errors import ConfigError
from envtest.webhooks import (
    PROBE_PATH,
    WebhookServer,
    allow,
    config,
    conversion_crds,
    deny,
    for_test,
    load,
    scope_to_namespace,
    serving_certs,
    write_crds,
)
from envtest.webhooks.install import _add_probes

CA = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"

VALIDATING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "widgets", "resourceVersion": "42", "uid": "x", "labels": {"app": "w"}},
    "webhooks": [
        {
            "name": "vwidget.example.com",
            "clientConfig": {"service": {"name": "webhook", "namespace": "system", "path": "/validate"}},
            "namespaceSelector": {
                "matchLabels": {"team": "a"},
                "matchExpressions": [{"key": "x", "operator": "Exists"}],
            },
            "rules": [
                {
                    "apiGroups": ["example.com"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["widgets"],
                }
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        },
        {
            "name": "vcluster.example.com",
            "clientConfig": {"url": "https://elsewhere.example:8443/validate-cluster"},
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["*"],
                    "resources": ["nodes"],
                    "scope": "Cluster",
                }
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        },
    ],
}


def _rewrite(doc: dict[str, Any] = VALIDATING) -> dict[str, Any]:
    return for_test(
        doc, base_url="https://127.0.0.1:9443", ca_pem=CA, namespace="t-1", suffix="t-1", run_id="run9"
    )


# -- configuration rewriting ---------------------------------------------------------------------------


def test_service_reference_becomes_url_with_the_service_path_and_ca_bundle():
    hook = _rewrite()["webhooks"][0]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/validate",
        "caBundle": base64.b64encode(CA).decode(),
    }


def test_existing_url_keeps_its_path_but_points_at_the_local_server():
    assert _rewrite()["webhooks"][1]["clientConfig"]["url"] == "https://127.0.0.1:9443/validate-cluster"


def test_service_without_path_is_served_at_root():
    cc = config.client_config({"service": {"name": "s", "namespace": "n"}}, "https://h:1/", CA)
    assert cc["url"] == "https://h:1/"


def test_client_config_without_service_or_url_is_a_config_error():
    with pytest.raises(ConfigError, match="neither service nor url"):
        config.client_config({}, "https://h:1", CA)


def test_namespace_selector_is_anded_with_the_users_selector():
    selector = _rewrite()["webhooks"][0]["namespaceSelector"]
    assert selector == {
        "matchLabels": {"team": "a"},
        "matchExpressions": [
            {"key": "x", "operator": "Exists"},
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["t-1"]},
        ],
    }


def test_scope_to_namespace_without_a_selector_matches_only_that_namespace():
    assert scope_to_namespace(None, "ns") == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ns"]}]
    }


def test_per_test_copy_has_unique_name_run_label_and_no_server_fields():
    meta = _rewrite()["metadata"]
    assert meta["name"] == "widgets-t-1"
    assert meta["labels"] == {"app": "w", "envtest.io/run": "run9", "envtest.io/namespace": "t-1"}
    assert "resourceVersion" not in meta and "uid" not in meta


def test_star_scope_is_narrowed_to_namespaced_but_cluster_scope_is_left_alone():
    hooks = _rewrite()["webhooks"]
    assert hooks[0]["rules"][0]["scope"] == "Namespaced"
    assert hooks[1]["rules"][0]["scope"] == "Cluster"


def test_rewriting_never_changes_the_input():
    before = copy.deepcopy(VALIDATING)
    _rewrite()
    assert before == VALIDATING


def test_load_reads_dirs_files_and_dicts_and_skips_other_kinds(tmp_path: Path):
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook"}}
    mutating = {**VALIDATING, "kind": "MutatingWebhookConfiguration"}
    (tmp_path / "manifests.yaml").write_text(yaml.safe_dump_all([service, VALIDATING]))
    (tmp_path / "notes.txt").write_text("not a manifest")
    loaded = load([tmp_path, mutating])
    assert [d["kind"] for d in loaded] == ["ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"]


def test_load_rejects_removed_v1beta1_configurations():
    with pytest.raises(ConfigError, match=r"must be admissionregistration.k8s.io/v1"):
        load([{**VALIDATING, "apiVersion": "admissionregistration.k8s.io/v1beta1"}])


def test_probe_webhook_per_distinct_server_matches_only_probe_labelled_configmaps():
    doc = _rewrite({**VALIDATING, "kind": "MutatingWebhookConfiguration"})
    doc["webhooks"][1]["clientConfig"]["url"] = "https://127.0.0.2:9000/other"
    probes = _add_probes(doc, "t-1")
    assert len(probes) == 2 and len({token for _, token in probes}) == 2
    first = doc["webhooks"][2]
    assert first["clientConfig"]["url"] == f"https://127.0.0.1:9443{PROBE_PATH}"
    assert first["objectSelector"] == {"matchLabels": {"envtest.io/webhook-probe": probes[0][1]}}
    assert first["failurePolicy"] == "Fail" and first["sideEffects"] == "None"
    assert first["reinvocationPolicy"] == "Never"
    assert doc["webhooks"][3]["clientConfig"]["url"].startswith("https://127.0.0.2:9000/")


# -- CRD conversion --------------------------------------------------------------------------------------


def _crd(*versions: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [{"name": v, "served": True, "storage": i == 0} for i, v in enumerate(versions)],
        },
    }


def test_multi_version_crd_converts_through_the_webhook_url():
    (crd,) = conversion_crds([_crd("v2", "v1")], "https://127.0.0.1:9443/convert", CA)
    assert crd["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {
                "url": "https://127.0.0.1:9443/convert",
                "caBundle": base64.b64encode(CA).decode(),
            },
        },
    }


def test_single_version_crd_is_left_as_written():
    original = _crd("v1")
    assert conversion_crds([original], "https://h:1/convert", CA) == [original]


def test_written_crds_carry_the_conversion(tmp_path: Path):
    src = tmp_path / "crd.yaml"
    src.write_text(yaml.safe_dump(_crd("v2", "v1")))
    out = write_crds([src], "https://h:1/convert", CA, tmp_path / "out")
    (written,) = [yaml.safe_load(p.read_text()) for p in out.iterdir()]
    assert written["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://h:1/convert"


# -- certificates ----------------------------------------------------------------------------------------


def test_cert_dir_has_controller_runtime_layout_sans_and_a_private_key(tmp_path: Path):
    certs = serving_certs(tmp_path / "certs", ["172.18.0.1"])
    assert {p.name for p in certs.cert_dir.iterdir()} == {"tls.crt", "tls.key", "ca.crt"}
    assert certs.key_file.stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate(certs.cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("172.18.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert certs.host == "172.18.0.1"
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(certs.ca_pem))


# -- the reference server over real HTTPS -----------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path):
    with WebhookServer(serving_certs(tmp_path / "certs")) as srv:
        yield srv


def _post(srv: WebhookServer, path: str, body: dict[str, Any], **kw: Any) -> requests.Response:
    return requests.post(srv.url + path, json=body, verify=str(srv.certs.ca_file), timeout=10, **kw)


def _review(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "object": obj},
    }


def test_admission_review_is_dispatched_by_path_and_answered_with_the_uid(server: WebhookServer):
    server.admission("/validate", lambda req: allow() if req["object"]["size"] < 10 else deny("size too big"))
    server.admission("/mutate", lambda req: allow(patch=[{"op": "add", "path": "/x", "value": 1}]))
    ok = _post(server, "/validate", _review({"size": 1})).json()
    bad = _post(server, "/validate", _review({"size": 99})).json()
    mutated = _post(server, "/mutate", _review({})).json()["response"]
    assert ok == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"allowed": True, "uid": "u1"},
    }
    assert bad["response"] == {
        "allowed": False,
        "status": {"code": 403, "message": "size too big"},
        "uid": "u1",
    }
    assert mutated["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(mutated["patch"])) == [{"op": "add", "path": "/x", "value": 1}]
    assert server.requests == {"/validate": 2, "/mutate": 1}


def test_conversion_review_converts_every_object_or_fails_the_whole_review(server: WebhookServer):
    def convert(obj: dict[str, Any], to: str) -> dict[str, Any]:
        if obj.get("broken"):
            raise ValueError("cannot hold this")
        return {**obj, "apiVersion": to}

    server.conversion("/convert", convert)
    review = {
        "request": {"uid": "c1", "desiredAPIVersion": "example.com/v2", "objects": [{"a": 1}, {"b": 2}]}
    }
    good = _post(server, "/convert", review).json()
    assert good["kind"] == "ConversionReview"
    assert good["response"]["result"] == {"status": "Success"}
    assert [o["apiVersion"] for o in good["response"]["convertedObjects"]] == ["example.com/v2"] * 2
    review["request"]["objects"] = [{"broken": True}]
    failed = _post(server, "/convert", review).json()["response"]
    assert failed["uid"] == "c1" and failed["result"]["status"] == "Failure"
    assert "cannot hold this" in failed["result"]["message"]


def test_a_handler_that_raises_denies_with_500_instead_of_dropping_the_connection(server: WebhookServer):
    server.admission("/boom", lambda req: 1 / 0)  # type: ignore[arg-type,return-value]
    resp = _post(server, "/boom", _review({})).json()["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "ZeroDivisionError" in resp["status"]["message"]


def test_unknown_path_is_404_and_the_probe_path_is_denied(server: WebhookServer):
    assert _post(server, "/nothing", _review({})).status_code == 404
    probe = _post(server, PROBE_PATH, _review({})).json()["response"]
    assert probe["allowed"] is False
    assert server.requests[PROBE_PATH] == 1


def test_fail_status_and_delay_apply_to_every_request_but_are_still_counted(server: WebhookServer):
    server.admission("/validate", lambda req: allow())
    server.fail_status = 503
    assert _post(server, "/validate", _review({})).status_code == 503
    server.fail_status = None
    server.delay = 0.3
    began = time.monotonic()
    assert _post(server, "/validate", _review({})).status_code == 200
    assert time.monotonic() - began >= 0.3
    assert server.wait_for_request("/validate", count=2, timeout=1) == 2


def test_stop_cuts_kept_alive_connections_and_restart_keeps_the_port(server: WebhookServer):
    server.admission("/validate", lambda req: allow())
    port = server.port
    context = ssl.create_default_context(cafile=str(server.certs.ca_file))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    body = json.dumps(_review({}))
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    assert conn.getresponse().read()
    server.stop()
    # The kept-alive connection is dead too: a "down" server must not keep answering on it.
    with pytest.raises(OSError):
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
    with pytest.raises(requests.ConnectionError):
        _post(server, "/validate", _review({}))
    server.start()
    assert server.port == port
    assert _post(server, "/validate", _review({})).status_code == 200


def test_a_slow_tls_client_does_not_block_other_requests(server: WebhookServer):
    server.admission("/validate", lambda req: allow())
    idle = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # never starts its handshake
    try:
        result: list[int] = []
        thread = threading.Thread(
            target=lambda: result.append(_post(server, "/validate", _review({})).status_code)
        )
        thread.start()
        thread.join(timeout=5)
        assert result == [200]
    finally:
        idle.close()
