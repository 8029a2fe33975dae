"""The kopf adapter without a cluster: a fresh registry per operator with the handlers registered
into it, kopf's process-wide state left as it was, the identity as kopf's login, and a startup that
fails raising at once from start()."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from envtest.adapters.identity import Identity
from envtest.adapters.kopf import LOGIN_PRIORITY, connection_info, kopf_operator, load_registry
from envtest.errors import ConfigError, OperatorFailed

kopf = pytest.importorskip("kopf")

HANDLERS = """
import kopf

CALLS = []  # module state: fresh for every registry

@kopf.on.create("example.com", "v1", "things")
def created(**_):
    CALLS.append("created")
"""


def _handler_ids(registry: kopf.OperatorRegistry) -> list[str]:
    # kopf names a handler by its function's qualified name
    return sorted(h.id.rsplit(".", 1)[-1] for h in registry._changing.get_all_handlers())


@pytest.fixture
def handlers_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    package = tmp_path / "thingsop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text(HANDLERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "thingsop.handlers"


def test_each_registry_is_fresh_and_kopfs_default_registry_is_left_alone(handlers_module: str) -> None:
    default = kopf.get_default_registry()
    before = _handler_ids(default)
    first, second = load_registry(handlers_module), load_registry(handlers_module)
    assert first is not second
    assert _handler_ids(first) == _handler_ids(second) == ["created"]
    assert kopf.get_default_registry() is default and _handler_ids(default) == before
    assert handlers_module not in sys.modules, "the module's run left no sys.modules entry"


def test_handlers_load_from_a_file_and_from_a_callable(tmp_path: Path) -> None:
    path = tmp_path / "handlers.py"
    path.write_text(HANDLERS)
    assert _handler_ids(load_registry(path)) == ["created"]

    def register(registry: kopf.OperatorRegistry) -> None:
        @kopf.on.create("example.com", "v1", "things", registry=registry)
        def explicit(**_: object) -> None: ...

        @kopf.on.update("example.com", "v1", "things")  # the default registry, while this runs
        def implicit(**_: object) -> None: ...

    assert _handler_ids(load_registry(register)) == ["explicit", "implicit"]


def test_missing_handlers_are_config_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no handlers module named 'nosuch_handlers_mod'"):
        load_registry("nosuch_handlers_mod")
    with pytest.raises(ConfigError, match=rf"handlers file {tmp_path / 'gone.py'} does not exist"):
        load_registry(tmp_path / "gone.py")
    with pytest.raises(ConfigError, match=r"kopf_operator\(handlers=42\)"):
        kopf_operator(42)  # type: ignore[arg-type]


def test_the_login_is_the_identity_above_any_login_of_the_handlers() -> None:
    identity = Identity(server="https://127.0.0.1:7000/p", namespace="ns", ca_pem=b"PEM", token="t0ken")
    info = connection_info(identity)
    assert (info.server, info.ca_data, info.token, info.default_namespace) == (
        "https://127.0.0.1:7000/p",
        b"PEM",
        "t0ken",
        "ns",
    )
    assert info.priority == LOGIN_PRIORITY > 20  # kopf's own helpers use 10..20
    assert connection_info(identity, "other").default_namespace == "other"


def test_the_factory_takes_the_identity_and_is_named_for_the_handlers(handlers_module: str) -> None:
    from envtest.plugin.runner import factory_call

    factory = kopf_operator(handlers_module)
    call = factory_call(factory)
    assert call.api_factory and call.keywords == ("namespace", "kubeconfig"), "no client is built for kopf"
    assert factory.__module__ == handlers_module


def test_a_failing_startup_fails_start_with_its_error_and_settings_are_applied(tmp_path: Path) -> None:
    # A startup handler that fails permanently ends kopf before it makes any request: no cluster needed.
    seen: dict[str, object] = {}

    def register(registry: kopf.OperatorRegistry) -> None:
        @kopf.on.startup(registry=registry)
        def check(settings: kopf.OperatorSettings, **_: object) -> None:
            seen.update(
                standalone=settings.peering.standalone,
                scanning_disabled=settings.scanning.disabled,
                ultimate=settings.process.ultimate_exiting_timeout,
                ours=settings.posting.level,
            )
            raise kopf.PermanentError("bad configuration")

    kubeconfig = tmp_path / "identity.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    def settings(s: kopf.OperatorSettings) -> None:
        s.posting.level = 40

    operator = kopf_operator(register, settings=settings, ready_timeout=60)(
        None, namespace="ns", kubeconfig=kubeconfig
    )
    # The error is kopf's own (not the ready timeout's message): start() returned when kopf ended.
    with pytest.raises(OperatorFailed, match="kopf did not start: ActivityError") as caught:
        operator.start()
    operator.stop(timeout=10)
    assert type(caught.value.__cause__).__name__ == "ActivityError"  # kopf's, not exported
    assert seen == {"standalone": True, "scanning_disabled": True, "ultimate": None, "ours": 40}
