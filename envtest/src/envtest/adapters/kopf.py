"""A kopf operator under the plugin, as `kopf run` runs it, without glue:

    # myop/testing.py, named by the ini: envtest_operator = "myop.testing:operator"
    from envtest.adapters.kopf import kopf_operator
    operator = kopf_operator("myop.handlers")        # kopf run -m myop.handlers

What `kopf run -m a -m b x.py` does in production, the adapter does once per test process: it imports
the modules (and executes the files) into kopf's default registry, where their decorators — and those
of every module they import — put the handlers. Each test then gets a fresh `kopf.OperatorRegistry`
holding those same handler objects, logged in as the test's operator identity, scoped to the test's
namespace (or cluster-wide), run on its own event loop in a thread and stopped through kopf's stop
flag at teardown.

Why import once, not once per test: a module's submodules are imported once per process however
often the module is executed again, so re-executing one module per test loses every handler that
lives in another module after the first test; and module-level side effects (a prometheus metric,
a global client) run once in production, so they must run once here too. kopf keeps no per-object
state in its handler objects (progress lives in the objects' annotations), so sharing them between
tests' registries is what production does between restarts of the operator.

Like `kopf run`, an operator runs every handler registered in the process's default registry: one
kopf operator per test process. Handlers kept apart in a registry of their own come in through a
callable, `kopf_operator(register)`, called with each test's fresh registry.

The official client's default `Configuration` and `KUBECONFIG` are the operator's identity while it
runs (`envtest.ambient`, done by the runner for every operator), as kopf's own login leaves them in
production; kopf's fallback logins (which would read the environment) are not copied, the identity's
login handler outranks any `@kopf.on.login` of the handlers.

kopf's own `KopfRunner` (kopf.testing) drives the CLI in a thread; this adapter calls
`kopf.operator()` directly instead: no command line to build, and a stop flag awaited on the
operator's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envtest.adapters.identity import Identity, read_identity
from envtest.errors import ConfigError, OperatorFailed

if TYPE_CHECKING:  # kopf is imported when an operator is built, not with this module
    import kopf

Handlers = str | os.PathLike[str] | Callable[["kopf.OperatorRegistry"], object]
"""A module name (`myop.handlers`, as `kopf run -m`), a file (`handlers.py`, as `kopf run PATH`),
or `register(registry)`, called with each test's fresh registry."""

LOGIN_PRIORITY = 1_000_000
"""Above kopf's own login helpers (10-20): a handler module's `@kopf.on.login` may still run, but
the vault serves the test's identity."""

SUB_REGISTRIES = ("_activities", "_indexing", "_watching", "_spawning", "_changing", "_webhooks")
"""The parts of a `kopf.OperatorRegistry`, as kopf's own decorators append to them."""

_IMPORT_LOCK = threading.Lock()  # imports, file executions and swaps of kopf's default registry
_FILES: dict[Path, ModuleType] = {}  # files executed in this process, as `kopf run PATH` loads them


def kopf_operator(
    *handlers: Handlers,
    all_namespaces: bool = False,
    standalone: bool | None = None,
    peering: str | None = None,
    priority: int | None = None,
    settings: Callable[[kopf.OperatorSettings], object] | None = None,
    ready_timeout: float = 30.0,
) -> Callable[..., KopfOperator]:
    """An operator factory (for `envtest_operator` or the `envtest_operator_factory` fixture),
    taking `kopf run`'s arguments:

    - `handlers`: modules (`-m`), files (`PATH`) and `register(registry)` callables, in any mix;
    - `all_namespaces` (`-A`): the operator watches every namespace. That needs the cluster-wide
      mode (`@pytest.mark.envtest_clusterwide`, or `envtest_operator_scope = cluster`), where the
      harness binds the identity cluster-wide; in that mode every kopf operator is cluster-wide;
    - `standalone`, `peering` (`--peering NAME`), `priority`: as `kopf run`'s. Without `peering`
      the default is standalone: a test's operator has no peers, and kopf's peering lookup needs
      grants the operator's RBAC seldom gives. With `peering`, install kopf's peering CRDs through
      `envtest_crds` and grant the operator access to them;
    - `settings(settings)`: adjusts `kopf.OperatorSettings` after the adapter's defaults (scanning
      off: the CRDs are installed before any operator starts). A `@kopf.on.startup` handler taking
      `settings` runs too, as in production;
    - `ready_timeout`: seconds `start()` waits for the startup handlers.
    """
    if not handlers:
        raise ConfigError("kopf_operator(): name at least one handlers module, file or callable")
    for source in handlers:
        if not (callable(source) or isinstance(source, str | os.PathLike)):
            raise ConfigError(
                f"kopf_operator({source!r}): expected a module name, a .py path or a callable taking "
                "the registry"
            )
    if peering is not None and standalone:
        raise ConfigError("kopf_operator(): standalone=True and peering=… exclude each other, as in kopf run")
    options = _Options(all_namespaces, standalone, peering, priority, settings, ready_timeout)

    def factory(api_factory: Any, *, namespace: str | None, kubeconfig: Path) -> KopfOperator:
        if all_namespaces and namespace is not None:
            raise ConfigError(
                f"kopf_operator({_labels(handlers)}, all_namespaces=True) needs the cluster-wide mode: "
                "mark the test @pytest.mark.envtest_clusterwide or set envtest_operator_scope = cluster"
            )
        return KopfOperator(handlers, namespace=namespace, kubeconfig=kubeconfig, options=options)

    # The runner captures DEBUG of the factory's top package: make that the handlers' own.
    factory.__module__ = _module_name(handlers[0])
    factory.__qualname__ = factory.__name__ = f"kopf_operator({_labels(handlers)})"
    return factory


