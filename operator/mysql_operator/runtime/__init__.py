"""A compact controller runtime on pykube-ng: informers, work queues, controllers, a manager.

The names below are the public surface; the modules behind them are internals: `informer` (list and watch
into a cache, with a `labelindex` of what it holds, reading events through `watchlines`) and
`multinamespace` (one per namespace), `workqueue` and `ratelimit`, `controller` (workers over a queue),
`manager` (wires them, with `leader` election and a `fence` that stops writes once leadership is lost),
`client` (status codes, retries, the environment read once), `clock`, `types`, `metrics` (and the probe
server), `podexec` (exec into a pod), and the webhook server: `webhook` over `exchange` (one connection's
requests, against deadlines), `budget` (memory for bodies and parses), `reviews` (admission and conversion
reviews), `certwatcher` (serving certificates reloaded on change).
"""

from .certwatcher import CertLoadError, CertWatcher
from .client import is_conflict, retry_after, status_code
from .clock import Clock, FakeClock, SystemClock
from .controller import Controller
from .informer import Informer
from .leader import LeaderElector, Lease
from .manager import WRITE_VERBS, Manager, ManagerError, ManagerOptions, Runnable
from .ratelimit import TokenBucket
from .reviews import allow, deny
from .types import Key, Reconciler, Result, make_key, split_key
from .webhook import ServerOptions, WebhookServer
from .workqueue import WorkQueue

__all__ = [
    "WRITE_VERBS",
    "CertLoadError",
    "CertWatcher",
    "Clock",
    "Controller",
    "FakeClock",
    "Informer",
    "Key",
    "LeaderElector",
    "Lease",
    "Manager",
    "ManagerError",
    "ManagerOptions",
    "Reconciler",
    "Result",
    "Runnable",
    "ServerOptions",
    "SystemClock",
    "TokenBucket",
    "WebhookServer",
    "WorkQueue",
    "allow",
    "deny",
    "is_conflict",
    "make_key",
    "retry_after",
    "split_key",
    "status_code",
]
