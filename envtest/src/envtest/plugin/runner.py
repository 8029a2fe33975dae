"""Run an operator in-process for a test: start, stop, and surface its crashes.

An operator is anything a factory builds that has `start()`, `stop(timeout)` and `errors` — the
reference operator's Manager does. A blocking `run(stop_event)` function fits through
`ThreadOperator`. Reconcile errors are the operator's business (it retries); an exception that
escapes the operator's own threads lands in `errors` and fails the test that owns it.

A factory gets what it names (see `FACTORY_KEYWORDS`): an operator on kopf, the official client or
pykube-ng takes its identity or a ready client instead of digging them out of `api_factory`
(`envtest.adapters` builds on this).
"""

from __future__ import annotations

import copy
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from envtest import ambient
from envtest.errors import ConfigError, OperatorFailed

if TYPE_CHECKING:
    from envtest.plugin.following import Following


class OperatorLike(Protocol):
    errors: list[BaseException]

    def start(self) -> None: ...
    def stop(self, timeout: float = 10.0) -> None: ...


ApiFactory = Callable[[], Any]
OperatorFactory = Callable[..., OperatorLike]
"""Called as `factory(api_factory, **what_it_names)` (see `FACTORY_KEYWORDS`); returns an unstarted
operator."""

FACTORY_KEYWORDS = ("namespace", "kubeconfig", "kube", "k8s")
"""What a factory receives by naming a parameter (a `**kwargs` takes them all), after `api_factory`
in its first positional place:
- `namespace`: the test's namespace, the operator's scope (None: cluster-wide);
- `kubeconfig`: Path of the operator's identity (a ServiceAccount token; through the fault proxy when
  the test has one) — what any client library or framework can log in with;
- `kube`: a pykube-ng HTTPClient from it; `k8s`: a `kubernetes.client.ApiClient` from it. Either is
  built only for a factory that names it, and closed after the operator stopped."""


def api_factory_for(kubeconfig: Path, *, timeout: float = 30.0) -> ApiFactory:
    """New pykube-ng clients (each with its own session and connections) for `kubeconfig`, as
    `Cluster.new_pykube_from` makes them, from one reading of the file: an operator asks for one per
    informer and more, and pykube-ng's own loader re-parses the YAML for each (most of the CPU an
    operator start costs)."""
    import pykube
    import yaml

    from envtest.clusters import Cluster

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: 10x faster
    doc = yaml.load(kubeconfig.read_text(), Loader=loader)

    def new_client() -> Any:
        config = pykube.KubeConfig(copy.deepcopy(doc))  # pykube-ng may rewrite parts of its doc
        config.filepath = kubeconfig  # what relative certificate paths resolve against
        client = Cluster.pykube_client(config, timeout=timeout)
        return client

    return new_client


def k8s_client_for(kubeconfig: Path) -> Any:
    """A `kubernetes.client.ApiClient` for `kubeconfig`, as `Cluster.k8s` makes one: its own
    Configuration (the client's global default is left alone: it may hold the admin), no proxy for a
    loopback server."""
    from kubernetes import client, config

    from envtest.loopback import no_proxy_for_loopback_config

    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    no_proxy_for_loopback_config(configuration)
    return client.ApiClient(configuration)


@dataclass(frozen=True)
class FactoryCall:
    """How the runner calls one factory, read once from its signature."""

    api_factory: bool
    """Whether `api_factory` goes in: its first positional parameter (any name) or `*args` takes it."""
    keywords: tuple[str, ...]
    """The `FACTORY_KEYWORDS` it names (all of them for `**kwargs`), in that order."""


