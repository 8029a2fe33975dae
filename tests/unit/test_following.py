"""Clients an operator's code made in an earlier test act as the operator running now: through the
file `KUBECONFIG` names (an exec credential plugin each client library runs itself) and through the
default configurations (which read the same credential before each request)."""

from __future__ import annotations

import asyncio
import base64
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from envtest import ambient
from envtest.plugin.following import follow_operator
from envtest.plugin.state import AMBIENT_KEY


def _identity(
    tmp_path: Path, name: str, token: str, *, server: str = "https://127.0.0.1:6443", ca: bytes = b"CA"
) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "plane",
                "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "identity", "context": {"cluster": "plane", "user": "sa", "namespace": name}}],
        "current-context": "identity",
    }
    path = tmp_path / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def session(tmp_path: Path) -> Any:
    """What the plugin's session stash holds: the private folder of the process's ambient files."""
    folder = tmp_path / "ambient"
    folder.mkdir(mode=0o700)
    stash = pytest.Stash()
    stash[AMBIENT_KEY] = (None, folder)  # type: ignore[assignment]
    return SimpleNamespace(stash=stash, folder=folder)


@pytest.fixture(autouse=True)
def own_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ambient, "_stack", ambient._Stack())


def _bearer(configuration: Any) -> str:
    return str(configuration.auth_settings()["BearerToken"]["value"])


def test_a_client_loaded_from_the_file_acts_as_each_later_operators_token(
    session: Any, tmp_path: Path
) -> None:
    """What an operator module does at import in the first test (`load_kube_config()` from the file
    `KUBECONFIG` names) carries the identity of the operator running now, tests later."""
    first = follow_operator(session, _identity(tmp_path, "test-1", "token-one"))
    assert first is not None
    imported = client.Configuration()
    config.load_kube_config(config_file=str(first.kubeconfig), client_configuration=imported)
    assert _bearer(imported) == "Bearer token-one"

    second = follow_operator(session, _identity(tmp_path, "test-2", "token-two"))

    assert (second.kubeconfig, second.credential) == (first.kubeconfig, first.credential), (
        "one file per cluster"
    )
    assert _bearer(imported) == "Bearer token-two"
    for path in session.folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert "token-two" not in second.kubeconfig.read_text(), "the token stays in the credential file"


def test_a_client_made_from_the_default_configuration_follows_too(session: Any, tmp_path: Path) -> None:
    """`CoreV1Api()` at import copies the default configuration of that moment (kopf's walkthrough
    style, made at module level): the copy reads the running operator's token, sync and async."""
    kubernetes_asyncio = pytest.importorskip("kubernetes_asyncio")
    one = _identity(tmp_path, "test-1", "token-one")
    follow = follow_operator(session, one)
    assert follow is not None
    with ambient.pointed(follow.kubeconfig, defaults_from=one, token_file=follow.credential):
        made_at_import = client.CoreV1Api().api_client.configuration
        async_made_at_import = kubernetes_asyncio.client.Configuration.get_default_copy()
    two = _identity(tmp_path, "test-2", "token-two")
    follow = follow_operator(session, two)
    assert follow is not None
    with ambient.pointed(follow.kubeconfig, defaults_from=two, token_file=follow.credential):
        assert _bearer(made_at_import) == "Bearer token-two"
        token = asyncio.run(async_made_at_import.get_api_key_with_prefix("BearerToken"))
        assert token == "Bearer token-two"


def test_a_client_keeps_the_ca_file_it_was_given(session: Any, tmp_path: Path) -> None:
    first = follow_operator(session, _identity(tmp_path, "test-1", "one", ca=b"FIRST CA"))
    assert first is not None
    imported = client.Configuration()
    config.load_kube_config(config_file=str(first.kubeconfig), client_configuration=imported)

    follow_operator(session, _identity(tmp_path, "test-2", "two", ca=b"SECOND CA"))

    assert Path(imported.ssl_ca_cert).read_bytes() == b"FIRST CA"


def test_each_cluster_and_proxy_has_its_own_files(session: Any, tmp_path: Path) -> None:
    """An operator on a private plane does not hand its token to clients of the session's cluster;
    behind a fault proxy the environment names the proxy, and the cluster's file still follows."""
    shared = follow_operator(session, _identity(tmp_path, "a", "shared-token"))
    private = follow_operator(
        session, _identity(tmp_path, "b", "private-token", server="https://127.0.0.1:7443")
    )
    assert shared is not None and private is not None
    assert shared.credential != private.credential and shared.kubeconfig != private.kubeconfig
    assert "shared-token" in shared.credential.read_text()

    proxy = _identity(tmp_path, "c-proxy", "token-c", server="https://127.0.0.1:9443", ca=b"PROXY CA")
    faulted = follow_operator(session, _identity(tmp_path, "c", "token-c"), proxy)
    assert faulted is not None
    assert (
        yaml.safe_load(faulted.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        == "https://127.0.0.1:9443"
    )
    assert faulted.credential == shared.credential and "token-c" in shared.credential.read_text()


def test_nothing_follows_a_kubeconfig_without_a_token_or_outside_a_session(
    session: Any, tmp_path: Path
) -> None:
    assert follow_operator(session, _identity(tmp_path, "admin", "")) is None
    outside = SimpleNamespace(stash=pytest.Stash())
    assert follow_operator(outside, _identity(tmp_path, "test", "token")) is None  # type: ignore[arg-type]


def test_an_operator_that_outlives_a_later_one_gets_its_own_token_back(session: Any, tmp_path: Path) -> None:
    """Two operators on one cluster, the second started and stopped inside the first's run (a test's
    neighbour): once the second stops, clients follow the first again, not the stopped one."""
    one, two = _identity(tmp_path, "a", "token-a"), _identity(tmp_path, "b", "token-b")
    first = follow_operator(session, one)
    assert first is not None
    with ambient.pointed(
        first.kubeconfig, defaults_from=one, token_file=first.credential, credential=first.body
    ):
        made_by_first = client.Configuration.get_default_copy()
        loaded = client.Configuration()
        config.load_kube_config(config_file=str(first.kubeconfig), client_configuration=loaded)
        second = follow_operator(session, two)
        assert second is not None
        with ambient.pointed(
            second.kubeconfig, defaults_from=two, token_file=second.credential, credential=second.body
        ):
            assert _bearer(made_by_first) == _bearer(loaded) == "Bearer token-b"
        assert _bearer(made_by_first) == _bearer(loaded) == "Bearer token-a"
        assert not [p.name for p in session.folder.iterdir() if p.name.startswith(".")], "no staged file left"
