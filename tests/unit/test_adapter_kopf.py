"""The kopf adapter without a cluster: modules imported once, a fresh registry per operator holding
every handler they registered, kopf's fallback logins left out, the identity as kopf's login, and a
startup that fails raising at once from start()."""

from __future__ import annotations

import re
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

from {package} import labels  # a second module of handlers, as kopf operators grow
from {package}.counters import IMPORTS

IMPORTS.append(__name__)  # a module-level side effect: it must run once per process

@kopf.on.create("example.com", "v1", "things")
def created(**_):
    pass
"""
LABELS = """
import kopf

@kopf.on.update("example.com", "v1", "things")
def labelled(**_):
    pass
"""


def _handler_ids(registry: kopf.OperatorRegistry) -> list[str]:
    # kopf names a handler by its function's qualified name
    return sorted(h.id.rsplit(".", 1)[-1] for h in registry._changing.get_all_handlers())


@pytest.fixture(autouse=True)
def own_default_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's default registry is process-wide: each test here starts from a fresh one, as a new
    process would, and leaves the previous one in place after."""
    previous = kopf.get_default_registry()
    kopf.set_default_registry(kopf._core.intents.registries.SmartOperatorRegistry())
    yield
    kopf.set_default_registry(previous)


@pytest.fixture
def handlers_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    package = "thingsop_" + re.sub(r"\W", "_", request.node.name[-40:])
    folder = tmp_path / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "counters.py").write_text("IMPORTS = []\n")
    (folder / "labels.py").write_text(LABELS)
    (folder / "handlers.py").write_text(HANDLERS.format(package=package))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{package}.handlers"
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]


def test_every_registry_holds_the_handlers_of_every_module_the_named_one_imports(
    handlers_module: str,
) -> None:
    first, second, third = (load_registry(handlers_module) for _ in range(3))
    assert len({id(first), id(second), id(third)}) == 3, "a fresh registry for each test"
    assert _handler_ids(first) == _handler_ids(second) == _handler_ids(third) == ["created", "labelled"]
    assert [h.fn for h in first._changing.get_all_handlers()] == [
        h.fn for h in third._changing.get_all_handlers()
    ], "the same handler objects, as a restarted operator has"


def test_a_module_is_imported_once_however_many_tests_run_it(handlers_module: str) -> None:
    for _ in range(3):
        load_registry(handlers_module)
    package = handlers_module.rsplit(".", 1)[0]
    assert [handlers_module] == sys.modules[f"{package}.counters"].IMPORTS


def test_kopfs_fallback_logins_stay_out_they_would_read_the_environment(handlers_module: str) -> None:
    default_logins = [h for h in kopf.get_default_registry()._activities.get_all_handlers() if h._fallback]
    assert default_logins, "kopf's default registry has its piggybacking logins (pykube, client)"
    registry = load_registry(handlers_module)
    assert [h for h in registry._activities.get_all_handlers() if h._fallback] == []


def test_handlers_load_from_a_file_once_and_from_a_callable_each_time(tmp_path: Path) -> None:
    path = tmp_path / "filehandlers.py"
    path.write_text(
        "import kopf\nRUNS = []\nRUNS.append(1)\n"
        "@kopf.on.create('example.com', 'v1', 'things')\ndef created(**_):\n    pass\n"
    )
    calls: list[int] = []

    def register(registry: kopf.OperatorRegistry) -> None:
        calls.append(1)

        @kopf.on.create("example.com", "v1", "things", registry=registry)
        def explicit(**_: object) -> None: ...

        @kopf.on.update("example.com", "v1", "things")  # the default registry, while this runs
        def implicit(**_: object) -> None: ...

    first = load_registry(path, register)
    second = load_registry(str(path), register)
    assert _handler_ids(first) == _handler_ids(second) == ["created", "explicit", "implicit"]
    module = next(
        m for name, m in sys.modules.items() if name.startswith("__kopf_script_") and str(path) in name
    )
    assert module.RUNS == [1], "the file ran once, as kopf run executes it once"
    assert calls == [1, 1], "a callable registers into each fresh registry"
    assert _handler_ids(kopf.get_default_registry()) == ["created"], "the callable's stayed out of it"


def test_missing_or_broken_handlers_are_config_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no handlers module named 'nosuch_handlers_mod'"):
        load_registry("nosuch_handlers_mod")
    with pytest.raises(ConfigError, match=rf"handlers file {tmp_path / 'gone.py'} does not exist"):
        load_registry(tmp_path / "gone.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no database URL')\n")
    with pytest.raises(ConfigError, match=r"executing .*broken\.py failed: RuntimeError: no database URL"):
        load_registry(broken)
    with pytest.raises(ConfigError, match=r"kopf_operator\(42\)"):
        kopf_operator(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"at least one"):
        kopf_operator()
    with pytest.raises(ConfigError, match=r"standalone=True and peering"):
        kopf_operator("x", standalone=True, peering="p")


def test_all_namespaces_asks_for_the_cluster_wide_mode(handlers_module: str, tmp_path: Path) -> None:
    factory = kopf_operator(handlers_module, all_namespaces=True)
    with pytest.raises(ConfigError, match=r"envtest_clusterwide"):
        factory(None, namespace="ns", kubeconfig=tmp_path / "k")
    assert factory(None, namespace=None, kubeconfig=tmp_path / "k").namespace is None


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

    factory = kopf_operator(handlers_module, "other.handlers")
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


@pytest.mark.parametrize(
    ("options", "namespace", "expected"),
    [
        ({}, "ns", {"standalone": True, "peering_name": None, "priority": None, "namespaces": ["ns"]}),
        (
            {"peering": "ops", "priority": 7},
            "ns",
            {"standalone": None, "peering_name": "ops", "priority": 7, "namespaces": ["ns"]},
        ),
        ({"standalone": False}, None, {"standalone": False, "peering_name": None, "clusterwide": True}),
    ],
)
def test_kopf_run_options_reach_kopf_operator(
    handlers_module: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, object],
    namespace: str | None,
    expected: dict[str, object],
) -> None:
    """`kopf run --peering/--standalone/--priority/-A` as kopf.operator() takes them."""
    seen: dict[str, object] = {}

    async def operator(**kwargs: object) -> None:
        seen.update(kwargs)
        kwargs["ready_flag"].set()  # type: ignore[union-attr]
        await kwargs["stop_flag"].wait()  # type: ignore[union-attr]

    monkeypatch.setattr(kopf, "operator", operator)
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
    running = kopf_operator(handlers_module, **options)(None, namespace=namespace, kubeconfig=kubeconfig)  # type: ignore[arg-type]
    running.start()
    running.stop(timeout=30)
    assert running.errors == []
    assert {key: seen.get(key) for key in expected} == expected
