"""Controller: maps watch events to keys of the primary kind and runs N reconcile workers.

    Controller("mysqlcluster", reconciler).for_(MySQLCluster).owns(StatefulSet, Service, Secret)

Events of the primary kind enqueue the object's own key; events of owned kinds enqueue the key of
the owner named by their controller ownerReference (controller=true) whose kind and API group match
the primary kind. The Manager calls setup() / start() / stop() once per leadership term, each time
with fresh informers and a fresh queue.

Outcome of one reconcile → what the queue does:
    returned Result()                  forget (success)
    returned Result(requeue_after=s)   forget, then add_after(s)
    returned Result(requeue=True)      add_rate_limited
    raised, HTTP 409                   add_rate_limited, logged at DEBUG (conflicts are routine)
    raised, Retry-After known (429)    add_rate_limited, waiting at least Retry-After
    raised, anything else              add_rate_limited, logged as an error
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pykube
from pykube.objects import NamespacedAPIObject

from .client import CONFLICT, retry_after, status_code
from .clock import SYSTEM_CLOCK, Clock
from .metrics import Metrics
from .types import Key, Reconciler, Result, make_key
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Kind = type[pykube.objects.APIObject]


class EventSource(Protocol):
    """What a controller needs of an informer (an Informer, or a fake in tests)."""

    def add_handler(self, handler: Callable[[str, dict[str, Any]], None]) -> None: ...


def api_group(api_version: str) -> str:
    """'apps/v1' → 'apps'; 'v1' → '' (the core group)."""
    return api_version.rpartition("/")[0]


def owner_keys(obj: dict[str, Any], owner_kind: Kind) -> list[Key]:
    """Keys of the controlling owner of `obj` if it is an `owner_kind` (at most one)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") if issubclass(owner_kind, NamespacedAPIObject) else None
    return [
        make_key(namespace, ref["name"])
        for ref in meta.get("ownerReferences") or []
        if ref.get("controller")
        and ref.get("kind") == owner_kind.kind
        and api_group(ref.get("apiVersion", "")) == api_group(owner_kind.version)
    ]


class Controller:
    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        workers: int = 2,
        base_delay: float = 0.005,
        max_delay: float = 300.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"Controller {name!r}: workers must be at least 1, got {workers}")
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self.base_delay = base_delay
        """Seconds of the first backoff after a failed reconcile (doubles per failure of the key)."""
        self.max_delay = max_delay
        self.kind: Kind | None = None
        self.owned: list[Kind] = []
        self.queue: WorkQueue | None = None
        """The current term's queue; None before the first setup()."""
        self._metrics = Metrics()
        self._on_crash: Callable[[BaseException], None] | None = None
        self._clock: Clock = SYSTEM_CLOCK
        self._threads: list[threading.Thread] = []

    # -- building -------------------------------------------------------------------------------

    def for_(self, kind: Kind) -> Controller:
        if self.kind is not None:
            raise ValueError(f"Controller {self.name!r} already reconciles {self.kind.kind}")
        self.kind = kind
        return self

    def owns(self, *kinds: Kind) -> Controller:
        self.owned.extend(k for k in kinds if k not in self.owned)
        return self

    @property
    def kinds(self) -> list[Kind]:
        """Every kind this controller needs an informer for: the primary one first."""
        if self.kind is None:
            raise ValueError(f"Controller {self.name!r} has no primary kind: call for_() first")
        return [self.kind, *self.owned]

    # -- running (called by the Manager) --------------------------------------------------------

    def setup(
        self,
        informers: Mapping[Kind, EventSource],
        *,
        metrics: Metrics | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        clock: Clock | None = None,
    ) -> WorkQueue:
        """Create this term's queue and subscribe to the informers; call before they start."""
        primary = self.kinds[0]
        self._metrics = metrics or self._metrics
        self._on_crash = on_crash
        self._clock = clock or SYSTEM_CLOCK
        queue = WorkQueue(self.name, base_delay=self.base_delay, max_delay=self.max_delay, clock=clock)
        self.queue = queue
        self._metrics.workqueue_depth.labels(name=self.name).set_function(lambda: len(queue))
        informers[primary].add_handler(lambda _type, obj: queue.add(make_key(_namespace(obj), _name(obj))))
        for kind in self.owned:
            informers[kind].add_handler(lambda _type, obj: self._enqueue_owner(queue, obj))
        return queue

    def start(self) -> None:
        """Start the workers; the Manager calls this once the informers have synced."""
        self._threads = [
            threading.Thread(target=self._worker, name=f"{self.name}-worker-{i}", daemon=True)
            for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the queue down and wait for in-flight reconciles (they are not interrupted)."""
        if self.queue is not None:
            self.queue.shutdown()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(max(deadline - time.monotonic(), 0.0))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("controller %s: workers still reconciling after %.1fs: %s", self.name, timeout, alive)
        self._threads = []

    def _enqueue_owner(self, queue: WorkQueue, obj: dict[str, Any]) -> None:
        assert self.kind is not None
        for key in owner_keys(obj, self.kind):
            queue.add(key)

    def _worker(self) -> None:
        try:
            while self.process_next():
                pass
        except BaseException as exc:
            if self._on_crash is None:
                raise
            self._on_crash(exc)

    def process_next(self, timeout: float | None = None) -> bool:
        """Reconcile one key; False once the queue shuts down. Workers loop on it; tests call it."""
        queue = self.queue
        if queue is None:
            raise RuntimeError(f"Controller {self.name!r} is not set up")
        key = queue.get(timeout)
        if key is None:
            return not queue.shutting_down
        try:
            self._reconcile(queue, key)
        finally:
            queue.done(key)
        return True

    def _reconcile(self, queue: WorkQueue, key: Key) -> None:
        started = self._clock.monotonic()
        detail = ""
        try:
            result = self.reconciler.reconcile(key)
        except Exception as exc:
            outcome, detail = self._failed(queue, key, exc)
            self._metrics.reconcile_errors_total.labels(controller=self.name).inc()
        else:
            outcome = self._succeeded(queue, key, result)
        duration = self._clock.monotonic() - started
        self._metrics.reconcile_total.labels(controller=self.name, result=outcome).inc()
        self._metrics.reconcile_duration_seconds.labels(controller=self.name).observe(duration)
        log.debug("%s: reconciled %s in %.3fs: %s%s", self.name, key, duration, outcome, detail)

    def _succeeded(self, queue: WorkQueue, key: Key, result: Result | None) -> str:
        result = result or Result()
        if result.requeue_after is not None and result.requeue_after > 0:
            queue.forget(key)
            queue.add_after(key, result.requeue_after)
            return "requeue_after"
        if result.requeue:
            queue.add_rate_limited(key)
            return "requeue"
        queue.forget(key)
        return "success"

    def _failed(self, queue: WorkQueue, key: Key, exc: Exception) -> tuple[str, str]:
        code = status_code(exc)
        delay = queue.add_rate_limited(key, not_before=retry_after(exc) or 0.0)
        if code == CONFLICT:
            # Routine under concurrent writers: the debug line of the reconcile says it, nothing louder.
            return "conflict", f" ({exc}); requeued in {delay:.3f}s"
        if code is not None:
            log.warning("%s: %s: HTTP %s: %s; requeued in %.3fs", self.name, key, code, exc, delay)
        else:
            log.error("%s: reconcile of %s failed; requeued in %.3fs", self.name, key, delay, exc_info=exc)
        return "error", f"; requeued in {delay:.3f}s"


def _namespace(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("namespace")


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]
