"""A kopf operator under the plugin, without glue:

    # myop/testing.py, named by the ini: envtest_operator = "myop.testing:operator"
    from envtest.adapters.kopf import kopf_operator
    operator = kopf_operator("myop.handlers")

Per test: a fresh `kopf.OperatorRegistry` with your handlers registered into it (the module is
executed again, so module-level state starts fresh too), logged in as the test's operator identity,
scoped to the test's namespace, run on its own event loop in a thread, stopped through kopf's stop
flag at teardown. An exception that ends the operator fails the test; a handler's exception is
kopf's to retry, as in production. kopf logs through the standard logging module, so the test's
operator log holds its records.

kopf's own `KopfRunner` (kopf.testing) drives the CLI in a thread; this adapter calls
`kopf.operator()` directly instead: no command line to build, no fallback logins reading KUBECONFIG
(the admin's, in a test process), and a stop flag awaited on the operator's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from envtest.adapters.identity import Identity, read_identity
from envtest.errors import ConfigError, OperatorFailed

if TYPE_CHECKING:  # kopf is imported when an operator is built, not with this module
    import kopf

Handlers = str | os.PathLike[str] | Callable[["kopf.OperatorRegistry"], object]
"""A module name (`myop.handlers`), a file (`handlers.py`), or `register(registry)`."""

LOGIN_PRIORITY = 1_000_000
"""Above kopf's own login helpers (10-20): a handler module's `@kopf.on.login` may still run, but
the vault serves the test's identity."""

_REGISTRY_SWAP = threading.Lock()  # kopf's default registry is process-wide; one swap at a time


def kopf_operator(
    handlers: Handlers,
    *,
    settings: Callable[[kopf.OperatorSettings], object] | None = None,
    ready_timeout: float = 30.0,
) -> Callable[..., KopfOperator]:
    """An operator factory (for `envtest_operator` or the `envtest_operator_factory` fixture).

    `handlers`: where the handlers are — a module name, a `.py` file (relative to the working
    directory), or a callable given the fresh registry (`@kopf.on.create(..., registry=registry)`, or
    plain decorators: the registry is kopf's default while it runs). `settings` adjusts
    `kopf.OperatorSettings` after the adapter's defaults (`standalone` peering, no cluster scanning:
    the identity may neither list namespaces nor watch CRDs, and the CRDs are installed before any
    operator starts). `ready_timeout`: seconds `start()` waits for kopf's startup handlers."""
    if not (callable(handlers) or isinstance(handlers, str | os.PathLike)):
        raise ConfigError(
            f"kopf_operator(handlers={handlers!r}): expected a module name, a .py path or "
            "a callable taking the registry"
        )

    def factory(api_factory: Any, *, namespace: str | None, kubeconfig: Path) -> KopfOperator:
        return KopfOperator(
            handlers,
            namespace=namespace,
            kubeconfig=kubeconfig,
            settings=settings,
            ready_timeout=ready_timeout,
        )

    # The runner captures DEBUG of the factory's top package: make that the handlers' own.
    factory.__module__ = _module_name(handlers)
    factory.__qualname__ = factory.__name__ = f"kopf_operator({_label(handlers)})"
    return factory


class KopfOperator:
    """One kopf operator on its own event loop and thread; the harness's operator contract."""

    def __init__(
        self,
        handlers: Handlers,
        *,
        namespace: str | None,
        kubeconfig: Path,
        settings: Callable[[kopf.OperatorSettings], object] | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        self.handlers, self.namespace, self.kubeconfig = handlers, namespace, Path(kubeconfig)
        self._settings, self._ready_timeout = settings, ready_timeout
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
        """Build the registry here, so a broken handler module fails `start()` with its own
        error; then run kopf and wait for its startup handlers."""
        import kopf

        identity = read_identity(self.kubeconfig)
        self.registry = registry = load_registry(self.handlers)
        _add_login(registry, identity, self.namespace)
        settings = kopf.OperatorSettings()
        settings.peering.standalone = True  # one operator per test namespace: nobody to peer with
        settings.scanning.disabled = True
        # kopf's last resort against a stuck exit SIGKILLs its thread, that is the whole pytest
        # process; here stop() reports an operator that will not stop instead.
        settings.process.ultimate_exiting_timeout = None
        if self._settings is not None:
            self._settings(settings)
        scope: dict[str, Any] = {"namespaces": [self.namespace]} if self.namespace else {"clusterwide": True}
        run = functools.partial(
            kopf.operator, registry=registry, settings=settings, ready_flag=self._settled, **scope
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
        if self._settled.wait(self._ready_timeout) and not self._ended:
            return
        if self.errors:
            first = self.errors[0]
            raise OperatorFailed(f"kopf did not start: {type(first).__name__}: {first}") from first
        if self._ended:
            raise OperatorFailed("kopf exited before its startup handlers finished, without an error")
        raise OperatorFailed(f"kopf's startup handlers did not finish within {self._ready_timeout:.0f}s")

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


def load_registry(handlers: Handlers) -> kopf.OperatorRegistry:
    """A fresh registry holding `handlers`' handlers (see `kopf_operator`)."""
    import kopf

    registry = kopf.OperatorRegistry()  # not kopf's Smart one: its fallback logins read KUBECONFIG
    with _default_registry(registry):
        if isinstance(handlers, str | os.PathLike):
            _execute(handlers)
        else:
            handlers(registry)
    return registry


@contextlib.contextmanager
def _default_registry(registry: kopf.OperatorRegistry) -> Iterator[None]:
    import kopf

    with _REGISTRY_SWAP:
        previous = kopf.get_default_registry()
        kopf.set_default_registry(registry)
        try:
            yield
        finally:
            kopf.set_default_registry(previous)


def _execute(source: str | os.PathLike[str]) -> ModuleType:
    """Run the module's code again into a new module object (its decorators register into the
    default registry of the moment). It is in sys.modules while it runs, as a normal import would
    put it (dataclasses and pydantic look themselves up there), and the entry is restored after."""
    if _is_path(source):
        path = Path(source).resolve()
        if not path.is_file():
            raise ConfigError(f"kopf_operator: handlers file {path} does not exist")
        spec = importlib.util.spec_from_file_location(path.stem, path)
    else:
        try:
            spec = importlib.util.find_spec(str(source))
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"kopf_operator: cannot import handlers module {source!r}: {exc}") from exc
        if spec is None:
            raise ConfigError(f"kopf_operator: no handlers module named {source!r} (sys.path: {sys.path})")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    missing = object()
    previous = sys.modules.get(spec.name, missing)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if previous is missing:
            sys.modules.pop(spec.name, None)
        else:
            sys.modules[spec.name] = previous  # type: ignore[assignment]
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


def _label(handlers: Handlers) -> str:
    if isinstance(handlers, str | os.PathLike):
        return repr(os.fspath(handlers))
    return str(getattr(handlers, "__qualname__", None) or repr(handlers))
