"""An asyncio operator under the plugin, without glue:

    # myop/testing.py, named by the ini: envtest_operator = "myop.testing:operator"
    from envtest.adapters.aio import async_operator
    from myop.main import run  # async def run(stop, *, async_k8s, namespace): ... until stop is set
    operator = async_operator(run)

`run`'s first parameter is an `asyncio.Event` set at teardown: return soon after it is set. If it has
not returned `grace` seconds later, its task is cancelled — a `CancelledError` it lets through is a
stop, not a failure. Its keyword parameters say what it gets, built on its own loop as the test's
operator identity and closed after it returned:

- `namespace` (the test's; None in cluster-wide mode), `kubeconfig` (Path of its identity);
- `async_k8s`: a `kubernetes.aio.client.ApiClient` (the official client's asyncio API, kubernetes >= 37);
- `k8s_asyncio`: a `kubernetes_asyncio.client.ApiClient`, where that library is installed.

The default configurations of both libraries and `KUBECONFIG` name the identity while it runs (see
`envtest.ambient`), so `await kubernetes.aio.config.load_kube_config()` in the operator finds it too.
An exception escaping `run` fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from envtest.adapters.signatures import name_of as _name
from envtest.adapters.signatures import wanted
from envtest.errors import ConfigError, OperatorFailed

CLIENTS = {"async_k8s": "kubernetes.aio", "k8s_asyncio": "kubernetes_asyncio"}
"""Keyword → the library whose ApiClient it is."""
RUN_KEYWORDS = ("namespace", "kubeconfig", *CLIENTS)


def async_operator(
    run: Callable[..., Awaitable[object]], *, name: str | None = None, grace: float = 5.0
) -> Callable[..., AsyncOperator]:
    """An operator factory running `await run(stop, **what_it_names)` on an event loop of its own,
    in a thread named `name` (default: the function's). A parameter the harness cannot fill, or a
    `run` that is not a coroutine function, is a ConfigError now, when the factory is made."""
    if not inspect.iscoroutinefunction(run):
        raise ConfigError(f"async_operator({_name(run)}): expected an `async def` function")
    wanted = _wanted(run)

    def factory(api_factory: Any, *, namespace: str | None, kubeconfig: Path) -> AsyncOperator:
        return AsyncOperator(
            run, wanted, namespace=namespace, kubeconfig=kubeconfig, name=name or _name(run), grace=grace
        )

    # The runner captures DEBUG of the factory's top package: make that `run`'s own.
    factory.__module__ = getattr(run, "__module__", None) or __name__
    factory.__qualname__ = factory.__name__ = f"async_operator({_name(run)})"
    return factory


class AsyncOperator:
    """One `run` on its own loop and thread; the harness's operator contract."""

    def __init__(
        self,
        run: Callable[..., Awaitable[object]],
        wanted: tuple[str, ...],
        *,
        namespace: str | None,
        kubeconfig: Path,
        name: str,
        grace: float = 5.0,
    ) -> None:
        self._run, self._wanted, self._name, self._grace = run, wanted, name, grace
        self.namespace, self.kubeconfig = namespace, Path(kubeconfig)
        self._lock = threading.Lock()  # guards the three below
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._target, name=self._name, daemon=True)
        self._thread.start()

    def _target(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.errors.append(exc)

    async def _main(self) -> None:
        with self._lock:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            if self._stopping:
                self._stop.set()
        stop = self._stop
        async with contextlib.AsyncExitStack() as clients:
            kwargs = {key: await self._argument(key, clients) for key in self._wanted}
            task = asyncio.ensure_future(self._run(stop, **kwargs))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():  # asked to stop: give it its grace, then cancel it
                await asyncio.wait({task}, timeout=self._grace)
                task.cancel()
            stopped.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # its own exception, if any, propagates: it fails the test

    async def _argument(self, key: str, clients: contextlib.AsyncExitStack) -> Any:
        if key == "namespace":
            return self.namespace
        if key == "kubeconfig":
            return self.kubeconfig
        library = importlib.import_module(CLIENTS[key])
        configuration = library.client.Configuration()
        await library.config.load_kube_config(
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        api = library.client.ApiClient(configuration)
        clients.push_async_callback(api.close)
        return api

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping = True
            if self._loop is not None and self._stop is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: run has ended
                    self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise OperatorFailed(f"{self._name} did not stop within {timeout:.0f}s")


def _wanted(run: Callable[..., object]) -> tuple[str, ...]:
    """The `RUN_KEYWORDS` `run` names (see `signatures.wanted`); a client whose library does not
    import is a ConfigError when named, and left out of a `**kwargs`."""
    chosen = wanted(
        run, RUN_KEYWORDS, adapter="async_operator", stop="an asyncio.Event set when the test ends"
    )
    named = {p.name for p in inspect.signature(run).parameters.values()}
    for key, library in CLIENTS.items():
        if key in chosen and not _importable(library):
            if key in named:
                raise ConfigError(
                    f"async_operator({_name(run)}) asks for `{key}`: {library} is not installed"
                )
            chosen = tuple(k for k in chosen if k != key)
    return chosen


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:  # ImportError, or a dependency of it missing
        return False
    return True
