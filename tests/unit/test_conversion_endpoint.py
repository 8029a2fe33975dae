"""The run's conversion endpoint on kind and existing clusters, without a cluster: which address it
serves on, when the ini key is a usage error, the detached process's state file and command line, and
that the process stops when told to or when its owner dies (no leak)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from supervisor_fakes import bystander, lock_holder, reap

from envtest.errors import ConfigError, ProcessError
from envtest.plane import supervisor
from envtest.plugin import endpoint
from envtest.plugin.session import new_session
from envtest.webhooks import detached

pytest_plugins = ["pytester"]

FACTORY = """
from envtest.webhooks import WebhookServer


def serve(certs):
    server = WebhookServer(certs)
    server.conversion("/convert", lambda obj, to: {**obj, "apiVersion": to})
    return server.start()
"""


def _no_gateway(network: str) -> str:
    raise AssertionError(f"docker asked for {network!r}")


# -- the address --------------------------------------------------------------------------------------


def test_local_planes_are_served_on_loopback_whatever_host_is_configured() -> None:
    assert endpoint.reachable_host("local", "10.0.0.5", gateway=_no_gateway) == "127.0.0.1"


def test_kind_uses_the_kind_network_gateway_unless_a_host_is_configured() -> None:
    asked: list[str] = []

    def gateway(network: str) -> str:
        asked.append(network)
        return "172.18.0.1"

    assert endpoint.reachable_host("kind", None, gateway=gateway) == "172.18.0.1"
    assert asked == ["kind"]
    assert endpoint.reachable_host("kind", "192.168.5.2", gateway=_no_gateway) == "192.168.5.2"


def test_kind_without_its_docker_network_says_why() -> None:
    def gateway(network: str) -> str:
        raise ConfigError(f"docker network inspect {network}: no such network")

    with pytest.raises(ConfigError, match="no such network"):
        endpoint.reachable_host("kind", None, gateway=gateway)


def test_an_existing_cluster_needs_the_configured_host_and_names_both_ways_to_set_it() -> None:
    assert endpoint.reachable_host("existing", "10.1.2.3", gateway=_no_gateway) == "10.1.2.3"
    with pytest.raises(ConfigError, match="envtest_webhook_host or ENVTEST_WEBHOOK_HOST"):
        endpoint.reachable_host("existing", None, gateway=_no_gateway)


def test_the_environment_beats_the_ini_for_the_host(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(endpoint.HOST_ENV, raising=False)
    pytester.makeini("[pytest]\nenvtest_webhook_host = 10.0.0.1\n")
    config = pytester.parseconfigure()
    assert endpoint.explicit_host(config) == "10.0.0.1"
    monkeypatch.setenv(endpoint.HOST_ENV, "10.0.0.2")
    assert endpoint.explicit_host(config) == "10.0.0.2"


# -- the ini key per backend ----------------------------------------------------------------------------


def test_conversion_on_an_existing_cluster_without_a_host_is_a_usage_error_naming_key_and_env(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(endpoint.HOST_ENV, raising=False)
    pytester.makeini("[pytest]\nenvtest_conversion_webhook = json:loads\n")
    with pytest.raises(pytest.UsageError) as info:
        pytester.parseconfigure("--envtest-backend=existing")
    message = str(info.value)
    assert message.startswith("envtest_conversion_webhook: ")
    assert "envtest_webhook_host" in message and "ENVTEST_WEBHOOK_HOST" in message


@pytest.mark.parametrize("ini_host", [True, False], ids=["ini", "env"])
def test_conversion_on_an_existing_cluster_with_a_host_is_accepted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini_host: bool
) -> None:
    monkeypatch.delenv(endpoint.HOST_ENV, raising=False)
    ini = "envtest_conversion_webhook = json:loads\n"
    if ini_host:
        ini += "envtest_webhook_host = 10.0.0.1\n"
    else:
        monkeypatch.setenv(endpoint.HOST_ENV, "10.0.0.1")
    pytester.makeini("[pytest]\n" + ini)
    config = pytester.parseconfigure("--envtest-backend=existing")
    assert new_session(config).settings.conversion_webhook == "json:loads"


def test_conversion_on_kind_is_accepted_and_still_imports_the_factory(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nenvtest_conversion_webhook = json:loads\n")
    assert new_session(pytester.parseconfig("--envtest-backend=kind")).settings.backend == "kind"
    pytester.makeini("[pytest]\nenvtest_conversion_webhook = no_such_module_xyz:serve\n")
    with pytest.raises(pytest.UsageError, match="'no_such_module_xyz:serve': cannot import"):
        new_session(pytester.parseconfig("--envtest-backend=kind"))


# -- the detached endpoint's state and command line -----------------------------------------------------


def _state(pid: int) -> detached.EndpointState:
    return detached.EndpointState(
        pid=pid,
        pid_start=supervisor.pid_start_time(pid) or 0,
        factory="pkg.conv:serve",
        url="https://172.18.0.1:4443/convert",
        ca="-----BEGIN CERTIFICATE-----\n",
        host="172.18.0.1",
    )


def test_endpoint_state_reads_back_while_its_process_holds_the_lock_and_not_after(tmp_path: Path) -> None:
    holder = lock_holder(tmp_path)
    try:
        state = _state(holder.pid)
        state.write(tmp_path)
        assert json.loads((tmp_path / supervisor.STATE_FILE).read_text())["url"] == state.url
        assert detached.read_state(tmp_path) == state
    finally:
        reap(holder)
    assert detached.read_state(tmp_path) is None  # the lock went with the process


def test_stopping_a_stale_endpoint_state_never_signals_the_recorded_pid(tmp_path: Path) -> None:
    other = bystander()  # what a reused pid points at; nobody holds the lock
    try:
        _state(other.pid).write(tmp_path)
        (tmp_path / supervisor.LOCK_FILE).touch()
        assert detached.stop(tmp_path, timeout=1) is False
        assert other.poll() is None
    finally:
        reap(other)


def test_a_garbled_or_foreign_state_file_reads_as_none(tmp_path: Path) -> None:
    (tmp_path / supervisor.STATE_FILE).write_text("{not json")
    assert detached.read_state(tmp_path) is None
    (tmp_path / supervisor.STATE_FILE).write_text(json.dumps({"pid": 1, "kubeconfig": "k"}))
    assert detached.read_state(tmp_path) is None
    assert detached.read_state(tmp_path / "missing") is None


def test_endpoint_command_line_reads_back(tmp_path: Path) -> None:
    argv = detached.argv(
        tmp_path, factory="pkg.conv:serve", host="172.18.0.1", path="/c", owner_pid=42, python_path=("/p",)
    )
    assert argv[:3] == [sys.executable, "-m", "envtest.webhooks.detached"]
    args = detached.build_parser().parse_args(argv[3:])
    assert (args.state_dir, args.factory, args.path) == (tmp_path, "pkg.conv:serve", "/c")
    assert args.host == "172.18.0.1"
    assert (args.owner_pid, args.python_path) == (42, ["/p"])
    plain = detached.build_parser().parse_args(detached.argv(tmp_path, factory="f:g", host="h")[3:])
    assert (plain.owner_pid, plain.python_path, plain.path) == (None, [], "/convert")


# -- the detached endpoint process ----------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A module the endpoint imports by name through the import path it is handed (as from pytest)."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "conv_factory_xyz.py").write_text(FACTORY)
    return tmp_path / "proj"


def _launch(state_dir: Path, project: Path, owner: int | None) -> detached.EndpointState:
    return detached.launch(
        state_dir,
        factory="conv_factory_xyz:serve",
        host="127.0.0.1",
        owner_pid=owner,
        python_path=(str(project),),
        timeout=60,
    )


def _handshake(state: detached.EndpointState, cafile: Path) -> None:
    cafile.write_text(state.ca)
    host, port = state.url.removeprefix("https://").split("/")[0].rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        pass  # the certificate names the host and chains to the recorded CA


def _running(pid: int) -> bool:
    try:  # a zombie has exited: it is our child, reaped whenever subprocess gets round to it
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _gone(state_dir: Path, state: detached.EndpointState, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not supervisor.lock_held(state_dir) and not _running(state.pid):
            return True
        time.sleep(0.1)
    return False


def test_detached_endpoint_serves_the_recorded_url_until_stopped(tmp_path: Path, project: Path) -> None:
    state_dir = tmp_path / "endpoint"
    state = _launch(state_dir, project, owner=None)
    try:
        assert state.url.startswith("https://127.0.0.1:") and state.url.endswith("/convert")
        assert detached.read_state(state_dir) == state
        _handshake(state, tmp_path / "ca.pem")
        with pytest.raises(supervisor.AlreadySupervised, match="already runs"):
            _launch(state_dir, project, owner=None)  # one endpoint per state dir, ever
        assert detached.read_state(state_dir) == state, "the refused launch cleared the live state"
    finally:
        assert detached.stop(state_dir, timeout=30) is True
    assert _gone(state_dir, state)
    assert not (state_dir / supervisor.STATE_FILE).exists()
    assert detached.stop(state_dir) is False


def test_detached_endpoint_stops_itself_when_its_owner_dies(tmp_path: Path, project: Path) -> None:
    owner = subprocess.Popen(["sleep", "120"])
    state_dir = tmp_path / "endpoint"
    try:
        state = _launch(state_dir, project, owner=owner.pid)
        assert detached.read_state(state_dir) == state
        owner.kill()  # a SIGKILLed xdist controller: nobody will call stop()
        owner.wait()
        assert _gone(state_dir, state), (state_dir / "supervisor.log").read_text()
        assert f"owner {owner.pid} is gone" in (state_dir / "supervisor.log").read_text()
    finally:
        reap(owner)
        detached.stop(state_dir, timeout=5)


def test_an_unbindable_host_fails_the_launch_with_the_reason(tmp_path: Path, project: Path) -> None:
    # What an existing cluster's envtest_webhook_host that is not an address of this machine gives.
    with pytest.raises(ProcessError, match=r"exited with 1(.|\n)*on 192\.0\.2\.1: .*ssign"):
        detached.launch(
            tmp_path / "endpoint",
            factory="conv_factory_xyz:serve",
            host="192.0.2.1",  # TEST-NET-1: never local
            python_path=(str(project),),
        )
    assert not supervisor.lock_held(tmp_path / "endpoint")


def test_the_operators_conversion_factory_binds_the_address_its_certificate_names(tmp_path: Path) -> None:
    # On kind that address is the docker gateway: a server bound to 127.0.0.1 there is unreachable.
    from envtest.webhooks import serving_certs
    from mysql_operator.webhooks.server import conversion_endpoint

    server = conversion_endpoint(serving_certs(tmp_path / "certs", ("127.0.0.2",)))
    try:
        assert server.url == f"https://127.0.0.2:{server.port}"
        socket.create_connection(("127.0.0.2", server.port), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):  # not 0.0.0.0, not 127.0.0.1
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    finally:
        server.stop()
