"""kwok's fake pods answer `kubectl logs`, `exec`, `attach` and `port-forward` through the apiserver,
as pods on a kubelet do (semantics: envtest.plane.streams)."""

from __future__ import annotations

import json
import queue
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.stream import portforward, stream
from kubernetes.stream.ws_client import ERROR_CHANNEL
from mysqlkit import Timeouts

from envtest import binaries, eventually
from envtest.errors import BinaryNotFound
from envtest.fakepods import FakePods

# kwok's pods and the local plane's kwok server: skipped on other backends.
pytestmark = pytest.mark.envtest_local

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def kubectl() -> str:
    try:
        return str(binaries.resolve("kubectl", install=False))
    except BinaryNotFound:
        pytest.skip("no kubectl installed with the plane (`envtest binaries install kubectl`)")


def _run_pod(
    core: k8s_client.CoreV1Api, namespace: str, name: str, timeouts: Timeouts, **container: Any
) -> None:
    spec = {"name": "main", "image": "busybox", **container}
    core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": {"containers": [spec]}})

    def ready() -> None:
        conditions = core.read_namespaced_pod(name, namespace).status.conditions or []
        assert any(c.type == "Ready" and c.status == "True" for c in conditions)

    eventually(ready, timeout=timeouts(30))


@pytest.fixture
def core(k8s: Any) -> k8s_client.CoreV1Api:
    return k8s_client.CoreV1Api(k8s)


@pytest.fixture
def pod(core: k8s_client.CoreV1Api, namespace: str, timeouts: Timeouts) -> str:
    _run_pod(core, namespace, "web", timeouts, env=[{"name": "GREETING", "value": "hello from the pod"}])
    return "web"


def _kubectl(
    kubectl: str, kubeconfig: Path, *args: str, timeouts: Timeouts, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl, f"--kubeconfig={kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, timeout=timeouts(60),
    )  # fmt: skip


# -- exec ---------------------------------------------------------------------------------------------


def _run_to_end(resp: Any, timeouts: Timeouts) -> None:
    """Read a websocket exec stream until the command ends, for at most 30 s (scaled): a stream
    that never closes fails the test instead of holding the run."""
    resp.run_forever(timeout=timeouts(30))
    assert not resp.is_open(), "the exec stream was still open after 30 s"


