"""Informer: a local cache of one kind, kept current by list + watch, with event handlers.

Protocol with the apiserver (what client-go's reflector does, minus the watch cache tricks):
list (paged) → watch from the list's resourceVersion with `allowWatchBookmarks=true`
and a server-side `timeoutSeconds`, each event and bookmark advancing the resourceVersion we resume
from. Each watch asks for its own random timeoutSeconds in [5, 10) minutes, as the reflector does:
after an apiserver restart every client reconnects at once, and fixed timeouts would keep those
reconnects (and the relists some of them need) in step forever. An expired resourceVersion
arrives as HTTP 200 and then a watch event of type ERROR whose object is a Status with code 410
(pykube-ng's `watch()` hides it in the resource class, hence the hand-rolled GET here): we relist
and deliver synthetic DELETED events for objects that vanished meanwhile and MODIFIED for changed
ones. A dropped or timed-out connection resumes from the last resourceVersion, so no event is lost.

The first list asks for `resourceVersion=0`, as the reflector does: the apiserver answers from its
watch cache at once. A quorum list (no resourceVersion) waits until that cache has caught up with
etcd, and for a kind with no recent writes that takes an etcd progress notification, requested on a
100 ms tick (apiserver >= 1.31): most of a per-test operator's start. What the cache has not seen yet
arrives on the watch that follows. Relists after an expired watch are quorum reads, as in client-go.

Bounded blocking: a read never waits longer than that watch's timeout + 10 s, and `stop()` shuts
down the socket under a blocked read from the stopping thread so the reader returns at once. Each
informer has its own HTTPClient (from `api_factory`): a session shared by many long-lived watches
exhausts urllib3's connection pool.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pykube
import requests
import urllib3.exceptions
from pykube.exceptions import HTTPError
from pykube.objects import NamespacedAPIObject

from .client import GONE, raise_for_status, status_code
from .labelindex import LabelIndex
from .types import Key, make_key
from .watchlines import watch_lines

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any], dict[str, Any] | None], None]
"""Called with ("ADDED" | "MODIFIED" | "DELETED", object, the previous object or None) on the
informer's thread; keep it quick. The previous object is what lets a handler see a change *away*
from something (an ownerReference removed), which the new object alone cannot show. A handler that
raises is logged and counted (`on_handler_error`), and the event still reaches the other handlers
and the cache: one bad mapper must neither stop the manager nor blind the other controllers."""
Transform = Callable[[dict[str, Any]], dict[str, Any]]

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA_WATCH = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


def drop_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The default transform: managedFields are often the larger part of an object, and unread."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


# Failures after which we reconnect (with backoff) instead of crashing the manager.
_RETRYABLE = (requests.RequestException, urllib3.exceptions.HTTPError, OSError, ValueError, HTTPError)


class WatchExpired(Exception):
    """The resourceVersion we hold is older than the apiserver keeps: relist."""


class _Stopped(Exception):
    pass


def object_key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return make_key(meta.get("namespace"), meta["name"])


def _labels(obj: dict[str, Any]) -> dict[str, str] | None:
    labels: dict[str, str] | None = (obj.get("metadata") or {}).get("labels")
    return labels


def resource_version(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


class Informer:
    def __init__(
        self,
        kind: type[pykube.objects.APIObject],
        api_factory: Callable[[], pykube.HTTPClient],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        transform: Transform | None = drop_managed_fields,
        metadata_only: bool = False,
        watch_timeout: float | None = None,
        min_watch_timeout: float = 300.0,
        connect_timeout: float = 5.0,
        page_size: int = 500,
        backoff_base: float = 0.2,
        backoff_max: float = 30.0,
        on_crash: Callable[[BaseException], None] | None = None,
        on_sync: Callable[[], None] | None = None,
        on_handler_error: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.kind = kind
        self.namespace = namespace if issubclass(kind, NamespacedAPIObject) else None
        """Namespace to list and watch; None = all namespaces (always None for cluster-scoped kinds)."""
        self.label_selector = label_selector
        """Only objects matching it are listed, watched and cached (e.g. only our children)."""
        self.transform = transform
        """Applied to every object before it is cached and delivered."""
        self.metadata_only = metadata_only
        """Cache PartialObjectMetadata only (no spec, no data): for kinds we never diff, and Secrets,
        whose contents this process has no business holding."""
        self.watch_timeout = watch_timeout
        """Server-side timeoutSeconds of every watch; None = a random one per watch in
        [min_watch_timeout, 2 * min_watch_timeout), as client-go's reflector picks it. The client read
        timeout is the watch's timeout + 10 s."""
        self.min_watch_timeout = min_watch_timeout
        """client-go's minWatchTimeout: 5 minutes."""
        self._rng = rng or random.Random()
        self.connect_timeout = connect_timeout
        self.page_size = page_size
        self.backoff_base = backoff_base
        """Seconds before the first reconnect after a failure; doubles per consecutive failure."""
        self.backoff_max = backoff_max
        self.handlers: list[Handler] = []
        self._api_factory = api_factory
        self._on_crash = on_crash
        self._on_sync = on_sync  # called once, after the first list's events: waiters need no poll
        self._on_handler_error = on_handler_error  # called with the kind each time a handler raises
        # Held while the cache changes *and* its event is delivered, and while a handler is added
        # (with its replay of the cache) or removed: a handler added at any moment sees every object
        # exactly as the cache moves on from the replay, none lost between the two.
        self._dispatch = threading.RLock()
        self._lock = threading.Lock()  # guards the fields below, not the handlers' work
        # key -> latest object as compact JSON; replaced whole by a relist. Text, not dicts: a parsed
        # StatefulSet takes ~10x the memory of its JSON (every key string and small dict of its own),
        # and reads are rare next to events. Each read parses anew, so callers get their own copy.
        self._store: dict[Key, str] = {}
        self._index = LabelIndex()  # the store's labels: `select` parses only what matches
        self._rv: str | None = None  # where a watch resumes: last list, event or bookmark
        self._api: pykube.HTTPClient | None = None  # owned by this informer; replaced after a failure
        self._response: requests.Response | None = None  # the reply being read; stop() aborts it
        self._synced = threading.Event()  # set once the first list's events were delivered
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch_was_healthy = False  # the current/last watch delivered something before it ended
        self._denied_since: float | None = None  # monotonic time of the first 401/403 in a row
        self.relists = 0
        """Lists done so far (1 after the initial sync); a count tests and debugging can read."""
        self.handler_errors = 0
        """Exceptions raised by handlers so far (each also logged and reported)."""

    # -- public ---------------------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> Handler:
        """Deliver every later event to `handler`, and at once an ADDED event for each cached object
        (as client-go's AddEventHandler on a running informer does): a controller that starts on an
        informer synced long ago (a standby that won the lease) still sees every object.
        Returns the handler, for remove_handler()."""
        with self._dispatch:
            self.handlers.append(handler)
            for obj in self.list():
                self._call(handler, "ADDED", obj, None)
        return handler

    def remove_handler(self, handler: Handler) -> None:
        """No more events to `handler` once this returns (a no-op if it is not registered)."""
        with self._dispatch:
            if handler in self.handlers:
                self.handlers.remove(handler)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer for {self.kind.kind} already started")
        self._thread = threading.Thread(target=self._main, name=f"informer-{self.kind.kind}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Tell the informer to stop and unblock its read, without waiting for the thread."""
        self._stop.set()
        with self._lock:
            response = self._response
        if response is not None:
            _abort(response)

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("informer for %s did not stop within %.1fs", self.kind.kind, timeout)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def for_namespace(self, namespace: str | None) -> Informer | None:
        """This informer, if it holds `namespace`'s objects (see `multinamespace`)."""
        return self if self.namespace in (None, namespace) else None

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            raw = self._store.get(key)
        return None if raw is None else _decode(raw)

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            raws = list(self._store.values())
        return [_decode(raw) for raw in raws]

    def select(self, namespace: str | None, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The cached objects in `namespace` (None: any) carrying every label of `labels`; only those
        are parsed (see `labelindex`)."""
        with self._lock:
            raws = [self._store[key] for key in self._index.select(namespace, labels)]
        return [_decode(raw) for raw in raws]

    def select_keys(self, namespace: str | None, labels: dict[str, str]) -> list[Key]:
        """The keys `select` would answer with, parsing nothing."""
        with self._lock:
            return self._index.select(namespace, labels)

    def keys(self) -> list[Key]:
        """Keys of every cached object (no parsing: what a resync needs)."""
        with self._lock:
            return list(self._store)

    def denied_for(self) -> float:
        """Seconds list/watch have been answered 401/403 without a success since; 0 when not.

        A rotated token we failed to pick up, or a revoked role: retrying never fixes it, so the
        manager's /healthz reports it (and the kubelet restarts the pod, which reads everything anew).
        """
        with self._lock:
            since = self._denied_since
        return 0.0 if since is None else time.monotonic() - since

    @property
    def resource_version(self) -> str | None:
        with self._lock:
            return self._rv

    # -- the loop -------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._run()
        except _Stopped:
            pass
        except BaseException as exc:
            if self._stop.is_set():
                log.debug("informer for %s ended while stopping: %r", self.kind.kind, exc)
            elif self._on_crash is not None:
                self._on_crash(exc)
            else:
                log.exception("informer for %s crashed", self.kind.kind)
        finally:
            self._drop_client()

    def _run(self) -> None:
        need_list, failures = True, 0
        while not self._stop.is_set():
            try:
                if need_list:
                    self._relist()
                    need_list = False
                    self._allowed()
                if self._watch_once():
                    self._allowed()
                    failures = 0
                    continue
                log.debug("watch of %s ended early; reconnecting", self.kind.kind)
            except WatchExpired as exc:
                # Relist at once the first time; a proxy that expires every watch must not hot-loop.
                log.info("watch of %s expired (%s); relisting", self.kind.kind, exc)
                need_list = True
                if failures == 0:
                    failures = 1
                    continue
            except _RETRYABLE as exc:
                if self._stop.is_set():
                    return
                if status_code(exc) in (401, 403):
                    with self._lock:
                        self._denied_since = self._denied_since or time.monotonic()
                if self._watch_was_healthy:
                    # A drop after a good stretch is a first failure, not one more in a row: else
                    # drops more often than the watch timeout add up to backoff_max of blindness.
                    failures = 0
                log.warning(
                    "%s of %s failed: %s; retrying", "list" if need_list else "watch", self.kind.kind, exc
                )
                self._drop_client()  # a fresh session, in case the pooled connection is the broken part
            delay = min(self.backoff_base * 2 ** min(failures, 32), self.backoff_max)
            failures += 1
            self._pause(delay)

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` before the next attempt, or until stop(): the loop's one wait, and so the seam
        where unit tests record the backoff instead of sleeping through it."""
        self._stop.wait(seconds)

    def _allowed(self) -> None:
        with self._lock:
            self._denied_since = None

    def _relist(self) -> None:
        items: list[dict[str, Any]] = []
        params: dict[str, str] = {"limit": str(self.page_size)}
        if not self.relists:
            params["resourceVersion"] = "0"  # the first list: from the watch cache (see the module doc)
        rv: str | None = None
        while True:
            response = self._request(params, read_timeout=60.0)
            try:
                if response.status_code == GONE:  # a continue token expired mid-way
                    raise WatchExpired("list continue token expired")
                raise_for_status(response)
                body = response.json()
            finally:
                self._release(response)
            meta = body.get("metadata") or {}
            for item in body.get("items") or []:
                # List items come without apiVersion/kind; watch events carry them: make both alike.
                item.setdefault("apiVersion", self.kind.version)
                item.setdefault("kind", self.kind.kind)
                items.append(self.transform(item) if self.transform else item)
            rv = meta.get("resourceVersion")
            if not meta.get("continue"):
                break
            params["continue"] = meta["continue"]
            params.pop("resourceVersion", None)  # the token carries it; the apiserver refuses both
        self._replace(items, rv)

    def _replace(self, items: list[dict[str, Any]], rv: str | None) -> None:
        with self._dispatch:
            self._replace_locked(items, rv)
        if not self._synced.is_set():
            self._synced.set()
            if self._on_sync is not None:
                self._on_sync()

    def _replace_locked(self, items: list[dict[str, Any]], rv: str | None) -> None:
        new = {object_key(o): o for o in items}
        stored = {key: _encode(obj) for key, obj in new.items()}
        index = LabelIndex()
        for key, obj in new.items():
            index.put(key, _labels(obj))
        with self._lock:
            old, self._store, self._rv = self._store, stored, rv
            self._index = index
            self.relists += 1
        events: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        for key, obj in new.items():
            raw = old.get(key)
            if raw is None:
                events.append(("ADDED", obj, None))
            elif resource_version(previous := _decode(raw)) != resource_version(obj):
                events.append(("MODIFIED", obj, previous))
        # Deleted while we were not watching: the last state we saw stands in for the final one.
        for key, raw in old.items():
            if key not in new:
                last = _decode(raw)
                events.append(("DELETED", last, last))
        for event_type, obj, previous in events:
            self._deliver(event_type, obj, previous)

    def _watch_once(self) -> bool:
        """One watch request; True when it was healthy (delivered something or lasted a while)."""
        timeout = self.next_watch_timeout()
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(int(timeout))}
        if self._rv:
            params["resourceVersion"] = self._rv
        started, received = time.monotonic(), 0
        self._watch_was_healthy = False
        response = self._request(params, read_timeout=timeout + 10.0)
        try:
            if response.status_code == GONE:
                raise WatchExpired("HTTP 410")
            raise_for_status(response)
            for line in watch_lines(response):
                if self._stop.is_set():
                    raise _Stopped()
                received += 1
                self._watch_was_healthy = True
                self._apply(json.loads(line))
        finally:
            self._release(response)
        return received > 0 or time.monotonic() - started >= 1.0

    def next_watch_timeout(self) -> float:
        """Seconds the next watch asks the server to keep it open (timeoutSeconds)."""
        if self.watch_timeout is not None:
            return self.watch_timeout
        return self.min_watch_timeout * (1.0 + self._rng.random())

    def _apply(self, event: dict[str, Any]) -> None:
        event_type, obj = event.get("type"), event.get("object")
        if event_type is None and event.get("kind") == "Status":
            event_type, obj = "ERROR", event  # a bare Status line, as some proxies send
        if not isinstance(obj, dict):
            raise ValueError(f"malformed watch event: {json.dumps(event)[:200]}")
        if event_type == "BOOKMARK":
            with self._lock:
                self._rv = resource_version(obj) or self._rv
            return
        if event_type == "ERROR":
            message = obj.get("message") or json.dumps(obj)[:200]
            if obj.get("code") == GONE or obj.get("reason") in ("Expired", "Gone"):
                raise WatchExpired(message)
            raise HTTPError(obj.get("code"), f"watch ERROR event: {message}")
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.debug("ignoring watch event of type %s for %s", event_type, self.kind.kind)
            return
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        raw = None if event_type == "DELETED" else _encode(obj)
        with self._dispatch:
            with self._lock:
                if raw is None:
                    previous = self._store.pop(key, None)
                    self._index.remove(key)
                else:
                    previous = self._store.get(key)
                    self._store[key] = raw
                    self._index.put(key, _labels(obj))
                self._rv = resource_version(obj) or self._rv
            self._deliver(event_type, obj, None if previous is None else _decode(previous))

    def _deliver(self, event_type: str, obj: dict[str, Any], previous: dict[str, Any] | None) -> None:
        for handler in list(self.handlers):
            self._call(handler, event_type, obj, previous)

    def _call(
        self, handler: Handler, event_type: str, obj: dict[str, Any], previous: dict[str, Any] | None
    ) -> None:
        try:
            handler(event_type, obj, previous)
        except Exception:
            # Caught here, not in _run: a handler's ValueError must not pass for a broken stream (the
            # watch would resume past an event the other handlers never saw), nor stop the manager.
            # client-go's informers crash the process here; controller-runtime's users keep asking
            # for the opposite, and a bug in one mapper should cost that mapper's events only.
            self.handler_errors += 1
            name = (obj.get("metadata") or {}).get("name")
            log.exception("%s event handler failed on %s %s", self.kind.kind, event_type, name)
            if self._on_handler_error is not None:
                self._on_handler_error(self.kind.kind)

    # -- HTTP -----------------------------------------------------------------------------------

    def _request(self, params: dict[str, str], *, read_timeout: float) -> requests.Response:
        params = dict(params)
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        kwargs: dict[str, Any] = {"url": self.kind.endpoint, "version": self.kind.version}
        if self.kind.base:
            kwargs["base"] = self.kind.base
        if self.namespace:
            kwargs["namespace"] = self.namespace
        with self._lock:
            if self._api is None:
                self._api = self._api_factory()
            api = self._api
        if self.metadata_only:
            kwargs["headers"] = {"Accept": METADATA_WATCH if params.get("watch") else METADATA_LIST}
        # stream=True even for lists: stop() can then abort a body still being read.
        response = api.get(**kwargs, params=params, stream=True, timeout=(self.connect_timeout, read_timeout))
        with self._lock:
            if not self._stop.is_set():
                self._response = response
                return response
        response.close()
        raise _Stopped()

    def _release(self, response: requests.Response) -> None:
        with self._lock:
            if self._response is response:
                self._response = None
        response.close()

    def _drop_client(self) -> None:
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            api.session.close()


def _abort(response: requests.Response) -> None:
    """Unblock a thread reading `response`, from another thread.

    Closing a socket does not wake a recv() blocked on it in another thread on Linux; shutting it
    down does. urllib3 ≥ 2.3 exposes exactly that as HTTPResponse.shutdown().
    """
    shutdown = getattr(getattr(response, "raw", None), "shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
            return
        except (ValueError, RuntimeError, OSError):
            pass  # already released to the pool or closed: nothing is blocked on it
    try:
        response.close()
    except Exception:  # closing is best effort; the read timeout bounds the wait anyway
        log.debug("closing a watch response failed", exc_info=True)


def _encode(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _decode(raw: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(raw)
    return obj
