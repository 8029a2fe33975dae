"""Kubernetes Events for what the operator did, best effort.

Like client-go's recorder, a repeat of the same event (same object, type, reason, message) bumps the
count of the Event already written instead of creating another. An Event that cannot be written
is logged and dropped: it must never fail or retry a reconcile.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from .client import NOT_FOUND, ApiClient, error_code
from .kinds import Event
from .status import format_time

log = logging.getLogger(__name__)

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]


class EventRecorder:
    """Writes core/v1 Events about objects, aggregating repeats (needs events create and patch)."""

    def __init__(
        self,
        client: ApiClient,
        component: str = "mysql-operator",
        *,
        instance: str = "",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        remembered: int = 1024,
    ) -> None:
        self._client = client
        self._component = component
        self._instance = instance
        self._now = now
        self._remembered = remembered
        self._lock = threading.Lock()
        # (uid, type, reason, message) -> (event name, count); oldest first, bounded by `remembered`.
        self._seen: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()

    def event(self, obj: Obj, type_: EventType, reason: str, message: str) -> None:
        meta = obj["metadata"]
        key = (meta.get("uid", ""), type_, reason, message)
        stamp = format_time(self._now())
        with self._lock:
            seen = self._seen.pop(key, None)
        try:
            if seen is not None:
                name, count = seen[0], seen[1] + 1
                if self._bump(meta["namespace"], name, count, stamp):
                    self._remember(key, name, count)
                    return
            name = f"{meta['name']}.{secrets.token_hex(8)}"
            self._client.create(Event, self._build(obj, name, type_, reason, message, stamp))
            self._remember(key, name, 1)
        except Exception as exc:  # best effort by contract
            log.warning("event not recorded", extra={"reason": reason, "error": str(exc)})

    def _bump(self, namespace: str, name: str, count: int, stamp: str) -> bool:
        try:
            self._client.patch_merge(Event, namespace, name, {"count": count, "lastTimestamp": stamp})
        except Exception as exc:
            if error_code(exc) == NOT_FOUND:  # expired (events live an hour): write a new one
                return False
            raise
        return True

    def _remember(self, key: tuple[str, str, str, str], name: str, count: int) -> None:
        with self._lock:
            self._seen[key] = (name, count)
            while len(self._seen) > self._remembered:
                self._seen.popitem(last=False)

    def _build(self, obj: Obj, name: str, type_: str, reason: str, message: str, stamp: str) -> Obj:
        meta = obj["metadata"]
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if self._instance:
            event["reportingInstance"] = self._instance
        return event
