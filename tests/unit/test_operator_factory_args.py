"""How the runner calls an operator factory: `api_factory` first, then only what the factory names of
namespace, kubeconfig, kube and k8s; clients built only when named, closed after the operator."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from envtest.errors import ConfigError
from envtest.plugin import runner as runner_module
from envtest.plugin.runner import OperatorRunner, factory_call

CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"


class _Op:
    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self.events.append("operator started")

    def stop(self, timeout: float = 10.0) -> None:
        self.events.append("operator stopped")


class _Session:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def close(self) -> None:
        self.events.append("kube closed")


class _Kube:
    def __init__(self, events: list[str]) -> None:
        self.session = _Session(events)

    def close(self) -> None:  # as a kubernetes ApiClient closes
        self.session.close()


class _ApiFactory:
    """Counts the clients made: a factory that does not name `kube` must cost none."""

    def __init__(self, events: list[str]) -> None:
        self.events, self.made = events, 0

    def __call__(self) -> _Kube:
        self.made += 1
        return _Kube(self.events)


@pytest.fixture
def identity(tmp_path: Path) -> Path:
    path = tmp_path / "identity.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(CA).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _run(factory: Any, api: _ApiFactory, kubeconfig: Path | None) -> OperatorRunner:
    runner = OperatorRunner(factory, api, namespace="ns", kubeconfig=kubeconfig)
    runner.start()
    runner.stop()
    return runner


def test_a_factory_of_the_first_contract_gets_api_factory_and_namespace_and_no_client(
    identity: Path,
) -> None:
    events: list[str] = []
    api = _ApiFactory(events)
    got: dict[str, Any] = {}

    def factory(api_factory: Any, namespace: str | None = None) -> _Op:
        got.update(api_factory=api_factory, namespace=namespace)
        return _Op(events)

    _run(factory, api, identity)
    assert got == {"api_factory": api, "namespace": "ns"}
    assert api.made == 0
    assert events == ["operator started", "operator stopped"]


def test_a_factory_that_names_kubeconfig_gets_the_operators_identity(identity: Path) -> None:
    events: list[str] = []
    got: dict[str, Any] = {}

    def factory(api_factory: Any, *, namespace: str, kubeconfig: Path) -> _Op:
        got.update(namespace=namespace, kubeconfig=kubeconfig)
        return _Op(events)

    _run(factory, _ApiFactory(events), identity)
    assert got == {"namespace": "ns", "kubeconfig": identity}


def test_kube_is_built_for_a_factory_that_names_it_and_closed_after_the_operator_stopped(
    identity: Path,
) -> None:
    events: list[str] = []
    api = _ApiFactory(events)
    got: dict[str, Any] = {}

    def factory(api_factory: Any, *, kube: Any) -> _Op:
        got["kube"] = kube
        return _Op(events)

    _run(factory, api, identity)
    assert api.made == 1 and isinstance(got["kube"], _Kube)
    assert events == ["operator started", "operator stopped", "kube closed"]


def test_k8s_is_an_api_client_of_the_identity_closed_after_the_operator_stopped(
    identity: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    made: list[Any] = []
    real = runner_module.k8s_client_for

    def recording(kubeconfig: Path) -> Any:
        client = real(kubeconfig)
        close = client.close
        client.close = lambda: (events.append("k8s closed"), close())
        made.append(client)
        return client

    monkeypatch.setattr(runner_module, "k8s_client_for", recording)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    got: dict[str, Any] = {}

    def factory(api_factory: Any, *, k8s: Any) -> _Op:
        got["k8s"] = k8s
        return _Op(events)

    _run(factory, _ApiFactory(events), identity)
    (client,) = made
    assert got["k8s"] is client
    configuration = client.configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer t0ken"
    assert Path(configuration.ssl_ca_cert).read_bytes() == CA
    assert configuration.proxy is None, "a loopback apiserver is never reached through a proxy"
    assert events == ["operator started", "operator stopped", "k8s closed"]


def test_a_factory_taking_kwargs_gets_all_four(identity: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "k8s_client_for", lambda kubeconfig: _Kube([]))
    events: list[str] = []
    got: dict[str, Any] = {}

    def factory(api_factory: Any, **kwargs: Any) -> _Op:
        got.update(kwargs)
        return _Op(events)

    _run(factory, _ApiFactory(events), identity)
    assert sorted(got) == ["k8s", "kube", "kubeconfig", "namespace"]


def test_the_first_positional_parameter_takes_api_factory_whatever_its_name(identity: Path) -> None:
    events: list[str] = []
    api = _ApiFactory(events)
    got: dict[str, Any] = {}

    def factory(kube: Any, namespace: str) -> _Op:
        got.update(kube=kube, namespace=namespace)
        return _Op(events)

    _run(factory, api, identity)
    assert got == {"kube": api, "namespace": "ns"}
    assert api.made == 0


def test_a_factory_without_positional_parameters_gets_keywords_only(identity: Path) -> None:
    events: list[str] = []
    got: dict[str, Any] = {}

    def factory(*, kubeconfig: Path, namespace: str) -> _Op:
        got.update(kubeconfig=kubeconfig, namespace=namespace)
        return _Op(events)

    _run(factory, _ApiFactory(events), identity)
    assert got == {"kubeconfig": identity, "namespace": "ns"}


def test_a_parameter_the_harness_cannot_fill_is_a_config_error_naming_it_before_any_start() -> None:
    def factory(api_factory: Any, *, workers: int) -> _Op:
        raise AssertionError("never called")

    with pytest.raises(ConfigError, match=r"factory.*'workers'.*namespace, kubeconfig, kube, k8s"):
        OperatorRunner(factory, _ApiFactory([]), namespace="ns")


def test_a_factory_returning_no_operator_is_a_config_error_and_leaves_nothing_behind(
    identity: Path, tmp_path: Path
) -> None:
    events: list[str] = []

    def factory(api_factory: Any, *, kube: Any) -> None:
        return None

    handlers = list(logging.getLogger().handlers)
    runner = OperatorRunner(
        factory, _ApiFactory(events), namespace="ns", kubeconfig=identity, log_path=tmp_path / "op.log"
    )
    with pytest.raises(ConfigError, match=r"returned NoneType, which lacks start, stop, errors"):
        runner.start()
    assert events == ["kube closed"], "the client built for it is closed"
    assert logging.getLogger().handlers == handlers, "its log handler is detached"


def test_k8s_without_a_kubeconfig_is_a_config_error_saying_what_to_pass() -> None:
    def factory(api_factory: Any, *, k8s: Any) -> _Op:
        raise AssertionError("never called")

    runner = OperatorRunner(factory, _ApiFactory([]), namespace="ns")
    with pytest.raises(ConfigError, match=r"asks for `k8s`.*pass kubeconfig="):
        runner.start()


def test_a_callable_without_a_readable_signature_is_called_as_before() -> None:
    # `dict` stands for any callable inspect cannot read (builtins, some C extensions).
    call = factory_call(dict)
    assert call.api_factory and call.keywords == ("namespace",)