def factory_call(factory: Callable[..., Any]) -> FactoryCall:
    """Read `factory`'s signature. A callable whose signature cannot be read (some builtins) is
    called the way every factory was before the other keywords existed: `(api_factory, namespace=…)`.
    A required parameter the harness cannot fill is a ConfigError naming it, before anything starts."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return FactoryCall(api_factory=True, keywords=("namespace",))
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_api = bool(positional) or any(p.kind is p.VAR_POSITIONAL for p in params)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        named = set(FACTORY_KEYWORDS)
    else:
        named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if positional:
            named.discard(positional[0].name)  # that one is api_factory's, whatever its name
    call = FactoryCall(takes_api, tuple(k for k in FACTORY_KEYWORDS if k in named))
    try:
        signature.bind(*([None] if call.api_factory else []), **dict.fromkeys(call.keywords))
    except TypeError as exc:
        raise ConfigError(
            f"operator factory {describe(factory)}: {exc}; the harness passes api_factory as the "
            f"first positional argument and {', '.join(FACTORY_KEYWORDS)} by name, each only to a "
            "parameter of that name"
        ) from None
    return call


def describe(factory: Callable[..., Any]) -> str:
    """`package.module:name` of a factory, for messages."""
    name = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return f"{getattr(factory, '__module__', None) or '?'}:{name}"


class ThreadOperator:
    """Adapts a blocking `run(stop: threading.Event)` function to the operator contract."""

    def __init__(self, run: Callable[[threading.Event], None], name: str = "operator") -> None:
        self._run, self._name = run, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def _target(self) -> None:
        try:
            self._run(self._stop)
        except BaseException as exc:
            self.errors.append(exc)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._target, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise OperatorFailed(f"{self._name} did not stop within {timeout:.0f}s")


HARNESS_LOGGER = "envtest"
"""The harness's own loggers (this one and its children) never go into an operator's log."""


class _NotHarness(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.name != HARNESS_LOGGER and not record.name.startswith(HARNESS_LOGGER + ".")


class OperatorRunner:
    """One operator instance for one test; `stop()` is idempotent and always detaches its log.

    Log capture, while the operator runs: by default every record logged in the process (a
    framework's own loggers, `kopf` say, explain as much as the operator's), at INFO and above, and
    DEBUG of the factory's top package; the harness's loggers aside. `loggers` narrows it to those
    loggers, at DEBUG."""

    def __init__(
        self,
        factory: OperatorFactory,
        api_factory: ApiFactory,
        *,
        namespace: str | None,
        home_namespace: str | None = None,
        kubeconfig: Path | None = None,
        following: Following | None = None,
        log_path: Path | None = None,
        loggers: Sequence[str] | None = None,
    ) -> None:
        self.factory, self.api_factory, self.namespace = factory, api_factory, namespace
        self.following = following
        """What `KUBECONFIG` names while it runs, and the credential the default configurations
        read, when they follow the running test's identity (`envtest.plugin.following`)."""
        self.home_namespace = home_namespace or namespace
        """The namespace its identity lives in (the test's), also when it watches every namespace."""
        self.kubeconfig = kubeconfig
        """The operator's identity, which `api_factory`'s clients use too (see `FACTORY_KEYWORDS`)."""
        self._call = factory_call(factory)
        self._closers: list[Callable[[], object]] = []  # the clients built for the factory
        self.log_path = log_path
        # logger name → level it is lowered to (if above) while the operator runs; handler on each.
        if loggers is None:
            package = str(getattr(factory, "__module__", "") or "").split(".")[0]
            self._levels = {"": logging.INFO, **({package: logging.DEBUG} if package else {})}
            self._attach_to: tuple[str, ...] = ("",)  # the root sees every propagating record
        else:
            self._levels = dict.fromkeys(loggers, logging.DEBUG)
            self._attach_to = tuple(loggers)
        self._handler: logging.Handler | None = None
        self._saved_levels: dict[str, int] = {}
        self._ambient: ambient.Frame | None = None
        self.operator: OperatorLike | None = None

    def start(self) -> OperatorLike:
        self._attach_log()
        if self.kubeconfig is not None:
            # What kopf's login does in production, for every framework: clients an operator builds
            # from the environment or the official client's default act as its identity.
            follow = self.following
            self._ambient = ambient.point(
                follow.kubeconfig if follow else self.kubeconfig,
                label=f"operator {describe(self.factory)}",
                defaults_from=self.kubeconfig,
                token_file=follow.credential if follow else None,
                credential=follow.body if follow else None,
            )
        try:
            self.operator = self._build()
            self.operator.start()
        except BaseException:
            self.stop()
            raise
        return self.operator

    def stop(self, timeout: float = 15.0) -> None:
        try:
            if self.operator is not None:
                self.operator.stop(timeout)
        finally:
            try:
                while self._closers:  # after the operator: it may use them until it has stopped
                    self._closers.pop()()
            finally:
                if self._ambient is not None:
                    self._ambient.close()
                    self._ambient = None
                self._detach_log()

    def _build(self) -> OperatorLike:
        args = (self.api_factory,) if self._call.api_factory else ()
        operator = self.factory(*args, **{name: self._argument(name) for name in self._call.keywords})
        missing = [a for a in ("start", "stop", "errors") if not hasattr(operator, a)]
        if missing:
            raise ConfigError(
                f"operator factory {describe(self.factory)} returned {type(operator).__qualname__}, "
                f"which lacks {', '.join(missing)}: an operator has start(), stop(timeout) and errors "
                "(wrap a blocking run(stop_event) in ThreadOperator or envtest.adapters.threads)"
            )
        return operator  # type: ignore[no-any-return]

    def _argument(self, name: str) -> Any:
        if name == "namespace":
            return self.namespace
        if name == "kubeconfig":
            return self.kubeconfig
        if name == "kube":
            kube = self.api_factory()
            self._closers.append(kube.session.close)
            return kube
        if self.kubeconfig is None:
            raise ConfigError(
                f"operator factory {describe(self.factory)} asks for `{name}`, which is built from the "
                "operator's kubeconfig: pass kubeconfig= to OperatorRunner"
            )
        k8s = k8s_client_for(self.kubeconfig)
        self._closers.append(k8s.close)
        return k8s

    @property
    def errors(self) -> list[BaseException]:
        return list(self.operator.errors) if self.operator is not None else []

    def check(self) -> None:
        """Raise OperatorFailed if the operator crashed (the plugin calls this at teardown)."""
        if self.errors:
            first = self.errors[0]
            raise OperatorFailed(f"operator crashed: {type(first).__name__}: {first}") from first

    def _attach_log(self) -> None:
        if self.log_path is None or self._handler is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.log_path)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
        )
        handler.setLevel(logging.DEBUG)
        handler.addFilter(_NotHarness())
        for name, level in self._levels.items():
            logger = logging.getLogger(name)
            self._saved_levels[name] = logger.level
            if logger.getEffectiveLevel() > level:
                logger.setLevel(level)
        for name in self._attach_to:
            logging.getLogger(name).addHandler(handler)
        self._handler = handler

    def _detach_log(self) -> None:
        if self._handler is None:
            return
        for name in self._attach_to:
            logging.getLogger(name).removeHandler(self._handler)
        for name, level in self._saved_levels.items():
            logging.getLogger(name).setLevel(level)
        self._saved_levels.clear()
        self._handler.close()
        self._handler = None
