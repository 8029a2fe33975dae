"""The fake pods' side of the local plane: kwok's rules, the per-pod files, the port-forward relay,
the test-facing FakePods API and the pod logs in failure artifacts (tests/e2e/test_fake_pod_streams.py
drives all of it through a real apiserver and kwok)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from envtest.errors import ConfigError
from envtest.fakepods import FakePods
from envtest.plane import kwok, streams
from envtest.plane.controlplane import ControlPlane
from envtest.plugin import artifacts


def test_rules_give_every_container_its_own_files_through_kwoks_pod_variables(tmp_path: Path) -> None:
    docs = {d["kind"]: d for d in streams.rules(tmp_path, python="/py")}
    assert set(docs) == {"ClusterLogs", "ClusterAttach", "ClusterPortForward", "ClusterExec"}
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for d in docs.values())
    base = f"{tmp_path}/$(POD_NAMESPACE)/$(POD_NAME)"
    assert docs["ClusterLogs"]["spec"]["logs"] == [
        {
            "logsFile": f"{base}/logs/$(CONTAINER_NAME).log",
            "previousLogsFile": f"{base}/logs/$(CONTAINER_NAME).previous.log",
        }
    ]
    assert docs["ClusterAttach"]["spec"]["attaches"] == [{"logsFile": f"{base}/logs/$(CONTAINER_NAME).log"}]
    gate = {"name": "KWOK_EXEC_REQUIRES_FILE", "value": f"{tmp_path}/$(POD_NAMESPACE)/.exec-allowed"}
    assert docs["ClusterExec"]["spec"]["execs"] == [{"local": {"workDir": f"{base}/sandbox", "envs": [gate]}}]
    (forward,) = docs["ClusterPortForward"]["spec"]["forwards"]
    assert forward["command"] == ["/py", "-I", str(streams.FORWARD_SCRIPT), f"{base}/ports/$(PORT)"]


def test_exec_opened_everywhere_has_no_gate() -> None:
    (rule,) = [d for d in streams.rules(Path("/pods"), exec_=True) if d["kind"] == "ClusterExec"]
    assert rule["spec"]["execs"] == [{"local": {"workDir": "/pods/$(POD_NAMESPACE)/$(POD_NAME)/sandbox"}}]


def test_exec_is_allowed_per_namespace_by_a_private_file_and_forbidden_again(tmp_path: Path) -> None:
    assert not streams.exec_allowed(tmp_path, "ns")
    streams.allow_exec(tmp_path, "ns")
    path = tmp_path / "ns" / ".exec-allowed"
    assert streams.exec_allowed(tmp_path, "ns") and (path.stat().st_mode & 0o777) == 0o600
    assert not streams.exec_allowed(tmp_path, "other")
    streams.forbid_exec(tmp_path, "ns")
    streams.forbid_exec(tmp_path, "ns")  # twice is fine: a release after a fixture's
    assert not path.exists()
    with pytest.raises(ConfigError, match="namespace"):
        streams.allow_exec(tmp_path, "..")


def test_kwok_serves_on_loopback_over_tls_for_the_planes_clients_only(tmp_path: Path) -> None:
    args = kwok.server_args(port=4321, cert=tmp_path / "c", key=tmp_path / "k", client_ca=tmp_path / "ca")
    assert "--server-address=127.0.0.1:4321" in args and "--node-port=4321" in args
    assert f"--tls-client-ca-file={tmp_path / 'ca'}" in args


@pytest.mark.parametrize(
    ("namespace", "pod", "container", "what"),
    [
        ("", "p", "c", "namespace"),
        ("ns", "a/b", "c", "pod"),
        ("ns", "..", "c", "pod"),
        ("ns", "p", "x/y", "container"),
    ],
)
def test_names_that_would_leave_the_pods_directory_are_refused_naming_the_field(
    namespace: str, pod: str, container: str, what: str
) -> None:
    with pytest.raises(ConfigError, match=what):
        streams.log_path(Path("/pods"), namespace, pod, container)


def test_log_lines_are_written_in_the_cri_format_kwok_reads() -> None:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=dt.UTC)
    assert streams.cri_lines("a\nb", stream="stderr", now=now) == (
        "2026-01-02T03:04:05.600000Z stderr F a\n2026-01-02T03:04:05.600000Z stderr F b\n"
    )
    with pytest.raises(ConfigError, match="stream"):
        streams.cri_lines("x", stream="stdin")


def test_pod_logs_lists_each_container_log_of_the_given_namespaces_only(tmp_path: Path) -> None:
    streams.append_log(streams.log_path(tmp_path, "ns1", "web", "main"), "hi")
    streams.append_log(streams.log_path(tmp_path, "ns1", "web", "main", previous=True), "before")
    streams.append_log(streams.log_path(tmp_path, "other", "db", "main"), "not asked for")
    assert sorted(streams.pod_logs(tmp_path, ["ns1", "missing"])) == [
        "ns1/web/main.log",
        "ns1/web/main.previous.log",
    ]


# -- the port-forward relay (run as kwok runs it) ------------------------------------------------------


def _relay(target_file: Path, data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", str(streams.FORWARD_SCRIPT), str(target_file)],
        input=data, capture_output=True, timeout=60,
    )  # fmt: skip


def test_relay_carries_the_stream_to_the_registered_target_and_back(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)  # a relay that never connects ends this thread, and so do its reads

        def shout() -> None:
            conn, _ = server.accept()
            conn.settimeout(60)
            with conn:
                received = b""
                while chunk := conn.recv(1024):
                    received += chunk
                conn.sendall(received.upper())

        threading.Thread(target=shout, daemon=True).start()
        target = streams.port_path(tmp_path, "ns", "web", 8080)
        streams.register_port(target, "127.0.0.1", server.getsockname()[1])
        done = _relay(target, b"hello")
    assert (done.returncode, done.stdout) == (0, b"HELLO")


def test_relay_to_an_unregistered_port_fails_naming_the_pod_and_port(tmp_path: Path) -> None:
    done = _relay(streams.port_path(tmp_path, "ns", "web", 9999), b"")
    assert done.returncode == 1
    assert "no port-forward target registered for port 9999 of pod ns/web" in done.stderr.decode()


@pytest.mark.parametrize("content", ["", "127.0.0.1", "127.0.0.1:http", ":8080"])
def test_relay_to_a_malformed_target_file_fails_naming_it(tmp_path: Path, content: str) -> None:
    target = streams.port_path(tmp_path, "ns", "web", 8080)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    done = _relay(target, b"")
    assert done.returncode == 1, done.stderr
    assert f"port-forward target file {target}: want HOST:PORT" in done.stderr.decode()
    assert b"Traceback" not in done.stderr


# -- FakePods --------------------------------------------------------------------------------------------


def test_write_log_appends_to_the_containers_file(tmp_path: Path) -> None:
    pods = FakePods(tmp_path, namespace="ns")
    path = pods.write_log("web", "one\ntwo", container="main")
    pods.write_log("web", "three", container="main", stream="stderr")
    lines = path.read_text().splitlines()
    assert [line.split(" ", 3)[1:] for line in lines] == [
        ["stdout", "F", "one"],
        ["stdout", "F", "two"],
        ["stderr", "F", "three"],
    ]
    assert path == tmp_path / "ns" / "web" / "logs" / "main.log"


def test_write_log_without_a_container_takes_the_pods_first(tmp_path: Path) -> None:
    class Session:
        def get(self, url: str, timeout: float) -> Any:
            assert url == "https://api/api/v1/namespaces/ns/pods/web"
            return type(
                "R", (), {"status_code": 200, "json": lambda _: {"spec": {"containers": [{"name": "app"}]}}}
            )()

    pods = FakePods(tmp_path, namespace="ns", session=Session(), server="https://api")  # type: ignore[arg-type]
    assert pods.write_log("web", "x").name == "app.log"
    with pytest.raises(ConfigError, match="name it"):
        FakePods(tmp_path, namespace="ns").write_log("web", "x")


def test_serve_port_registers_a_loopback_handler_until_close(tmp_path: Path) -> None:
    pods = FakePods(tmp_path, namespace="ns")
    host, port = pods.serve_port("web", 8080, lambda conn: conn.sendall(b"hi"))
    assert (tmp_path / "ns" / "web" / "ports" / "8080").read_text() == f"{host}:{port}\n"
    with socket.create_connection((host, port), timeout=10) as conn:
        assert conn.recv(16) == b"hi"
    pods.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=10).close()


def test_serve_port_refuses_a_handler_that_is_not_callable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="handler must be callable"):
        FakePods(tmp_path, namespace="ns").serve_port("web", 80, "not a handler")  # type: ignore[arg-type]


# -- artifacts ---------------------------------------------------------------------------------------------


def test_failure_artifacts_hold_each_fake_pods_logs_beside_its_namespace(tmp_path: Path) -> None:
    class Session:
        def get(self, url: str, timeout: float) -> Any:
            return type("R", (), {"status_code": 200, "json": lambda _: {"items": []}})()

    pods_dir = tmp_path / "pods"
    streams.append_log(streams.log_path(pods_dir, "ns1", "web", "main"), "served a request")
    dest = artifacts.collect(
        tmp_path / "artifacts",
        session=Session(),  # type: ignore[arg-type]
        server="https://api",
        namespaces=["ns1"],
        resources=[],
        pod_logs=streams.pod_logs(pods_dir, ["ns1"]),
    )
    assert (
        (dest / "ns1" / "pod-logs" / "web" / "main.log").read_text().endswith(" stdout F served a request\n")
    )


class _PodsSession:
    """The API of one namespace holding `pods`; everything else is empty."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def get(self, url: str, timeout: float) -> Any:
        items = self.pods if url == "https://api/api/v1/namespaces/ns1/pods" else []
        return type(
            "R",
            (),
            {"status_code": 200, "json": lambda _: {"items": items}, "raise_for_status": lambda _: None},
        )()


