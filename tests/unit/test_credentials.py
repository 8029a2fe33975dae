"""Token rotation: the in-cluster token is re-read (at most once a minute), as client-go does."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pykube
import pytest
from pykube.http import KubernetesHTTPAdapter

from mysql_operator.cli.credentials import TokenFile, in_cluster


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def config(token: str) -> pykube.KubeConfig:
    return pykube.KubeConfig(
        {
            "clusters": [{"name": "self", "cluster": {"server": "https://10.0.0.1:443"}}],
            "users": [{"name": "self", "user": {"token": token}}],
            "contexts": [{"name": "self", "context": {"cluster": "self", "user": "self"}}],
            "current-context": "self",
        }
    )


def test_a_rotated_token_is_picked_up_after_the_reread_interval(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    cfg, clock = config("first"), Clock()
    token = TokenFile(cfg, path, interval=60, monotonic=clock)
    path.write_text("second\n")  # the kubelet rotated it
    clock.now += 59
    assert not token.refresh() and cfg.user["token"] == "first", "no read before the interval"
    clock.now += 1
    assert token.refresh()
    assert cfg.user["token"] == "second"
    clock.now += 60
    assert not token.refresh(), "unchanged: nothing to do"


def test_an_unreadable_file_keeps_the_old_token(tmp_path: Path) -> None:
    cfg, clock = config("first"), Clock()
    token = TokenFile(cfg, tmp_path / "missing", interval=60, monotonic=clock)
    clock.now += 61
    assert not token.refresh()
    assert cfg.user["token"] == "first"


def test_every_request_of_an_installed_client_sends_the_current_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    cfg, clock = config("first"), Clock()
    client = TokenFile(cfg, path, interval=60, monotonic=clock).install(pykube.HTTPClient(cfg))
    sent: list[str] = []

    def adapter_send(request, **kwargs):  # type: ignore[no-untyped-def]
        sent.append(request.headers["Authorization"])
        raise ConnectionError("not really sending")

    # pykube's own seam below its adapter, which adds the Authorization header from the config.
    monkeypatch.setattr(KubernetesHTTPAdapter, "_do_send", lambda self, request, **kw: adapter_send(request))
    path.write_text("second")
    clock.now += 61
    with contextlib.suppress(ConnectionError):
        client.get(url="namespaces", version="v1")
    assert sent == ["Bearer second"]


def test_only_the_service_account_config_is_in_cluster(tmp_path: Path) -> None:
    assert in_cluster(config("t"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "clusters: [{name: c, cluster: {server: 'https://h'}}]\nusers: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    assert not in_cluster(pykube.KubeConfig.from_file(str(kubeconfig)))
