"""The per-plane conversion endpoint without a cluster: the ini key checked as a usage error, the
supervisor's command line and state carrying it, and the factory contract `start_endpoint` enforces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envtest.errors import ConfigError
from envtest.plane import supervise, supervisor
from envtest.plugin import settings
from envtest.plugin.session import new_session
from envtest.webhooks import ServingCerts, WebhookServer
from envtest.webhooks.conversion import start_endpoint

pytest_plugins = ["pytester"]


def _config(pytester: pytest.Pytester, ini: str, *args: str) -> pytest.Config:
    pytester.makeini("[pytest]\n" + ini)
    return pytester.parseconfig(*args)


@pytest.mark.parametrize(
    "value",
    ["no_such_module_xyz:factory", "json:no_such_factory", "json"],
    ids=["missing-module", "missing-attribute", "no-colon"],
)
def test_unimportable_conversion_factory_is_a_usage_error_naming_the_key(
    pytester: pytest.Pytester, value: str
) -> None:
    with pytest.raises(pytest.UsageError, match=f"envtest_conversion_webhook = '{value}'"):
        new_session(_config(pytester, f"envtest_conversion_webhook = {value}\n"))


def test_importable_factory_is_kept_with_the_default_path_or_the_configured_one(
    pytester: pytest.Pytester,
) -> None:
    s = settings.resolve(_config(pytester, "envtest_conversion_webhook = json:loads\n"))
    assert (s.conversion_webhook, s.conversion_path) == ("json:loads", "/convert")
    ini = "envtest_conversion_webhook = json:loads\nenvtest_conversion_path = /v1/convert\n"
    assert settings.resolve(_config(pytester, ini)).conversion_path == "/v1/convert"
    assert settings.resolve(_config(pytester, "")).conversion_webhook is None


def test_supervisor_command_line_reads_back_with_the_conversion_and_import_path(tmp_path: Path) -> None:
    conv = supervisor.Conversion("pkg.conv:serve", "/c", python_path=("/proj", "/proj/src"))
    argv = supervisor.supervise_argv(
        tmp_path, name="p", components=["etcd", "kube-apiserver"], crds=["x.yaml"], conversion=conv
    )
    assert argv[1:3] == ["-m", "envtest.plane.supervise"]
    args = supervise.build_parser().parse_args(argv[3:])
    assert args.conversion_webhook == "pkg.conv:serve"
    assert args.conversion_path == "/c"
    assert args.python_path == ["/proj", "/proj/src"]
    assert args.crd == [str(Path("x.yaml").resolve())]
    plain = supervise.build_parser().parse_args(
        supervisor.supervise_argv(tmp_path, name="p", components=[])[3:]
    )
    assert (plain.conversion_webhook, plain.conversion_path, plain.python_path) == (None, "/convert", [])


def test_plane_state_keeps_the_endpoint_and_older_state_files_still_read(tmp_path: Path) -> None:
    state = supervisor.PlaneState(
        name="p",
        pid=1,
        kubeconfig="k",
        server="s",
        workdir="w",
        version="1.31.0",
        components=["etcd"],
        conversion_webhook="pkg.conv:serve",
        conversion_url="https://127.0.0.1:4443/convert",
        conversion_ca="-----BEGIN CERTIFICATE-----\n",
    )
    state.write(tmp_path)
    raw = json.loads((tmp_path / supervisor.STATE_FILE).read_text())
    assert supervisor.PlaneState(**raw) == state
    for key in ("conversion_webhook", "conversion_url", "conversion_ca"):
        del raw[key]  # a plane started before this field existed
    assert supervisor.PlaneState(**raw).conversion_url == ""


def test_reusing_a_plane_with_another_conversion_webhook_names_both() -> None:
    state = supervisor.PlaneState(
        name="p", pid=1, kubeconfig="k", server="s", workdir="w", version="1", components=["etcd"]
    )
    common: dict[str, Any] = {"version": "1", "components": ["etcd"], "job_pods": "complete"}
    assert supervisor.differences(state, **common) == []  # not asked: not compared (`envtest up`)
    assert supervisor.differences(state, **common, conversion="") == []
    assert supervisor.differences(state, **common, conversion="pkg.conv:serve") == [
        "conversion webhook: running none, asked for pkg.conv:serve"
    ]


def test_start_endpoint_starts_a_webhook_server_the_factory_forgot_to_start(tmp_path: Path) -> None:
    made: list[WebhookServer] = []

    def factory(certs: ServingCerts) -> WebhookServer:
        made.append(WebhookServer(certs))
        return made[0]

    server, url, ca = start_endpoint(factory, tmp_path / "certs", path="convert")
    try:
        assert server is made[0]
        assert url == f"https://127.0.0.1:{made[0].port}/convert"
        assert ca == (tmp_path / "certs" / "ca.crt").read_bytes()
    finally:
        server.stop()


def test_start_endpoint_takes_the_ca_from_the_cert_dir_when_the_server_has_none(tmp_path: Path) -> None:
    class Bare:  # what an aiohttp wrapper looks like: a URL and stop(), no ca_pem
        url = "https://127.0.0.1:9443/"

        def stop(self) -> None:
            pass

    _, url, ca = start_endpoint(lambda certs: Bare(), tmp_path / "certs")
    assert url == "https://127.0.0.1:9443/convert"
    assert ca == (tmp_path / "certs" / "ca.crt").read_bytes()


def test_a_server_without_an_https_url_is_refused_and_stopped(tmp_path: Path) -> None:
    stopped: list[bool] = []

    class Plain:
        url = "http://127.0.0.1:8080"

        def stop(self) -> None:
            stopped.append(True)

    with pytest.raises(ConfigError, match="https://HOST:PORT"):
        start_endpoint(lambda certs: Plain(), tmp_path / "certs")
    assert stopped == [True]


def test_envtest_up_with_an_unimportable_conversion_factory_fails_before_starting_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ENVTEST_K8S_VERSION", raising=False)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "envtest.cli",
            "up",
            "--name",
            "c",
            "--conversion-webhook",
            "no_such_mod_xyz:serve",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "'no_such_mod_xyz:serve': cannot import" in out.stderr
    assert not (tmp_path / "envtest" / "clusters" / "c" / "supervisor.log").exists()