def test_failure_artifacts_show_the_default_line_for_containers_nothing_wrote_for(tmp_path: Path) -> None:
    pods_dir = tmp_path / "pods"
    streams.append_log(streams.log_path(pods_dir, "ns1", "web", "main"), "served a request")
    web = {
        "metadata": {"name": "web"},
        "spec": {
            "nodeName": "kwok-node",
            "initContainers": [{"name": "migrate"}],
            "containers": [{"name": "main"}, {"name": "sidecar"}],
        },
    }
    unscheduled = {"metadata": {"name": "pending"}, "spec": {"containers": [{"name": "main"}]}}
    dest = artifacts.collect(
        tmp_path / "artifacts",
        session=_PodsSession([web, unscheduled]),  # type: ignore[arg-type]
        server="https://api",
        namespaces=["ns1"],
        resources=[],
        pod_logs=streams.pod_logs(pods_dir, ["ns1"]),
        fake_pods=True,
    )
    logs = dest / "ns1" / "pod-logs"
    assert not (dest / "errors.txt").exists()
    assert sorted(p.relative_to(logs).as_posix() for p in logs.rglob("*.log")) == [
        "web/main.log",
        "web/migrate.log",
        "web/sidecar.log",
    ]
    assert (logs / "web" / "main.log").read_text().endswith(" stdout F served a request\n")
    assert (
        (logs / "web" / "sidecar.log")
        .read_text()
        .endswith(' stdout F container "sidecar" of pod ns1/web is fake (kwok): no log written yet\n')
    )
    assert 'container "migrate" of pod ns1/web' in (logs / "web" / "migrate.log").read_text()


