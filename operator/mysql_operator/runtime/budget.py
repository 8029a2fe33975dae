"""The memory a webhook server may spend on request bodies at once, and what a body will cost.

A body is held twice over while it is answered: its bytes, then the Python objects `json.loads` makes of them,
which for hostile JSON are far larger (`[{},{},…]`: 3 bytes of JSON, a 64-byte dict and an 8-byte pointer each
— ~25x). So the server's `RequestMemory` has two pools shared by all connections, and every request reserves
from them in turn: from `bodies`, its Content-Length, before a byte of the body is read; then from `parses`,
what parsing and answering it can cost beyond those bytes (`request_cost(body) - len(body)`: twice
`parsed_bound(body)`, an upper bound computed from the body's bytes in C-speed `bytes.count` passes), before
it is parsed. A body that could never fit its pool is refused (413) before it costs anything; a request that
finds a pool taken waits for it (`ServerOptions.memory_wait`), then is refused with 503. Memory stays under
the two pools' sum whatever arrives, at the price of latency (or a retried call) under a flood.

Why two pools and not one: a request waits for its parse while holding its body's bytes (they are in memory
either way). From one pool, 64 bodies read at once could each hold a little and each wait for the rest, and
none would ever get it. A parse reservation waits on nothing once taken, so the `parses` pool always frees
up, and every waiting request gets its turn.

The bound is an over-estimate by construction (every `{` counted as a dict, every `"` pair as a string,
every `:` as a dict entry with a boxed value, every `,` as a list slot and a boxed value); its constants
are CPython 3.11's 64-bit sizes with room for the dicts' and lists' over-allocation, and a unit test
checks it against tracemalloc on hostile and real bodies.
"""

from __future__ import annotations

import threading
import time

MiB = 1024 * 1024

DICT_BYTES = 360
"""A dict of a handful of keys, with its hash table's spare room (sys.getsizeof of a 5-key dict is 184;
growth keeps up to a third spare), and the 8-byte slot that holds it."""
LIST_BYTES = 104
"""A list object (56), the first allocation of its items array (4 slots: 32), and its own slot (8)."""
ITEM_BYTES = 40
"""Per `,`: a list slot (8, over-allocated by 1/8) and the value it separates, boxed (an int is 28; a
float 24; strings and containers are counted by their own delimiters)."""
ENTRY_BYTES = 80
"""Per `:`: a dict entry (24, hash table included, over-allocated) and a boxed value (28 or 24)."""
STRING_BYTES = 64
"""Per pair of `"`: a str object's header (49 for ASCII; its characters are in `TEXT_FACTOR`)."""
TEXT_FACTOR = 9
"""Per byte of body: the bytes (1), the whole body decoded to one str before parsing (up to 4 bytes per
character: one character beyond the BMP makes every character of the str 4 bytes wide), and the string
values cut from it (up to 4 again)."""


def parsed_bound(body: bytes) -> int:
    """An upper bound of the memory `json.loads(body)` holds at its peak, in bytes."""
    return (
        TEXT_FACTOR * len(body)
        + DICT_BYTES * body.count(b"{")
        + LIST_BYTES * body.count(b"[")
        + ITEM_BYTES * body.count(b",")
        + ENTRY_BYTES * body.count(b":")
        + STRING_BYTES * (body.count(b'"') // 2 + 1)
    )


def request_cost(body: bytes) -> int:
    """What one request may hold at its peak: its parse, and as much again for what the handler makes
    of it (a conversion's converted objects, then the reply serialised as str and as bytes)."""
    return 2 * parsed_bound(body)


class MemoryBudget:
    """Bytes shared by every request of one server; `reserve` waits for room, `Hold.release` returns it.

    Invariant: `in_use` is the sum of the live holds' sizes and never exceeds `total`.
    """

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"MemoryBudget: total must be at least 1 byte, got {total}")
        self.total = total
        self._in_use = 0
        self._waiting = 0
        self._cond = threading.Condition()
        self.peak = 0
        """The most ever held at once (for tests and benchmarks)."""

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._in_use

    @property
    def waiting(self) -> int:
        """Requests waiting for room right now."""
        with self._cond:
            return self._waiting

    def _take(self, n: int, deadline: float) -> bool:
        """Add `n` to what is held once there is room, waiting until `deadline` (monotonic seconds)."""
        if n > self.total:
            return False
        with self._cond:
            self._waiting += 1
            try:
                while self._in_use + n > self.total:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            self._in_use += n
            self.peak = max(self.peak, self._in_use)
            return True

    def _give(self, n: int) -> None:
        with self._cond:
            self._in_use -= n
            self._cond.notify_all()

    def reserve(self, n: int, deadline: float) -> Hold | None:
        """A hold of `n` bytes, or None when `n` is over the whole budget or no room came in time."""
        return Hold(self, n) if self._take(n, deadline) else None


BODIES_SHARE = 3
"""`RequestMemory(total)` gives a third of `total` to bodies' bytes, the rest to parses."""


class RequestMemory:
    """A webhook server's two pools (see the module docstring): `bodies`, then `parses`."""

    def __init__(self, total: int) -> None:
        if total < BODIES_SHARE:
            raise ValueError(f"RequestMemory: total must be at least {BODIES_SHARE} bytes, got {total}")
        self.bodies = MemoryBudget(total // BODIES_SHARE)
        self.parses = MemoryBudget(total - total // BODIES_SHARE)

    @property
    def in_use(self) -> int:
        return self.bodies.in_use + self.parses.in_use


class Hold:
    """Bytes one request holds from one budget, released once it has replied."""

    def __init__(self, budget: MemoryBudget, size: int) -> None:
        self.budget, self.size = budget, size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.budget._give(size)