@dataclass(frozen=True)
class _Options:
    """`kopf_operator`'s arguments after the handlers (see there)."""

    all_namespaces: bool = False
    standalone: bool | None = None
    peering: str | None = None
    priority: int | None = None
    settings: Callable[[kopf.OperatorSettings], object] | None = None
    ready_timeout: float = 30.0


class KopfOperator:
    """One kopf operator on its own event loop and thread; the harness's operator contract."""

    def __init__(
        self,
        handlers: tuple[Handlers, ...] | Handlers,
        *,
        namespace: str | None,
        kubeconfig: Path,
        options: _Options | None = None,
    ) -> None:
        self.handlers = handlers if isinstance(handlers, tuple) else (handlers,)
        self.namespace, self.kubeconfig = namespace, Path(kubeconfig)
        self._options = options or _Options()
        # kopf's stop flag is an asyncio.Event of the operator's loop, set from stop() through the
        # loop: a threading.Event flag would be waited for in an executor thread, which the loop's
        # shutdown then waits for — until stop(), even after kopf itself has ended.
        self._lock = threading.Lock()  # guards the three below
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_flag: asyncio.Event | None = None
        self._settled = threading.Event()  # kopf's ready flag (startup handlers done), or the thread ended
        self._thread: threading.Thread | None = None
        self._ended = False  # the thread has left kopf (set before `_settled`)
        self.errors: list[BaseException] = []
        self.registry: kopf.OperatorRegistry | None = None
        """The registry this instance runs (after `start()`), for tests that inspect it."""

    def start(self) -> None:
        """Load the handlers here, so a broken handler module fails `start()` with its own error;
        then run kopf and wait for its startup handlers."""
        import kopf

        identity = read_identity(self.kubeconfig)
        self.registry = registry = load_registry(*self.handlers)
        _add_login(registry, identity, self.namespace)
        options = self._options
        settings = kopf.OperatorSettings()
        settings.scanning.disabled = True
        # kopf's last resort against a stuck exit SIGKILLs its thread, that is the whole pytest
        # process; here stop() reports an operator that will not stop instead.
        settings.process.ultimate_exiting_timeout = None
        if options.settings is not None:
            options.settings(settings)
        standalone = options.standalone
        if standalone is None and options.peering is None:
            standalone = True  # see kopf_operator: nobody to peer with
        scope: dict[str, Any] = {"namespaces": [self.namespace]} if self.namespace else {"clusterwide": True}
        run = functools.partial(
            kopf.operator,
            registry=registry,
            settings=settings,
            ready_flag=self._settled,
            standalone=standalone,
            peering_name=options.peering,
            priority=options.priority,
            **scope,
        )
        self._thread = threading.Thread(
            target=self._run, args=(run,), name=f"kopf-{self.namespace or 'cluster'}", daemon=True
        )
        self._thread.start()
        self._wait_ready()

    def _run(self, operator: Callable[..., Coroutine[Any, Any, None]]) -> None:
        # asyncio.Runner: a loop of this thread's own, and at the end its leftover tasks cancelled,
        # async generators (kopf's watch streams) closed, the executor of sync handlers joined.
        try:
            with asyncio.Runner() as runner:
                runner.run(self._main(operator))
        except asyncio.CancelledError:
            pass  # kopf.run() treats it the same way: a stop, not a crash
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self._ended = True
            self._settled.set()

    async def _main(self, operator: Callable[..., Coroutine[Any, Any, None]]) -> None:
        with self._lock:
            self._loop, self._stop_flag = asyncio.get_running_loop(), asyncio.Event()
            if self._stopping:  # stop() came before the loop
                self._stop_flag.set()
        await operator(stop_flag=self._stop_flag)

    def _wait_ready(self) -> None:
        timeout = self._options.ready_timeout
        if self._settled.wait(timeout) and not self._ended:
            return
        if self.errors:
            first = self.errors[0]
            raise OperatorFailed(f"kopf did not start: {type(first).__name__}: {first}") from first
        if self._ended:
            raise OperatorFailed("kopf exited before its startup handlers finished, without an error")
        raise OperatorFailed(f"kopf's startup handlers did not finish within {timeout:.0f}s")

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
            if self._loop is not None and self._stop_flag is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: kopf has ended
                    self._loop.call_soon_threadsafe(self._stop_flag.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise OperatorFailed(f"kopf ({self._thread.name}) did not stop within {timeout:.0f}s")


def load_registry(*handlers: Handlers) -> kopf.OperatorRegistry:
    """A fresh registry holding `handlers`' handlers (see the module doc): modules and files are
    loaded into kopf's default registry once per process, and every handler of that registry but
    kopf's fallback logins is put into the new one; callables register into it directly."""
    import kopf

    with _IMPORT_LOCK:
        for source in handlers:
            if not callable(source):
                _load(source)
        registry = kopf.OperatorRegistry()
        default = kopf.get_default_registry()
        for part in SUB_REGISTRIES:
            target = getattr(registry, part)
            for handler in getattr(default, part).get_all_handlers():
                if not getattr(handler, "_fallback", False):  # the logins reading the environment
                    target.append(handler)
        callables = [source for source in handlers if callable(source)]
        if callables:
            with _default_registry(registry):  # plain decorators in them land in the fresh one
                for register in callables:
                    register(registry)
    return registry


@contextlib.contextmanager
def _default_registry(registry: kopf.OperatorRegistry) -> Iterator[None]:
    import kopf

    previous = kopf.get_default_registry()
    kopf.set_default_registry(registry)
    try:
        yield
    finally:
        kopf.set_default_registry(previous)


def _load(source: str | os.PathLike[str]) -> ModuleType:
    """Import a module (once: Python's own cache) or execute a file (once per path: ours), as
    `kopf run -m` and `kopf run PATH` do; a missing one is a ConfigError naming it, an error raised
    by its code is one naming the source, with the original chained."""
    if not _is_path(source):
        name = str(source)
        try:
            if importlib.util.find_spec(name) is None:
                raise ConfigError(f"kopf_operator: no handlers module named {name!r} (sys.path: {sys.path})")
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"kopf_operator: cannot import handlers module {name!r}: {exc}") from exc
        try:
            return importlib.import_module(name)
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
            raise ConfigError(f"kopf_operator: importing {name!r} failed: {failure}") from exc
    path = Path(source).resolve()
    if path in _FILES:
        return _FILES[path]
    if not path.is_file():
        raise ConfigError(f"kopf_operator: handlers file {path} does not exist")
    # kopf run's own naming and import path for a file, so imports beside it resolve as they do there.
    name = f"__kopf_script_{len(_FILES)}__{path}"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"kopf_operator: executing {path} failed: {type(exc).__name__}: {exc}") from exc
    _FILES[path] = module
    return module