def test_exec_runs_in_the_pods_sandbox_with_its_env_and_working_dir(
    core: k8s_client.CoreV1Api, namespace: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    _run_pod(core, namespace, "app", timeouts, env=[{"name": "MODE", "value": "test"}], workingDir="/srv/app")
    out = stream(
        core.connect_get_namespaced_pod_exec, "app", namespace,
        command=["sh", "-c", 'pwd; echo "MODE=$MODE"'], stdout=True, stderr=True, stdin=False, tty=False,
        _request_timeout=timeouts(30),
    )  # fmt: skip
    assert out.splitlines() == [str(fake_pods.sandbox("app") / "srv" / "app"), "MODE=test"]


@pytest.mark.envtest_pod_exec
def test_python_client_sees_the_exit_code(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, timeouts: Timeouts
) -> None:
    resp = stream(
        core.connect_get_namespaced_pod_exec, pod, namespace,
        command=["sh", "-c", "echo out; echo err >&2; exit 3"],
        stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False,
    )  # fmt: skip
    _run_to_end(resp, timeouts)
    assert (resp.read_stdout(), resp.read_stderr()) == ("out\n", "err\n")
    assert resp.returncode == 3


@pytest.mark.envtest_pod_exec
def test_kubectl_exec_passes_stdin_through_and_exits_with_the_commands_code(
    kubectl: str, cluster: Any, namespace: str, pod: str, timeouts: Timeouts
) -> None:
    done = _kubectl(
        kubectl, cluster.kubeconfig, "exec", "-i", "-n", namespace, pod, "--", "sh", "-c", "cat; exit 3",
        stdin="line one\nline two\n", timeouts=timeouts,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (3, "line one\nline two\n"), done.stderr


@pytest.mark.envtest_pod_exec
def test_exec_with_a_tty_runs_on_a_terminal_and_delivers_all_its_output(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, timeouts: Timeouts
) -> None:
    for _ in range(5):  # the last output of a command that exits at once must not be lost
        out = stream(
            core.connect_get_namespaced_pod_exec, pod, namespace,
            command=["sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty"],
            stdout=True, stderr=True, stdin=True, tty=True, _request_timeout=timeouts(30),
        )  # fmt: skip
        assert out.strip() == "on-a-tty"


@pytest.mark.envtest_pod_exec
def test_a_missing_command_fails_naming_it(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, timeouts: Timeouts
) -> None:
    resp = stream(
        core.connect_get_namespaced_pod_exec, pod, namespace,
        command=["no-such-command-envtest"], stdout=True, stderr=True, stdin=False, tty=False,
        _preload_content=False,
    )  # fmt: skip
    _run_to_end(resp, timeouts)
    assert "no-such-command-envtest" in resp.read_channel(ERROR_CHANNEL)


# -- logs and attach ----------------------------------------------------------------------------------


def test_logs_say_a_fake_container_wrote_nothing_until_the_test_writes(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, fake_pods: FakePods
) -> None:
    first = core.read_namespaced_pod_log(pod, namespace)
    assert "no log written yet" in first
    fake_pods.write_log(pod, "started\nlistening on :8080")
    fake_pods.write_log(pod, "a warning", stream="stderr")
    lines = core.read_namespaced_pod_log(pod, namespace).splitlines()
    assert lines[1:] == ["started", "listening on :8080", "a warning"]
    assert core.read_namespaced_pod_log(pod, namespace, tail_lines=1) == "a warning\n"


def test_previous_logs_exist_only_once_written(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, fake_pods: FakePods
) -> None:
    with pytest.raises(k8s_client.ApiException) as refused:
        core.read_namespaced_pod_log(pod, namespace, previous=True)
    assert refused.value.status == 400 and "previous terminated container" in refused.value.body
    fake_pods.write_log(pod, "crashed: out of memory", previous=True)
    assert core.read_namespaced_pod_log(pod, namespace, previous=True) == "crashed: out of memory\n"


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.fixture
def follow(kubectl: str, cluster: Any) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> queue.Queue[str]:
        proc = subprocess.Popen(
            [kubectl, f"--kubeconfig={cluster.kubeconfig}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        procs.append(proc)
        return _lines(proc)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_logs_follow_sees_later_writes(
    follow: Any, namespace: str, pod: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    lines = follow("logs", "-f", "-n", namespace, pod)
    assert "no log written yet" in lines.get(timeout=timeouts(30))
    fake_pods.write_log(pod, "written while followed")
    assert lines.get(timeout=timeouts(30)) == "written while followed"


def test_attach_streams_what_the_container_writes_from_then_on(
    follow: Any, namespace: str, pod: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    fake_pods.write_log(pod, "before attach")
    lines = follow("attach", "-n", namespace, pod)

    def attached_output() -> None:
        fake_pods.write_log(pod, "after attach")
        assert lines.get(timeout=timeouts(2)) == "after attach"

    # attach shows only what comes after it connected, and connecting takes a moment: write until seen.
    eventually(attached_output, timeout=timeouts(30))


# -- port-forward -------------------------------------------------------------------------------------


def _shout(conn: socket.socket) -> None:
    conn.settimeout(30)  # a client that never writes ends this handler, not holds it
    data = conn.recv(1024)
    conn.sendall(data.upper())


def test_python_client_port_forward_reaches_the_registered_handler(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    fake_pods.serve_port(pod, 8080, _shout)
    pf = portforward(core.connect_get_namespaced_pod_portforward, pod, namespace, ports="8080")
    sock = pf.socket(8080)
    sock.settimeout(timeouts(30))
    sock.sendall(b"hello")
    assert sock.recv(1024) == b"HELLO"
    sock.close()


def test_kubectl_port_forward_reaches_the_registered_handler(
    follow: Any, namespace: str, pod: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    fake_pods.serve_port(pod, 8080, _shout)
    lines = follow("port-forward", "-n", namespace, f"pod/{pod}", ":8080", "--address=127.0.0.1")
    first = lines.get(timeout=timeouts(30))
    match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8080", first)
    assert match, first
    with socket.create_connection(("127.0.0.1", int(match[1])), timeout=timeouts(10)) as conn:
        conn.sendall(b"ping")
        assert conn.recv(1024) == b"PING"


def test_port_forward_to_an_unregistered_port_fails_naming_it(
    follow: Any, namespace: str, pod: str, timeouts: Timeouts
) -> None:
    lines = follow("port-forward", "-n", namespace, f"pod/{pod}", ":9999", "--address=127.0.0.1")
    match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 9999", lines.get(timeout=timeouts(30)))
    assert match
    with socket.create_connection(("127.0.0.1", int(match[1])), timeout=timeouts(10)) as conn:
        conn.sendall(b"anyone?")
        seen = []
        while not any("no port-forward target registered for port 9999" in line for line in seen):
            seen.append(lines.get(timeout=timeouts(30)))  # queue.Empty fails the test, showing nothing came
    assert any(f"pod {namespace}/{pod}" in line for line in seen), seen


# -- who may talk to kwok's server ----------------------------------------------------------------------


def _healthz_over_tls(context: ssl.SSLContext, port: int, timeouts: Timeouts) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeouts(10)) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: kwok\r\n\r\n")
        return tls.recv(1024)  # TLS 1.3 reports a missing client certificate on the first read


def test_kwok_server_listens_on_loopback_and_refuses_clients_without_a_plane_certificate(
    core: k8s_client.CoreV1Api, cluster: Any, timeouts: Timeouts
) -> None:
    node = core.list_node().items[0]
    assert [a.address for a in node.status.addresses] == ["127.0.0.1"]
    port = node.status.daemon_endpoints.kubelet_endpoint.port
    ca = cluster.kubeconfig.parent / "pki" / "ca.crt"
    context = ssl.create_default_context(cafile=str(ca))  # kwok's serving certificate: of the plane's CA
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        _healthz_over_tls(context, port, timeouts)
    with socket.create_connection(("127.0.0.1", port), timeout=timeouts(10)) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: kwok\r\n\r\n")
        assert b"200 OK" not in plain.recv(1024)  # no plain HTTP beside the TLS server


# -- exec is the test's to allow ----------------------------------------------------------------------


def test_exec_the_test_did_not_ask_for_is_refused_naming_the_pod_and_runs_nothing_here(
    core: k8s_client.CoreV1Api, namespace: str, pod: str, tmp_path: Path, timeouts: Timeouts
) -> None:
    # What an operator under test might send into its database pod: it must not reach this machine.
    marker = tmp_path / "ran-on-the-host"
    resp = stream(
        core.connect_get_namespaced_pod_exec, pod, namespace,
        command=["touch", str(marker)], stdout=True, stderr=True, stdin=False, tty=False,
        _preload_content=False,
    )  # fmt: skip
    _run_to_end(resp, timeouts)
    status = json.loads(resp.read_channel(ERROR_CHANNEL))
    assert status["status"] == "Failure"
    assert f"exec in pod {namespace}/{pod} is off" in status["message"]
    assert not marker.exists()
    assert "no log written yet" in core.read_namespaced_pod_log(pod, namespace), "logs still served"


def test_fake_pods_allow_exec_in_the_tests_namespace_only(
    core: k8s_client.CoreV1Api, namespace: str, fake_pods: FakePods, timeouts: Timeouts
) -> None:
    _run_pod(core, namespace, "mine", timeouts)
    assert stream(
        core.connect_get_namespaced_pod_exec, "mine", namespace,
        command=["echo", "allowed"], stdout=True, stderr=True, stdin=False, tty=False,
    ).strip() == "allowed"  # fmt: skip
    fake_pods.forbid_exec()
    resp = stream(
        core.connect_get_namespaced_pod_exec, "mine", namespace,
        command=["true"], stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False,
    )  # fmt: skip
    _run_to_end(resp, timeouts)
    assert "is off" in json.loads(resp.read_channel(ERROR_CHANNEL))["message"]


# -- failure artifacts ----------------------------------------------------------------------------------


@pytest.fixture
def real_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner run at the binaries we have (asked for
    # before `pytester`, while ~/.cache is still ours).
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


def test_a_failed_tests_artifacts_hold_its_fake_pods_logs(
    real_binaries: None, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(
        test_fails="""
        from kubernetes import client

        def test_fails_on_purpose(envtest_k8s, envtest_namespace, envtest_fake_pods):
            spec = {"containers": [{"name": "main", "image": "busybox"}]}
            pod = {"metadata": {"name": "web"}, "spec": spec}
            client.CoreV1Api(envtest_k8s).create_namespaced_pod(envtest_namespace, pod)
            envtest_fake_pods.write_log("web", "the evidence")
            assert False, "failing on purpose"
        """
    )
    result = pytester.runpytest_subprocess("--envtest-components=all", "--envtest-artifacts-dir=out")
    result.assert_outcomes(failed=1)
    dest = pytester.path / "out" / "test_fails.py-test_fails_on_purpose"
    (log,) = dest.glob("*/pod-logs/web/main.log")
    assert log.read_text().endswith(" stdout F the evidence\n")
