"""Exec-plugin users (EKS, GKE, …) on the existing backend: one plugin run per credential, not per request.

The plugin is a fake that appends a line to a counter file on every run and prints an ExecCredential
(token ``tok-<run>``; expiry read from a file the test writes). The apiserver is a fake too (a unit
test): an HTTP server that records the Authorization header of every request and answers 401 to the
tokens a test revokes. Time is a fake clock handed to `ExecCredentials`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pykube
import pytest
import yaml

from envtest import ownedtemp, runs
from envtest.clusters import Cluster, ExistingCluster
from envtest.errors import ExecPluginError
from envtest.execauth import REFRESH_MARGIN, ExecAuthAdapter, ExecCredentials
from envtest.pki import CertificateAuthority

API = "client.authentication.k8s.io/v1beta1"
T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.2",
    "gitCommit": "fake",
    "gitTreeState": "clean",
    "buildDate": "2030-01-01T00:00:00Z",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
}

PLUGIN = """\
#!{python} -S
import json, os, sys
counter = os.environ["COUNTER"]
with open(counter, "a") as fh:
    fh.write("run\\n")
with open(counter) as fh:
    run = len(fh.readlines())
if os.environ.get("INFO_FILE"):
    with open(os.environ["INFO_FILE"], "w") as fh:
        fh.write(os.environ.get("KUBERNETES_EXEC_INFO", "{{}}"))
if os.path.exists(os.environ.get("FAIL_FILE", "/nonexistent")):
    print("boom: not logged in", file=sys.stderr)
    sys.exit(3)
if os.environ.get("CLIENT_CERT"):
    status = {{
        "clientCertificateData": open(os.environ["CLIENT_CERT"]).read(),
        "clientKeyData": open(os.environ["CLIENT_KEY"]).read(),
    }}
else:
    status = {{"token": f"tok-{{run}}"}}
expires = os.environ.get("EXPIRES_FILE")
if expires and os.path.exists(expires):
    status["expirationTimestamp"] = open(expires).read().strip()
print(json.dumps({{"apiVersion": "{api}", "kind": "ExecCredential", "status": status}}))
"""


class FakeClock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


class Recorder(BaseHTTPRequestHandler):
    """Answers like an apiserver would for these tests: /version, anything else `{}`; 401 for a
    revoked token. Records each request's Authorization header and client certificate CN."""

    server: ApiServer

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        cn = dict(x[0] for x in peer["subject"])["commonName"] if peer else ""
        self.server.seen.append(auth or cn)
        if auth.removeprefix("Bearer ") in self.server.revoked:
            self._reply(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        else:
            self._reply(200, VERSION if self.path.startswith("/version") else {})

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: Any) -> None:
        pass


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Recorder)
        self.seen: list[str] = []
        self.revoked: set[str] = set()
        self.scheme = "http"
        self.ca_pem = b""  # the CA clients trust, when serving https

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    server = ApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


