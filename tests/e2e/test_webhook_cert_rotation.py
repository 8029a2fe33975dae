"""The operator's webhooks keep working through a rotation of their serving certificate *and* CA, with no
restart: the deployed form (`python -m mysql_operator run --cert-dir …`, a process of its own) serves
admission and conversion for a private plane; the test writes a new CA, certificate and key over the
files it serves from, moves every caBundle (the webhook configurations' and the CRD's conversion) to the
new CA, and the same process, same PID, keeps admitting, denying and converting.

This is what cert-manager does to a running operator (renewal = new key; CA rotation = new CA too). A
server that loaded its pair once would present the old certificate to the apiserver's new connections,
which trust only the new CA: every MySQLCluster write fails (`failurePolicy: Fail`) until a restart.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mysqlkit import Timeouts

from envtest import eventually
from envtest.crds import CRD_API
from envtest.pki import CertificateAuthority
from envtest.plane.ports import free_port
from envtest.webhooks import Endpoint, install_crds, repoint
from mysql_operator.manifests import generate
from mysql_operator.webhooks.server import CONVERT_PATH

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "operator" / "config" / "webhook.yaml"
CRD_NAME = "mysqlclusters.db.example.com"
ADMISSION_API = "apis/admissionregistration.k8s.io/v1"

pytestmark = pytest.mark.envtest_private(components="minimal")


class Operator:
    """`python -m mysql_operator run` with its webhooks on ``cert_dir``, as a Deployment runs it."""

    def __init__(self, cluster: Any, namespace: str, cert_dir: Path, log: Path, timeouts: Timeouts) -> None:
        self.port = free_port()
        self.log = log
        self.timeouts = timeouts
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mysql_operator",
                "run",
                f"--kubeconfig={cluster.kubeconfig}",
                f"--namespace={namespace}",
                f"--cert-dir={cert_dir}",
                f"--webhook-port={self.port}",
                "--webhook-bind-address=127.0.0.1",
                "--metrics-port=0",
                "--health-port=0",
                "--log-format=json",
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.proc.pid

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def tail(self) -> str:
        return "\n".join(self.log.read_text().splitlines()[-30:])

    def handshake(self, ca_pem: bytes) -> None:
        """A TLS handshake with the webhook port trusting only ``ca_pem``; raises if it fails."""
        context = ssl.create_default_context(cadata=ca_pem.decode())
        with socket.create_connection(("127.0.0.1", self.port), timeout=self.timeouts(10)) as raw:
            context.wrap_socket(raw, server_hostname="127.0.0.1").close()

    def assert_running(self) -> None:
        assert self.proc.poll() is None, f"the operator exited with {self.proc.returncode}:\n{self.tail()}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=self.timeouts(30))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


@pytest.fixture
def operator_process(
    envtest_private_cluster: Any, envtest_context: Any, tmp_path: Path
) -> Iterator[tuple[Operator, Path, bytes, str]]:
    """(the running operator, its cert dir, the CA that issued what is in it, a namespace it watches)."""
    cluster = envtest_private_cluster
    timeouts = Timeouts(cluster.backend)
    cert_dir = tmp_path / "serving-certs"
    ca = CertificateAuthority.create("webhook-ca-1")
    ca.issue_serving("mysql-operator-webhook", ("127.0.0.1", "localhost")).write(cert_dir, "tls")
    namespace = envtest_context.create_namespace(cluster)
    op = Operator(cluster, namespace, cert_dir, tmp_path / "operator.log", timeouts)
    try:

        def serving() -> None:
            op.assert_running()
            op.handshake(ca.cert_pem)

        eventually(serving, timeout=timeouts(60), retry_on=(OSError,))
        yield op, cert_dir, ca.cert_pem, namespace
    finally:
        op.stop()


def beta(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "db.example.com/v1beta1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "storage": {"size": "1Gi"}, **spec},
    }


def alpha(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "db.example.com/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "storageSize": "2Gi"},
    }


def set_ca_bundle(
    session: Any, api: str, configs: list[dict[str, Any]], ca_pem: bytes, timeout: float
) -> None:
    """Every webhook of the installed configurations now trusts ``ca_pem`` (what cert-manager's CA
    injector does after a rotation)."""
    bundle = base64.b64encode(ca_pem).decode()
    for config in configs:
        url = f"{api}/{ADMISSION_API}/{config['kind'].lower()}s/{config['metadata']['name']}"
        live = session.get(url, timeout=timeout).json()
        for hook in live["webhooks"]:
            hook["clientConfig"]["caBundle"] = bundle
        resp = session.put(url, json=live, timeout=timeout)
        assert resp.status_code == 200, resp.text


def test_admission_and_conversion_survive_a_serving_cert_and_ca_rotation_without_restart(
    operator_process: tuple[Operator, Path, bytes, str], envtest_private_cluster: Any, envtest_webhooks: Any
) -> None:
    op, cert_dir, old_ca, ns = operator_process
    cluster = envtest_private_cluster
    t = Timeouts(cluster.backend)
    s, api = cluster.session, cluster.server
    base = f"{api}/apis/db.example.com"

    install_crds(s, api, [generate.crd(serve_all=True)], f"{op.url}{CONVERT_PATH}", old_ca, timeout=t(30))
    installed = envtest_webhooks.install([CONFIGS], endpoint=Endpoint(op.url, old_ca), namespace=ns)

    def admits_denies_and_converts(tag: str) -> None:
        op.assert_running()
        bad = beta(f"zone-{tag}", backup={"schedule": {"timeZone": "Mars/Olympus"}})
        denied = s.post(f"{base}/v1beta1/namespaces/{ns}/mysqlclusters", json=bad, timeout=t(30))
        # Only the operator's validating webhook knows IANA zones: this 422 proves it was called.
        assert denied.status_code == 422 and "not an IANA time zone" in denied.text, denied.text
        made = s.post(
            f"{base}/v1alpha1/namespaces/{ns}/mysqlclusters", json=alpha(f"old-{tag}"), timeout=t(30)
        )
        # v1alpha1 in, v1beta1 stored: converted, then admitted (409: an earlier try of this phase did)
        assert made.status_code in (201, 409), made.text
        hub = s.get(f"{base}/v1beta1/namespaces/{ns}/mysqlclusters/old-{tag}", timeout=t(30))
        assert hub.status_code == 200 and hub.json()["spec"]["storage"] == {"size": "2Gi"}, hub.text
        old = s.get(f"{base}/v1alpha1/namespaces/{ns}/mysqlclusters/old-{tag}", timeout=t(30))
        assert old.status_code == 200 and old.json()["spec"]["storageSize"] == "2Gi", old.text

    eventually(lambda: admits_denies_and_converts("before"), timeout=t(60))

    # The rotation: a new CA and a new key, written over the files the running process serves from.
    new = CertificateAuthority.create("webhook-ca-2")
    new.issue_serving("mysql-operator-webhook", ("127.0.0.1", "localhost")).write(cert_dir, "tls")
    (cert_dir / "ca.crt").write_bytes(new.cert_pem)
    op.handshake(new.cert_pem)  # the next handshake already presents the new pair
    with pytest.raises(ssl.SSLCertVerificationError):
        op.handshake(old_ca)

    set_ca_bundle(s, api, installed.configs, new.cert_pem, timeout=t(30))
    repoint(s, api, [CRD_NAME], f"{op.url}{CONVERT_PATH}", new.cert_pem, timeout=t(30))
    crd = s.get(f"{api}/{CRD_API}/{CRD_NAME}", timeout=t(10)).json()
    assert (
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
        == base64.b64encode(new.cert_pem).decode()
    )

    # The apiserver picks up configurations asynchronously; once it has, everything works again.
    eventually(lambda: admits_denies_and_converts("after"), timeout=t(60))
    assert op.proc.pid == op.pid and op.proc.poll() is None, "served by the same process, never restarted"
    logged = [json.loads(line) for line in op.log.read_text().splitlines() if line.startswith("{")]
    assert [r["msg"] for r in logged].count("serving certificate reloaded") == 1, op.tail()
