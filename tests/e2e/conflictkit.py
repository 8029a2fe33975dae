"""What the apiserver saw of a race: its own count of 409 answers, every version of an object it
stored, and the pacing of a client's retried writes.

The fault proxy can answer 409 alone, without the apiserver; these are the checks that cannot be
satisfied that way. An operator that stopped sending resourceVersion preconditions gets no 409 from
the apiserver, and loses other writers' changes even when the end state hides it (the loser often
writes again): only the history of the object shows the moment a change was lost.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mysqlkit import Timeouts
from prometheus_client.parser import text_string_to_metric_families

Obj = dict[str, Any]

REQUESTS_METRIC = "apiserver_request_total"


def apiserver_conflicts(api: Any, timeouts: Timeouts, *, group: str, resource: str) -> int:
    """The apiserver's own count of 409 answers to requests for `resource` of `group` (every verb and
    subresource), from its /metrics. The plane is shared with other tests: compare two readings,
    and expect at least your own conflicts in the difference, never exactly them. One apiserver's
    count: the local plane and kind have one (behind a load balancer each replica counts its own)."""
    resp = api.session.get(api.url("metrics"), timeout=timeouts(10))
    resp.raise_for_status()
    # Only this family: the whole page is megabytes of histograms on a busy apiserver.
    lines = [line for line in resp.text.splitlines() if line.startswith(REQUESTS_METRIC + "{")]
    total = 0.0
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            labels = sample.labels
            if (labels.get("code"), labels.get("group"), labels.get("resource")) == ("409", group, resource):
                total += sample.value
    return int(total)


def stored_versions(api: Any, collection: str, created: Obj, timeouts: Timeouts) -> list[Obj]:
    """Every version of `created` the apiserver stored since its creation, oldest first: its watch
    replayed from the creation's resourceVersion (the apiserver keeps minutes of history; a
    test's few seconds are well inside it). `collection` is the API path of its kind's collection."""
    meta = created["metadata"]
    params = {
        "watch": "1",
        "resourceVersion": meta["resourceVersion"],
        "fieldSelector": f"metadata.name={meta['name']}",
        "timeoutSeconds": "1",  # the replay arrives at once; then the apiserver ends the watch
    }
    url = api.url(collection)
    with api.session.get(url, params=params, stream=True, timeout=timeouts(10)) as resp:
        resp.raise_for_status()
        events = [json.loads(line) for line in resp.iter_lines() if line]
    errors = [e["object"] for e in events if e["type"] == "ERROR"]
    assert not errors, f"the apiserver could not replay {meta['name']}'s history: {errors}"
    return [created, *(e["object"] for e in events if e["type"] in ("ADDED", "MODIFIED"))]


@dataclass(frozen=True)
class Intent:
    """One writer's change that every other writer must leave in place."""

    what: str
    """Named for the failure message, e.g. "the operator's finalizer"."""
    held_by: Callable[[Obj], bool]


def assert_no_lost_update(versions: Sequence[Obj], intents: Iterable[Intent]) -> None:
    """Each intent, once stored, is in every later version. A write computed from a stale read and
    sent without a precondition takes it out; that is a lost update even if its owner puts it back
    later (so the end state alone cannot tell)."""
    lost = []
    for intent in intents:
        since: str | None = None
        for obj in versions:
            meta = obj["metadata"]
            if intent.held_by(obj):
                since = since or meta["resourceVersion"]
            elif since is not None:
                lost.append(
                    f"{intent.what} was stored at resourceVersion {since} and is gone from "
                    f"{meta['resourceVersion']} (finalizers {meta.get('finalizers')}, "
                    f"labels {meta.get('labels')})"
                )
                break
    assert not lost, "lost update: " + "; ".join(lost)


def assert_backoff(times: Sequence[float], *, jitter: float) -> list[float]:
    """The gaps between successive attempts grow, and returns them: at most one gap shorter than the
    one before it by more than `jitter` seconds (a stalled thread lengthens one gap, which makes the
    next look short), and the last two well above the first three. Only ratios and differences are
    compared, never a wall-clock bound: a slow machine lengthens gaps, it does not shorten them."""
    gaps = [b - a for a, b in itertools.pairwise(times)]
    shown = ", ".join(f"{g:.3f}" for g in gaps)
    assert len(gaps) >= 5, f"too few retries to see a backoff: gaps {shown} s"
    drops = [i for i in range(1, len(gaps)) if gaps[i] < gaps[i - 1] - jitter]
    assert len(drops) <= 1, f"the gaps between retries shrank at {drops}: {shown} s"
    early, late = statistics.median(gaps[:3]), min(gaps[-2:])
    assert late >= 4 * early and late - early > jitter, f"the retries were not backed off: gaps {shown} s"
    return gaps
