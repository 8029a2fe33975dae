"""What is done while a test's body runs: the next test's namespace and operator identity are
made, and the previous tests' namespaces released.

A test that asks for `envtest_namespace` waits for a namespace (and its default ServiceAccount);
one that asks for `envtest_operator` also waits for the operator's identity (a ServiceAccount, its
token, its bindings): a dozen round trips that need nothing from the test. pytest knows which test
runs next (`nextitem`), so while one test's body runs, one background thread makes them for the
next, named for it and labelled like any other. The next test's fixtures take them when they are
ready (or wait for the rest); anything not taken (the test was skipped, an earlier fixture failed,
the run stopped) is released like any test namespace. The operator instance and its log are still
the test's own, started by its fixture.

Only on the session's cluster once it is up (a plane is never started from here), and only for a
test that will ask for the namespace. The releases held since the last test (`envtest.plugin.releases`)
start at the same moment, so they do not compete with a test's setup. On a machine whose cores the
test bodies keep busy this moves work rather than saving it (README, "Harness overhead"). Ini
`envtest_prepare_next = false` turns both off (releases then start at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from envtest.plugin.state import CTX_KEY, SESSION_KEY

if TYPE_CHECKING:
    from envtest.plugin.session import ClusterSession

PLUGIN_NAME = "envtest-ahead"
NEXT_KEY: pytest.StashKey[pytest.Item | None] = pytest.StashKey()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.stash[NEXT_KEY] = nextitem
    try:
        return (yield)
    finally:
        ctx = item.stash.get(CTX_KEY, None)
        if ctx is not None:
            ctx.release_unclaimed()
            session = item.config.stash.get(SESSION_KEY, None)
            if session is not None and ctx in session.prepared:
                session.prepared.remove(ctx)  # only those a stopped run never reached stay listed


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    # At the body's start: this test's own setup no longer competes for the apiserver.
    nextitem = item.stash.get(NEXT_KEY, None)
    session = item.config.stash.get(SESSION_KEY, None)
    if session is None or not session.settings.prepare_next:
        return
    try:
        _prepare(session, nextitem)
    finally:
        session.releases.start()


def _prepare(session: ClusterSession, nextitem: pytest.Item | None) -> None:
    cluster = session.opened_cluster()
    fixtures = getattr(nextitem, "fixturenames", ())
    if (
        nextitem is None
        or cluster is None
        or "envtest_namespace" not in fixtures
        or nextitem.get_closest_marker("skip")
    ):
        return
    if CTX_KEY in nextitem.stash:  # prepared already (a rerun plugin runs an item again)
        return
    from envtest.plugin.context import TestContext

    ctx = TestContext(session, nextitem.nodeid)
    nextitem.stash[CTX_KEY] = ctx  # the next test's `envtest_context` fixture takes this one
    session.prepared.append(ctx)
    ctx.prepare(cluster, identity="envtest_operator" in fixtures)