def _add_login(registry: kopf.OperatorRegistry, identity: Identity, namespace: str | None) -> None:
    import kopf

    @kopf.on.login(registry=registry, id="envtest-identity")
    def envtest_identity(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(identity, namespace)


def connection_info(identity: Identity, namespace: str | None = None) -> kopf.ConnectionInfo:
    """What kopf's login handlers return, for `identity` (see `envtest.adapters.identity`):
    `namespace` (else the identity's) is where kopf posts events about cluster-scoped objects."""
    import kopf

    return kopf.ConnectionInfo(
        server=identity.server,
        ca_data=identity.ca_pem,
        insecure=identity.insecure or None,
        token=identity.token,
        certificate_data=identity.client_cert_pem,
        private_key_data=identity.client_key_pem,
        default_namespace=namespace or identity.namespace,
        priority=LOGIN_PRIORITY,
    )


def _is_path(source: str | os.PathLike[str]) -> bool:
    return isinstance(source, os.PathLike) or source.endswith(".py") or os.sep in source


def _module_name(handlers: Handlers) -> str:
    if isinstance(handlers, str | os.PathLike):
        return Path(handlers).stem if _is_path(handlers) else str(handlers)
    return str(getattr(handlers, "__module__", None) or __name__)


def _labels(handlers: tuple[Handlers, ...]) -> str:
    return ", ".join(_label(source) for source in handlers)


def _label(handlers: Handlers) -> str:
    if isinstance(handlers, str | os.PathLike):
        return repr(os.fspath(handlers))
    return str(getattr(handlers, "__qualname__", None) or repr(handlers))
