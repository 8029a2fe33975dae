"""The process's ambient Kubernetes configuration, pointed at one kubeconfig and put back after.

Client libraries find a cluster without being told: `kubernetes.config.load_kube_config()` and
`pykube.KubeConfig.from_env()` read `KUBECONFIG` (else `~/.kube/config`), in-cluster detection reads
`KUBERNETES_SERVICE_HOST`, and `kubernetes.client.ApiClient()` built with no configuration uses the
official client's default `Configuration` — which kopf's login sets in production, so handlers
written after kopf's walkthrough call `kubernetes.client.CoreV1Api()` with no arguments. In a test
process every one of these names the developer's cluster unless someone points them elsewhere.

`point(kubeconfig)` points them all at one kubeconfig (a frame on a process-wide stack) and
`Frame.close()` undoes it; frames may close in any order, the newest open one is in effect:

- `KUBECONFIG` is set to the file; `KUBERNETES_SERVICE_HOST`/`_PORT` (and pykube-ng's `PYKUBE_`
  twins) are removed, so in-cluster detection cannot pick the pod a CI job runs in;
- the default `Configuration` of `kubernetes.client`, and of `kubernetes.aio` and
  `kubernetes_asyncio` where they import, is the file's current context;
- those libraries' `KUBE_CONFIG_DEFAULT_LOCATION` names the file: they read `KUBECONFIG` once, when
  they are imported (this plugin imports the official client before any frame opens), and their
  `load_kube_config()` with no file reads that constant, not the environment.

A frame may load the defaults from another file than the one the environment names, and have them
read their token from a credential file before each request (an operator's: clients made from them
in an earlier test follow the running test's identity, see `envtest.plugin.following`).

The plugin keeps the session's admin in the bottom frame (a placeholder that reaches no cluster until
the plane is up) and each running operator's identity above it. Everything is restored exactly at
the last close: variables that were unset are unset again, the defaults are the objects they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

IN_CLUSTER_VARIABLES = (
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "PYKUBE_KUBERNETES_SERVICE_HOST",
    "PYKUBE_KUBERNETES_SERVICE_PORT",
)
"""What in-cluster detection reads (the official clients, pykube-ng): removed while a frame is open."""

SYNC_CLIENTS = ("kubernetes.client",)
ASYNC_CLIENTS = ("kubernetes.aio.client", "kubernetes_asyncio.client")
"""Client packages whose `Configuration` default is pointed; async loaders are coroutines."""

LOADER_MODULES = tuple(
    f"{library}.config{inner}"
    for library in ("kubernetes", "kubernetes.aio", "kubernetes_asyncio")
    for inner in ("", ".kube_config")
)
"""Where the client libraries keep `KUBE_CONFIG_DEFAULT_LOCATION`, the file `load_kube_config()` and
`load_config()` read when given none (the package re-exports the constant: both copies are read)."""
LOADER_DEFAULT = "KUBE_CONFIG_DEFAULT_LOCATION"

_UNSET = object()


@dataclass
class Frame:
    """One pointing; `close()` (idempotent) removes it."""

    kubeconfig: Path
    label: str
    defaults_from: Path | None = None
    """The file the client libraries' default configurations are loaded from, when not `kubeconfig`
    (an operator's: the environment names a file whose credential follows the running test)."""
    token_file: Path | None = None
    """An ExecCredential file the default configurations read their bearer token from before each
    request, so copies made from them earlier follow it (see `envtest.plugin.following`)."""
    credential: bytes | None = None
    """What `token_file` holds while this frame is in effect: written whenever it becomes the newest
    open frame again (an operator that outlived another started after it gets its own token back)."""
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        _stack.remove(self)

    def repoint(self, kubeconfig: Path | str) -> None:
        """Point this frame at another kubeconfig (the plane it waited for is up)."""
        self.kubeconfig = Path(kubeconfig)
        _stack.reload(self)

    def __enter__(self) -> Frame:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Stack:
    def __init__(self) -> None:
        self._lock = threading.RLock()  # guards everything below
        self._frames: list[Frame] = []
        self._saved_env: dict[str, object] = {}  # variable → value before the first frame (or _UNSET)
        self._saved_defaults: dict[str, object] = {}  # module → its Configuration._default then
        self._saved_locations: dict[str, object] = {}  # module → its LOADER_DEFAULT then

    def push(self, frame: Frame) -> None:
        with self._lock:
            if not self._frames:
                self._save()
            self._frames.append(frame)
            self._apply(frame)

    def remove(self, frame: Frame) -> None:
        with self._lock:
            if frame._closed:
                return
            frame._closed = True
            was_top = self._frames and self._frames[-1] is frame
            self._frames = [f for f in self._frames if f is not frame]
            if not self._frames:
                self._restore()
            elif was_top:
                self._apply(self._frames[-1])

    def reload(self, frame: Frame) -> None:
        with self._lock:
            if self._frames and self._frames[-1] is frame:
                self._apply(frame)

    def current(self) -> Frame | None:
        with self._lock:
            return self._frames[-1] if self._frames else None

    # -- what a frame changes ---------------------------------------------------------------------

    def _save(self) -> None:
        for name in ("KUBECONFIG", *IN_CLUSTER_VARIABLES):
            self._saved_env[name] = os.environ.get(name, _UNSET)
        for module in (*SYNC_CLIENTS, *ASYNC_CLIENTS):
            configuration = _configuration_class(module)
            if configuration is not None:
                self._saved_defaults[module] = configuration._default
        for module in LOADER_MODULES:
            loader = _loaded_module(module)
            if loader is not None and hasattr(loader, LOADER_DEFAULT):
                self._saved_locations[module] = getattr(loader, LOADER_DEFAULT)

    def _restore(self) -> None:
        for name, value in self._saved_env.items():
            if value is _UNSET:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        for module, default in self._saved_defaults.items():
            configuration = _configuration_class(module)
            if configuration is not None:
                configuration._default = default  # the very object: nothing else held it as a copy
        for module, location in self._saved_locations.items():
            loader = _loaded_module(module)
            if loader is not None:
                setattr(loader, LOADER_DEFAULT, location)
        self._saved_env.clear()
        self._saved_defaults.clear()
        self._saved_locations.clear()

    def _apply(self, frame: Frame) -> None:
        os.environ["KUBECONFIG"] = str(frame.kubeconfig)
        for name in IN_CLUSTER_VARIABLES:
            os.environ.pop(name, None)
        if frame.token_file is not None and frame.credential is not None:
            _replace(frame.token_file, frame.credential)
        source = frame.defaults_from or frame.kubeconfig
        for module in (*SYNC_CLIENTS, *ASYNC_CLIENTS):
            configuration = _configuration_class(module)
            if configuration is None:
                continue
            if module not in self._saved_defaults:  # imported after the first frame opened
                self._saved_defaults[module] = configuration._default
            try:
                loaded = _load(module, configuration, source)
                if frame.token_file is not None:
                    loaded.refresh_api_key_hook = _bearer_from(frame.token_file)
                configuration.set_default(loaded)
            except Exception as exc:  # a placeholder or a library that cannot read this file
                log.debug("%s: default configuration not set from %s: %s", module, source, exc)
                configuration.set_default(None)
        for module in LOADER_MODULES:
            loader = _loaded_module(module)
            if loader is None or not hasattr(loader, LOADER_DEFAULT):
                continue
            if module not in self._saved_locations:  # imported after the first frame opened: from it
                self._saved_locations[module] = self._environment_location()
            setattr(loader, LOADER_DEFAULT, str(frame.kubeconfig))

    def _environment_location(self) -> str:
        """What a library imported before the first frame would have read from the environment."""
        value = self._saved_env.get("KUBECONFIG", _UNSET)
        return "~/.kube/config" if value is _UNSET else str(value)


_stack = _Stack()


def point(
    kubeconfig: Path | str,
    *,
    label: str = "",
    defaults_from: Path | str | None = None,
    token_file: Path | str | None = None,
    credential: bytes | None = None,
) -> Frame:
    """Point the process's ambient configuration at `kubeconfig` until the frame is closed; the
    libraries' default configurations at `defaults_from` when given, their token at `token_file`
    (which holds `credential` while this frame is in effect)."""
    frame = Frame(
        Path(kubeconfig),
        label or str(kubeconfig),
        Path(defaults_from) if defaults_from else None,
        Path(token_file) if token_file else None,
        credential,
    )
    _stack.push(frame)
    return frame


def current() -> Frame | None:
    """The frame in effect, if any."""
    return _stack.current()


@contextlib.contextmanager
def pointed(kubeconfig: Path | str, **options: Any) -> Iterator[Frame]:
    """`point(kubeconfig, **options)` (its keywords) for the duration of a `with` block."""
    frame = point(kubeconfig, **options)
    try:
        yield frame
    finally:
        frame.close()


def _configuration_class(module: str) -> Any:
    """`<module>.Configuration` when that client library imports here, else None. Only libraries
    already imported or importable are touched: an optional one that is absent costs nothing."""
    return getattr(_loaded_module(module), "Configuration", None)


def _loaded_module(module: str) -> Any:
    """`module` if it imports here, else None."""
    try:
        return importlib.import_module(module)
    except Exception:  # ImportError, or an async client whose optional dependency (aiohttp) is missing
        return None


def _load(module: str, configuration: Any, kubeconfig: Path) -> Any:
    """A Configuration of `kubeconfig`'s current context, loaded by the library's own loader."""
    target = configuration()
    loader = importlib.import_module(module.rsplit(".", 1)[0] + ".config").load_kube_config
    result = loader(config_file=str(kubeconfig), client_configuration=target, persist_config=False)
    if asyncio.iscoroutine(result):  # the async libraries' loaders; a loop of their own, here
        _run_coroutine(result)
    return target


def _replace(path: Path, data: bytes) -> None:
    """`path` holding `data`, swapped in whole (a reader sees the old or the new), private (0600)."""
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise


def _bearer_from(token_file: Path) -> Callable[[Any], None]:
    """A `refresh_api_key_hook` (the official client's and the async libraries' alike call it before
    each request) setting the token the ExecCredential `token_file` holds now. Copies of a
    configuration share its hook: a client made from the default in an earlier test follows too."""

    def refresh(configuration: Any) -> None:
        try:
            token = json.loads(token_file.read_text())["status"]["token"]
        except (OSError, ValueError, KeyError, TypeError):
            return  # the session is over (its folder removed): the last token stays
        configuration.api_key["BearerToken"] = f"Bearer {token}"

    return refresh


def _run_coroutine(coroutine: Any) -> None:
    # In a thread: this may be called from inside a running event loop (an async test's setup).
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coroutine)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="envtest-ambient-load")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
