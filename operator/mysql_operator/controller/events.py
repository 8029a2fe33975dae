"""Kubernetes Events for what the operator did, best effort and off the reconcile path.

Like client-go's recorder (its broadcaster and EventCorrelator):
* `event()` only puts the event on a bounded queue (`queue_size`, client-go's 1000) and returns; one
  sender thread writes them. A reconcile never waits for the apiserver on account of an Event, and
  when the queue is full the event is dropped and counted (`events_dropped_total`), as client-go's
  broadcaster drops (DropIfChannelFull) rather than block its callers;
* a repeat of the same event (same object, type, reason, message) within `window` seconds of the
  last one (client-go's 10 minutes) bumps the Event already written: `count`, `lastTimestamp`, and
  `series` {count, lastObservedTime}, instead of creating another. Later, a new Event starts;
* an Event that cannot be written is logged and dropped: it must never fail or retry a reconcile.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter

from ..runtime.clock import SYSTEM_CLOCK, Clock
from ..runtime.leader import format_micro_time
from .client import NOT_FOUND, ApiClient, error_code
from .kinds import Event
from .status import format_time

log = logging.getLogger(__name__)

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]
SeenKey = tuple[str, str, str, str]  # (uid, type, reason, message)


@dataclass(frozen=True)
class _Pending:
    """One call of event(), as the sender thread gets it."""

    involved: Obj  # apiVersion, kind, name, namespace, uid of the object
    type_: str
    reason: str
    message: str
    when: datetime  # when it happened (the reconcile's time), not when it is sent
    at: float  # the recorder clock's monotonic reading then: what the window is measured on


@dataclass
class _Written:
    name: str
    count: int
    last: float  # monotonic time of the latest occurrence counted in it


class EventRecorder:
    """Writes core/v1 Events about objects, aggregating repeats (needs events create and patch).

    start() the sender (the manager does, as a runnable) and stop() it; without a running sender,
    `flush()` writes what is queued on the calling thread (tests).
    """

    def __init__(
        self,
        client: ApiClient,
        component: str = "mysql-operator",
        *,
        instance: str = "",
        now: Callable[[], datetime] | None = None,
        clock: Clock | None = None,
        remembered: int = 1024,
        window: float = 600.0,
        queue_size: int = 1000,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self._clock = clock or SYSTEM_CLOCK
        self._now = now or (lambda: datetime.fromtimestamp(self._clock.time(), UTC))
        self._remembered = remembered
        self.window = window
        """Seconds after an occurrence within which a repeat joins its Event (a series)."""
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=queue_size)
        # Touched only under _send_lock (by the sender, or a flush()).
        # (uid, type, reason, message) -> the Event written for it; oldest first, at most `remembered`.
        self._seen: OrderedDict[SeenKey, _Written] = OrderedDict()
        self._thread: threading.Thread | None = None
        self._send_lock = threading.Lock()  # one writer at a time: the sender, or a flush()
        self.dropped = Counter(
            "events_dropped",
            "Events dropped because the recorder's queue was full (this operator's addition).",
            registry=registry if registry is not None else CollectorRegistry(),
        )

    # -- the reconcile side ---------------------------------------------------------------------

    def event(self, obj: Obj, type_: EventType, reason: str, message: str) -> None:
        """Queue an Event about `obj`; never blocks, never raises (a full queue drops it)."""
        meta = obj.get("metadata") or {}
        involved = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        }
        pending = _Pending(involved, type_, reason, message, self._now(), self._clock.monotonic())
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            self.dropped.inc()
            log.debug("event dropped: queue full", extra={"reason": reason})

    # -- the sender -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="event-sender", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (for up to `timeout` seconds in all), then end the sender."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        deadline = time.monotonic() + timeout  # one budget for both waits: a shutdown has its own
        try:
            self._queue.put(None, timeout=max(timeout, 0.01))  # behind everything queued
        except queue.Full:
            log.warning("event sender: queue still full at stop; dropping the rest")
            return
        thread.join(max(deadline - time.monotonic(), 0.0))

    def flush(self) -> int:
        """Write every queued event on this thread; returns how many calls were handled."""
        handled = 0
        while True:
            try:
                pending = self._queue.get_nowait()
            except queue.Empty:
                return handled
            if pending is not None:
                self._send(pending)
                handled += 1

    def _run(self) -> None:
        while (pending := self._queue.get()) is not None:
            self._send(pending)

    def _send(self, pending: _Pending) -> None:
        with self._send_lock:
            try:
                self._write(pending)
            except Exception as exc:  # best effort by contract
                log.warning("event not recorded", extra={"reason": pending.reason, "error": str(exc)})

    def _write(self, p: _Pending) -> None:
        key = (p.involved.get("uid") or "", p.type_, p.reason, p.message)
        seen = self._seen.pop(key, None)
        stamp = format_time(p.when)
        if seen is not None and p.at - seen.last <= self.window:
            count = seen.count + 1
            series = {"count": count, "lastObservedTime": format_micro_time(p.when.timestamp())}
            if self._bump(p.involved["namespace"], seen.name, count, stamp, series):
                self._remember(key, _Written(seen.name, count, p.at))
                return
        name = f"{p.involved['name']}.{secrets.token_hex(8)}"
        self._client.create(Event, self._build(p, name, stamp))
        self._remember(key, _Written(name, 1, p.at))

    def _bump(self, namespace: str, name: str, count: int, stamp: str, series: Obj) -> bool:
        patch = {"count": count, "lastTimestamp": stamp, "series": series}
        try:
            self._client.patch_merge(Event, namespace, name, patch)
        except Exception as exc:
            if error_code(exc) == NOT_FOUND:  # expired (events live an hour): write a new one
                return False
            raise
        return True

    def _remember(self, key: SeenKey, written: _Written) -> None:
        self._seen[key] = written
        while len(self._seen) > self._remembered:
            self._seen.popitem(last=False)

    def _build(self, p: _Pending, name: str, stamp: str) -> Obj:
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": p.involved["namespace"]},
            "involvedObject": dict(p.involved),
            "type": p.type_,
            "reason": p.reason,
            "message": p.message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if self._instance:
            event["reportingInstance"] = self._instance
        return event