class Setup:
    """A fake plugin and a kubeconfig whose user runs it against `server`."""

    def __init__(self, tmp_path: Path, server: ApiServer, **exec_extra: Any) -> None:
        self.dir = tmp_path
        self.counter = tmp_path / "runs"
        self.expires_file = tmp_path / "expires"
        self.fail_file = tmp_path / "fail"
        self.info_file = tmp_path / "info.json"
        plugin = tmp_path / "bin" / "fake-auth-plugin"
        plugin.parent.mkdir()
        plugin.write_text(PLUGIN.format(python=sys.executable, api=API))
        plugin.chmod(0o755)
        env = {
            "COUNTER": self.counter,
            "EXPIRES_FILE": self.expires_file,
            "FAIL_FILE": self.fail_file,
            "INFO_FILE": self.info_file,
            **exec_extra.pop("env", {}),
        }
        self.exec: dict[str, Any] = {
            "apiVersion": API,
            "command": str(plugin),
            "env": [{"name": k, "value": str(v)} for k, v in env.items()],
            **exec_extra,
        }
        cluster: dict[str, Any] = {"server": server.url}
        if server.scheme == "https":
            cluster["certificate-authority-data"] = base64.b64encode(server.ca_pem).decode()
        self.kubeconfig = tmp_path / "kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "eks", "cluster": cluster}],
                    "users": [{"name": "eks-admin", "user": {"exec": self.exec}}],
                    "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks-admin"}}],
                    "current-context": "eks",
                }
            )
        )

    @property
    def runs(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def expire_at(self, when: dt.datetime) -> None:
        self.expires_file.write_text(when.strftime("%Y-%m-%dT%H:%M:%SZ"))

    def client(self, clock: FakeClock) -> tuple[pykube.HTTPClient, ExecCredentials]:
        """A pykube client whose exec credentials run on `clock` (the shared cache runs on real time)."""
        config = pykube.KubeConfig.from_file(str(self.kubeconfig))
        credentials = ExecCredentials(self.exec, base_dir=self.dir, clock=clock)
        adapter = ExecAuthAdapter(config, credentials=credentials)
        return pykube.HTTPClient(config, http_adapter=adapter), credentials


def get(client: pykube.HTTPClient, path: str = "/api") -> int:
    return int(client.session.get(f"{client.url}{path}", timeout=10).status_code)


def test_plain_pykube_runs_the_plugin_on_every_request(tmp_path: Path, apiserver: ApiServer) -> None:
    # The behaviour being fixed, and proof that the fake plugin's counter counts.
    setup = Setup(tmp_path, apiserver)
    client = pykube.HTTPClient(pykube.KubeConfig.from_file(str(setup.kubeconfig)))
    for _ in range(3):
        assert get(client) == 200
    assert setup.runs == 3


def test_an_existing_cluster_runs_the_plugin_once_for_many_requests_and_clients(
    tmp_path: Path, apiserver: ApiServer
) -> None:
    setup = Setup(tmp_path, apiserver)
    setup.expire_at(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    cluster = ExistingCluster(setup.kubeconfig)
    assert cluster.version == "1.37.2"
    for _ in range(20):
        assert cluster.session.get(f"{cluster.server}/api", timeout=10).status_code == 200
    other = cluster.new_pykube()  # another client of the same user shares the credential
    for _ in range(5):
        assert get(other) == 200
    cluster.close()
    other.session.close()
    assert setup.runs == 1
    assert apiserver.seen == ["Bearer tok-1"] * 26


def test_a_credential_is_fetched_again_only_once_it_nears_its_expiry(
    tmp_path: Path, apiserver: ApiServer
) -> None:
    setup = Setup(tmp_path, apiserver)
    clock = FakeClock(T0)
    setup.expire_at(T0 + dt.timedelta(hours=1))
    client, credentials = setup.client(clock)
    for minutes in (0, 1, 30, 54):
        clock.now = T0 + dt.timedelta(minutes=minutes)
        assert get(client) == 200
    assert setup.runs == 1
    setup.expire_at(T0 + dt.timedelta(hours=2))
    clock.now = T0 + dt.timedelta(hours=1) - REFRESH_MARGIN  # due: renewed before it expires
    assert get(client) == 200
    clock.now += dt.timedelta(minutes=30)
    assert get(client) == 200
    assert setup.runs == 2 and credentials.fetches == 2
    assert apiserver.seen == ["Bearer tok-1"] * 4 + ["Bearer tok-2"] * 2


def test_a_short_lived_credential_is_renewed_at_half_its_life_not_per_request(
    tmp_path: Path, apiserver: ApiServer
) -> None:
    setup = Setup(tmp_path, apiserver)
    clock = FakeClock(T0)
    setup.expire_at(T0 + dt.timedelta(minutes=2))  # shorter than the 5 min margin
    client, _ = setup.client(clock)
    for seconds in (0, 10, 59):
        clock.now = T0 + dt.timedelta(seconds=seconds)
        assert get(client) == 200
    assert setup.runs == 1
    clock.now = T0 + dt.timedelta(seconds=60)
    assert get(client) == 200
    assert setup.runs == 2


def test_a_credential_without_expiry_is_kept_until_the_apiserver_refuses_it(
    tmp_path: Path, apiserver: ApiServer
) -> None:
    setup = Setup(tmp_path, apiserver)
    clock = FakeClock(T0)
    client, _ = setup.client(clock)
    assert get(client) == 200
    clock.now = T0 + dt.timedelta(days=3650)
    assert get(client) == 200
    assert setup.runs == 1
    apiserver.revoked.add("tok-1")
    assert get(client) == 401  # as client-go: the refused request fails, the next one refetches
    assert get(client) == 200
    assert setup.runs == 2
    assert apiserver.seen[-1] == "Bearer tok-2"


def test_a_burst_of_401s_for_one_credential_refetches_once(tmp_path: Path, apiserver: ApiServer) -> None:
    setup = Setup(tmp_path, apiserver)
    client, credentials = setup.client(FakeClock(T0))
    first = credentials.get()
    assert setup.runs == 1
    credentials.invalidate(first)
    second = credentials.get()
    credentials.invalidate(first)  # a late 401 for the credential already replaced
    assert credentials.get() is second
    assert setup.runs == 2
    client.session.close()


def test_concurrent_first_requests_share_one_plugin_run(tmp_path: Path, apiserver: ApiServer) -> None:
    setup = Setup(tmp_path, apiserver)
    client, _ = setup.client(FakeClock(T0))
    start = threading.Barrier(8)
    codes: list[int] = []

    def request() -> None:
        start.wait()
        codes.append(get(client))

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert codes == [200] * 8
    assert setup.runs == 1


def test_a_failing_plugin_names_its_command_exit_status_stderr_and_install_hint(
    tmp_path: Path, apiserver: ApiServer
) -> None:
    setup = Setup(tmp_path, apiserver, installHint="Install it with: pip install fake-auth")
    setup.fail_file.touch()
    client, _ = setup.client(FakeClock(T0))
    with pytest.raises(ExecPluginError) as info:
        get(client)
    message = str(info.value)
    assert "bin/fake-auth-plugin" in message and "exited 3" in message
    assert "boom: not logged in" in message and "pip install fake-auth" in message
    assert apiserver.seen == [], "no request is sent without a credential"


def test_a_missing_plugin_is_named_with_its_install_hint(tmp_path: Path, apiserver: ApiServer) -> None:
    setup = Setup(tmp_path, apiserver, installHint="see https://example.invalid/install")
    setup.exec["command"] = "envtest-no-such-auth-plugin"
    with pytest.raises(ExecPluginError, match=r"'envtest-no-such-auth-plugin' not found\n.*example\.invalid"):
        ExecCredentials(setup.exec, label="user 'eks-admin'").get()


def test_a_plugin_answer_without_a_credential_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "empty-plugin"
    script.write_text(
        f"#!{sys.executable} -S\n"
        f'print(\'{{"apiVersion": "{API}", "kind": "ExecCredential", "status": {{}}}}\')\n'
    )
    script.chmod(0o755)
    credentials = ExecCredentials({"apiVersion": API, "command": str(script)}, label="user 'u'")
    with pytest.raises(ExecPluginError, match=r"user 'u': exec plugin .* printed neither status\.token"):
        credentials.get()


def test_a_relative_command_runs_from_the_kubeconfig_folder_with_cluster_info_when_asked(
    tmp_path: Path, apiserver: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = Setup(tmp_path, apiserver, provideClusterInfo=True)
    setup.exec["command"] = "./bin/fake-auth-plugin"
    config = yaml.safe_load(setup.kubeconfig.read_text())
    config["users"][0]["user"]["exec"] = setup.exec
    setup.kubeconfig.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path.parent)  # elsewhere: only the kubeconfig's folder finds ./bin
    client = Cluster.new_pykube_from(setup.kubeconfig)
    assert get(client) == 200
    client.session.close()
    info = json.loads(setup.info_file.read_text())
    assert info["kind"] == "ExecCredential" and info["apiVersion"] == API
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == apiserver.url


def test_the_kubernetes_client_keeps_its_own_credential_cache(tmp_path: Path, apiserver: ApiServer) -> None:
    from kubernetes import client

    setup = Setup(tmp_path, apiserver)
    setup.expire_at(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    cluster = ExistingCluster(setup.kubeconfig)
    before = setup.runs
    api = client.VersionApi(cluster.k8s)
    for _ in range(5):
        assert api.get_code().git_version == "v1.37.2"
    assert setup.runs - before == 1, "the kubernetes client ran the plugin per request"
    cluster.close()


# -- a plugin that answers with a client certificate (Teleport's `tsh kube credentials`, …) ---------


@pytest.fixture
def tls_apiserver(tmp_path: Path) -> Iterator[tuple[ApiServer, CertificateAuthority]]:
    ca = CertificateAuthority.create("fake-apiserver-ca")
    cert, key = ca.issue_serving("fake-apiserver", ["127.0.0.1"]).write(tmp_path / "server", "tls")
    ca_file = tmp_path / "server" / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca_file)
    context.verify_mode = ssl.CERT_REQUIRED
    server = ApiServer()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.scheme = "https"
    server.ca_pem = ca.cert_pem
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, ca
    server.shutdown()
    server.server_close()


def test_a_client_certificate_credential_is_fetched_once_and_kept_in_private_files(
    tmp_path: Path, tls_apiserver: tuple[ApiServer, CertificateAuthority]
) -> None:
    server, ca = tls_apiserver
    pair = ca.issue_client("exec-user")
    creds = tmp_path / "issued"
    creds.mkdir()
    (creds / "c.pem").write_bytes(pair.cert_pem)
    (creds / "k.pem").write_bytes(pair.key_pem)
    setup = Setup(tmp_path, server, env={"CLIENT_CERT": creds / "c.pem", "CLIENT_KEY": creds / "k.pem"})
    client, credentials = setup.client(FakeClock(T0))
    for _ in range(4):
        assert get(client) == 200
    assert setup.runs == 1
    assert server.seen == ["exec-user"] * 4
    files = credentials.get().cert_files
    assert files is not None
    for path in files:
        assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    # Its folder names this process, so one SIGKILLed process's keys are removed by the next.
    assert (Path(files[0]).parent / ownedtemp.OWNER).read_text() == runs.holder_identity()
    client.session.close()
