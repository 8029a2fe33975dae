"""Controller: maps watch events to keys of the primary kind and runs N reconcile workers.

    Controller("mysqlcluster", reconciler).for_(MySQLCluster).owns(StatefulSet, Service, Secret)

Events of the primary kind enqueue the object's own key; events of owned kinds enqueue the key of
the owner named by their controller ownerReference (controller=true) whose kind and API group match
the primary kind - of the new object *and* of the previous one, so a child whose reference was
removed or changed still wakes the owner that lost it. `watches(kind, mapper)` maps other kinds
(e.g. by label). Every `resync_period` (jittered by ±`resync_jitter`) each cached primary object is
enqueued again, spread over a window, as controller-runtime's SyncPeriod does: drift that no
event reports (a lost event, an object we cannot watch) is repaired eventually. The Manager calls
setup() / start() / stop() / teardown() once per leadership term, each time with a fresh queue; the
informers may be the same from term to term (warm standby): setup() subscribes, and the informer
replays its cache to the new subscription, so the new term reconciles every object it holds.

Outcome of one reconcile → what the queue does (→ controller_runtime_reconcile_total's result):
    returned Result()                  forget (success)
    returned Result(requeue_after=s)   forget, then add_after(s) (requeue_after)
    returned Result(requeue=True)      add_rate_limited (requeue)
    raised, HTTP 409                   add_rate_limited, logged at DEBUG: conflicts are routine (error)
    raised, Retry-After known (429)    add_rate_limited, waiting at least Retry-After
    raised, anything else              add_rate_limited, logged as an error
    raised, not an API/connection error  the same, and counted in controller_runtime_reconcile_panics_total:
                                       a bug in the reconciler never stops the manager (controller-
                                       runtime's RecoverPanic, on by default)
Rate-limited requeues wait for the per-key backoff and for a token of a bucket the controller's keys
share (`qps`, `burst`; ratelimit.py), whichever is longer.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pykube
import requests
import urllib3.exceptions
from pykube.objects import NamespacedAPIObject

from . import fence
from .client import CONFLICT, retry_after, status_code
from .clock import SYSTEM_CLOCK, Clock
from .metrics import Metrics
from .ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket
from .types import Key, Reconciler, Result, make_key
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Kind = type[pykube.objects.APIObject]


Obj = dict[str, Any]
Mapper = Callable[[Obj], list[Key]]
"""Keys of primary objects to reconcile when an object of a watched kind changes."""
Handler = Callable[[str, Obj, Obj | None], None]

# What a reconcile may raise in the ordinary course of talking to an apiserver; anything else is a bug.
_ROUTINE = (requests.RequestException, urllib3.exceptions.HTTPError, OSError, fence.Fenced)


class EventSource(Protocol):
    """What a controller needs of an informer (an Informer, or a fake in tests)."""

    def add_handler(self, handler: Handler) -> Any: ...

    def remove_handler(self, handler: Handler) -> None: ...

    def keys(self) -> list[Key]: ...


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
        resync_period: float | None = 10 * 3600.0,
        resync_jitter: float = 0.1,
        rng: random.Random | None = None,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
    ) -> None:
        if workers < 1:
            raise ValueError(f"Controller {name!r}: workers must be at least 1, got {workers}")
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self.base_delay = base_delay
        """Seconds of the first backoff after a failed reconcile (doubles per failure of the key)."""
        self.max_delay = max_delay
        self.qps = qps
        """Rate-limited requeues per second across all keys, once `burst` is spent (client-go: 10)."""
        self.burst = burst
        """Rate-limited requeues that pass at once after a quiet spell (client-go: 100)."""
        TokenBucket(qps, burst)  # fails now, naming the bad value, rather than at the first term
        self.resync_period = resync_period
        """Seconds between full resyncs of the primary kind; None disables them (default 10 h)."""
        self.resync_jitter = resync_jitter
        """Each period is stretched or shrunk by up to this fraction, and each key is enqueued at a
        random point of that fraction of the period, so replicas and keys do not resync in step."""
        self._rng = rng or random.Random()
        self.kind: Kind | None = None
        self.owned: list[Kind] = []
        self.mapped: dict[Kind, Mapper] = {}
        self.queue: WorkQueue | None = None
        """The current term's queue; None before the first setup()."""
        self._metrics = Metrics()
        self._on_crash: Callable[[BaseException], None] | None = None
        self._clock: Clock = SYSTEM_CLOCK
        self._threads: list[threading.Thread] = []
        self._primary_source: EventSource | None = None
        self._subscriptions: list[tuple[EventSource, Handler]] = []  # this term's, for teardown()

    # -- building -------------------------------------------------------------------------------

    def for_(self, kind: Kind) -> Controller:
        if self.kind is not None:
            raise ValueError(f"Controller {self.name!r} already reconciles {self.kind.kind}")
        self.kind = kind
        return self

    def owns(self, *kinds: Kind) -> Controller:
        self.owned.extend(k for k in kinds if k not in self.owned)
        return self

    def watches(self, kind: Kind, mapper: Mapper) -> Controller:
        """Enqueue `mapper(obj)` (for the new and the previous object) on every event of `kind`."""
        self.mapped[kind] = mapper
        return self

    @property
    def kinds(self) -> list[Kind]:
        """Every kind this controller needs an informer for: the primary one first."""
        if self.kind is None:
            raise ValueError(f"Controller {self.name!r} has no primary kind: call for_() first")
        return [self.kind, *self.owned, *(k for k in self.mapped if k not in self.owned)]

    # -- running (called by the Manager) --------------------------------------------------------

    def setup(
        self,
        informers: Mapping[Kind, EventSource],
        *,
        metrics: Metrics | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        clock: Clock | None = None,
        subscribe: bool = True,
    ) -> WorkQueue:
        """Create this term's queue and subscribe to the informers (before or after they start:
        a started informer replays its cache to the new subscription). With subscribe=False the
        caller calls subscribe() later, e.g. after start(): on a large synced cache the replay takes
        a while, and workers that already run take the first keys as the replay enqueues them."""
        primary = self.kinds[0]
        self._metrics = metrics or self._metrics
        self._on_crash = on_crash
        self._clock = clock or SYSTEM_CLOCK
        queue = WorkQueue(
            self.name,
            base_delay=self.base_delay,
            max_delay=self.max_delay,
            clock=clock,
            hooks=self._metrics.queue_hooks(self.name),
            bucket=TokenBucket(self.qps, self.burst, clock=clock),
        )
        self.queue = queue
        self._metrics.workqueue_depth.labels(name=self.name, controller=self.name).set_function(
            lambda: len(queue)
        )
        self._metrics.max_concurrent_reconciles.labels(controller=self.name).set(self.workers)
        self._primary_source = informers[primary]
        if subscribe:
            self.subscribe(informers)
        return queue

    def subscribe(self, informers: Mapping[Kind, EventSource]) -> None:
        """Feed the current queue from `informers`: the primary kind first, its keys being the ones
        most directly waited for."""
        queue = self.queue
        if queue is None:
            raise RuntimeError(f"Controller {self.name!r} is not set up")
        self._subscribe(
            informers[self.kinds[0]], lambda _t, obj, _old: queue.add(make_key(_namespace(obj), _name(obj)))
        )
        for kind in self.owned:
            self._subscribe(
                informers[kind], lambda _t, obj, old: self._enqueue(queue, self._owners, obj, old)
            )
        for kind, mapper in self.mapped.items():
            self._subscribe(informers[kind], lambda _t, obj, old, m=mapper: self._enqueue(queue, m, obj, old))

    def _subscribe(self, source: EventSource, handler: Handler) -> None:
        self._subscriptions.append((source, handler))
        source.add_handler(handler)

    def teardown(self) -> None:
        """Unsubscribe this term's handlers, so informers that outlive the term (a warm standby's)
        stop feeding a queue nobody drains."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for source, handler in subscriptions:
            source.remove_handler(handler)

    def start(self, term: int | None = None) -> None:
        """Start the workers; the Manager calls this once the informers have synced.

        Each worker is bound to this term's queue (and, for the write fence, to `term`): a worker
        of an earlier term that outlived its stop() finishes its reconcile, finds *its* queue shut
        down and exits; it never takes a key from a later term's queue.
        """
        queue = self.queue
        if queue is None:
            raise RuntimeError(f"Controller {self.name!r} is not set up")
        self._threads = [
            threading.Thread(
                target=self._worker, args=(queue, term), name=f"{self.name}-worker-{i}", daemon=True
            )
            for i in range(self.workers)
        ]
        if self.resync_period:
            self._threads.append(
                threading.Thread(
                    target=self._resync_loop, args=(queue,), name=f"{self.name}-resync", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()

    def resync(self, queue: WorkQueue | None = None) -> int:
        """Enqueue every cached primary object, each after a random delay within the jitter window;
        returns how many. The resync thread calls it once per (jittered) period; tests call it."""
        queue = queue or self.queue
        if queue is None or self._primary_source is None:
            return 0
        window = (self.resync_period or 0.0) * self.resync_jitter
        keys = self._primary_source.keys()
        for key in keys:
            queue.add_after(key, self._rng.uniform(0.0, window))
        return len(keys)

    def next_resync_in(self) -> float:
        """Seconds until the next resync: the period, stretched or shrunk by up to the jitter."""
        period = self.resync_period or 0.0
        return period * self._rng.uniform(1.0 - self.resync_jitter, 1.0 + self.resync_jitter)

    def _resync_loop(self, queue: WorkQueue) -> None:
        while not queue.wait_shutdown(self.next_resync_in()):
            self.resync(queue)

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

    def _owners(self, obj: Obj) -> list[Key]:
        assert self.kind is not None
        return owner_keys(obj, self.kind)

    @staticmethod
    def _enqueue(queue: WorkQueue, mapper: Mapper, obj: Obj, old: Obj | None) -> None:
        keys = set(mapper(obj))
        if old is not None:
            keys.update(mapper(old))
        for key in sorted(keys):
            queue.add(key)

    def _worker(self, queue: WorkQueue, term: int | None) -> None:
        if term is not None:
            fence.enter(term)
        try:
            while self._process(queue):
                pass
        except BaseException as exc:
            if self._on_crash is None:
                raise
            self._on_crash(exc)

    def process_next(self, timeout: float | None = None) -> bool:
        """Reconcile one key of the current queue; False once it shuts down. For tests."""
        queue = self.queue
        if queue is None:
            raise RuntimeError(f"Controller {self.name!r} is not set up")
        return self._process(queue, timeout)

    def _process(self, queue: WorkQueue, timeout: float | None = None) -> bool:
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
        active = self._metrics.active_workers.labels(controller=self.name)
        active.inc()
        try:
            result = self.reconciler.reconcile(key)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if not isinstance(exc, _ROUTINE) and status_code(exc) is None:
                self._metrics.reconcile_panics_total.labels(controller=self.name).inc()
            outcome, detail = self._failed(queue, key, exc)
            self._metrics.reconcile_errors_total.labels(controller=self.name).inc()
        else:
            outcome = self._succeeded(queue, key, result)
        finally:
            active.dec()
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

    def _failed(self, queue: WorkQueue, key: Key, exc: BaseException) -> tuple[str, str]:
        code = status_code(exc)
        delay = queue.add_rate_limited(key, not_before=retry_after(exc) or 0.0)
        if code == CONFLICT:
            # Routine under concurrent writers: the debug line of the reconcile says it, nothing louder.
            # Counted as "error", as controller-runtime does (its result label has no "conflict").
            return "error", f" (conflict: {exc}); requeued in {delay:.3f}s"
        if code is not None:
            log.warning("%s: %s: HTTP %s: %s; requeued in %.3fs", self.name, key, code, exc, delay)
        else:
            log.error("%s: reconcile of %s failed; requeued in %.3fs", self.name, key, delay, exc_info=exc)
        return "error", f"; requeued in {delay:.3f}s"


def _namespace(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("namespace")


def _name(obj: dict[str, Any]) -> str:
    return obj["metadata"]["name"]