def test_the_default_log_line_is_the_one_envtests_kwok_build_writes() -> None:
    patch = next(
        (Path(kwok.__file__).parent.parent / "binaries" / "patches" / "kwok-v0.8.0").glob("*sandbox*.patch")
    ).read_text()
    go_format = '"%s stdout F container %q of pod %s/%s is fake (kwok): no log written yet\\n"'
    assert go_format in patch
    go_line = go_format.strip('"').replace("\\n", "")
    expected = go_line.replace("%s stdout F ", "").replace("%q", '"main"').replace("%s/%s", "ns/web")
    assert streams.no_log_yet("ns", "web", "main") == expected


# -- the plane's wiring ----------------------------------------------------------------------------------


def _apiserver_args(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> dict[str, str]:
    plane = ControlPlane(workdir=tmp_path, **kwargs)
    plane.etcd_url = "http://127.0.0.1:1"
    plane._write_pki()
    launched: dict[str, dict[str, str]] = {}
    monkeypatch.setattr(plane, "_launch", lambda name, binary, args, **_: launched.setdefault(name, args))
    plane._start_apiserver(tmp_path / "kube-apiserver")
    return launched["kube-apiserver"]


def test_the_apiserver_verifies_kwok_and_proves_itself_with_certificates_of_the_planes_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = _apiserver_args(tmp_path, monkeypatch)
    pki = tmp_path / "pki"
    assert args["kubelet-certificate-authority"] == str(pki / "ca.crt")
    assert args["kubelet-preferred-address-types"] == "InternalIP"
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    for name in ("kwok", "apiserver-kubelet-client"):
        cert = x509.load_pem_x509_certificate((pki / f"{name}.crt").read_bytes())
        assert cert.issuer == ca.subject
        cert.verify_directly_issued_by(ca)
    serving = x509.load_pem_x509_certificate((pki / "kwok.crt").read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert args["kubelet-client-certificate"] == str(pki / "apiserver-kubelet-client.crt")


@pytest.mark.parametrize("kwargs", [{"pod_streams": False}, {"components": "etcd,kube-apiserver"}])
def test_without_pod_streams_or_kwok_nothing_of_it_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any]
) -> None:
    args = _apiserver_args(tmp_path, monkeypatch, **kwargs)
    assert not [name for name in args if name.startswith("kubelet-")]
    assert not (tmp_path / "pki" / "kwok.crt").exists()
