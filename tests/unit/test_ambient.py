"""The process's ambient configuration follows the newest open frame and comes back exactly as it
was: environment variables, in-cluster detection, and the client libraries' default configuration."""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes
import pytest
import yaml

from envtest import ambient


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": f"token-for-{server}"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def own_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stack of this test's own: the plugin keeps this session's frame on the process's."""
    monkeypatch.setattr(ambient, "_stack", ambient._Stack())


@pytest.fixture
def developer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """What a developer's shell has: a KUBECONFIG of their own, and in-cluster variables (a CI pod)."""
    mine = _kubeconfig(tmp_path / "mine", "https://developers.example:6443")
    monkeypatch.setenv("KUBECONFIG", str(mine))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("PYKUBE_KUBERNETES_SERVICE_HOST", raising=False)
    previous = kubernetes.client.Configuration._default
    kubernetes.client.Configuration._default = None
    yield mine
    kubernetes.client.Configuration._default = previous


def _default_host() -> str:
    return str(kubernetes.client.Configuration.get_default_copy().host)


def test_a_frame_points_every_ambient_source_and_closing_it_restores_them(
    developer: Path, tmp_path: Path
) -> None:
    plane = _kubeconfig(tmp_path / "plane", "https://127.0.0.1:7001")
    with ambient.pointed(plane):
        assert os.environ["KUBECONFIG"] == str(plane)
        assert "KUBERNETES_SERVICE_HOST" not in os.environ and "KUBERNETES_SERVICE_PORT" not in os.environ
        assert _default_host() == "https://127.0.0.1:7001"
        api = kubernetes.client.CoreV1Api()  # no arguments, as kopf's walkthrough writes it
        assert api.api_client.configuration.host == "https://127.0.0.1:7001"
    assert os.environ["KUBECONFIG"] == str(developer)
    assert os.environ["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert kubernetes.client.Configuration._default is None, "restored to what it was: nothing"


def test_the_newest_open_frame_wins_and_frames_close_in_any_order(developer: Path, tmp_path: Path) -> None:
    session = ambient.point(_kubeconfig(tmp_path / "admin", "https://127.0.0.1:7001"))
    first = ambient.point(_kubeconfig(tmp_path / "op1", "https://127.0.0.1:7002"))
    second = ambient.point(_kubeconfig(tmp_path / "op2", "https://127.0.0.1:7003"))
    assert _default_host() == "https://127.0.0.1:7003"
    first.close()  # not the newest: nothing changes
    assert _default_host() == "https://127.0.0.1:7003"
    second.close()
    assert _default_host() == "https://127.0.0.1:7001" and ambient.current() is session
    session.close()
    session.close()  # idempotent
    assert ambient.current() is None and os.environ["KUBECONFIG"] == str(developer)


def test_a_frame_repointed_at_the_started_plane_moves_the_defaults(developer: Path, tmp_path: Path) -> None:
    placeholder = _kubeconfig(tmp_path / "placeholder", "https://never.invalid")
    frame = ambient.point(placeholder)
    try:
        assert _default_host() == "https://never.invalid"
        frame.repoint(_kubeconfig(tmp_path / "plane", "https://127.0.0.1:7009"))
        assert os.environ["KUBECONFIG"] == str(tmp_path / "plane")
        assert _default_host() == "https://127.0.0.1:7009"
    finally:
        frame.close()


def test_unset_variables_are_unset_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with ambient.pointed(_kubeconfig(tmp_path / "k", "https://127.0.0.1:7001")):
        assert "KUBECONFIG" in os.environ
    assert "KUBECONFIG" not in os.environ and "KUBERNETES_SERVICE_HOST" not in os.environ


def test_the_async_clients_defaults_follow_too(developer: Path, tmp_path: Path) -> None:
    aio = pytest.importorskip("kubernetes.aio.client")
    before = aio.Configuration._default = aio.Configuration(host="https://developers.example:6443")
    with ambient.pointed(_kubeconfig(tmp_path / "k", "https://127.0.0.1:7005")):
        assert aio.Configuration.get_default_copy().host == "https://127.0.0.1:7005"
    assert aio.Configuration._default is before


@pytest.mark.parametrize("library", ["kubernetes", "kubernetes.aio", "kubernetes_asyncio"])
def test_a_load_kube_config_without_a_file_reads_the_frame_not_the_kubeconfig_seen_at_import(
    library: str, developer: Path, tmp_path: Path
) -> None:
    """The libraries read KUBECONFIG into KUBE_CONFIG_DEFAULT_LOCATION when imported: before any
    frame, here the developer's file. A handler's `load_kube_config()` must still get the frame's."""
    config = pytest.importorskip(f"{library}.config")
    kube_config = pytest.importorskip(f"{library}.config.kube_config")
    before = config.KUBE_CONFIG_DEFAULT_LOCATION, kube_config.KUBE_CONFIG_DEFAULT_LOCATION
    plane = _kubeconfig(tmp_path / "plane", "https://127.0.0.1:7011")
    with ambient.pointed(plane):
        configuration = pytest.importorskip(f"{library}.client").Configuration()
        loaded = config.load_kube_config(client_configuration=configuration)  # no file: the default
        if hasattr(loaded, "__await__"):
            ambient._run_coroutine(loaded)
        assert configuration.host == "https://127.0.0.1:7011"
        assert config.KUBE_CONFIG_DEFAULT_LOCATION == kube_config.KUBE_CONFIG_DEFAULT_LOCATION == str(plane)
    assert before == (config.KUBE_CONFIG_DEFAULT_LOCATION, kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
