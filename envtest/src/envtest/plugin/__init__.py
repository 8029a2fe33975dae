"""The pytest plugin: options, hooks, fixtures and the cluster's lifecycle across xdist workers.

Loaded through the pytest11 entry point in every project of the virtualenv, so it costs nothing where
it is not used: a project that configured nothing (no `envtest_*` ini key, no `--envtest-*` option)
gets no report header, no version check, no heavy import and no short fixture names — only the
prefixed fixtures (`envtest_cluster`, `envtest_namespace`, `envtest_operator`, …; see `fixtures`),
which start nothing until a test asks for one. A configured project also gets the short names
(`cluster`, `namespace`, `operator`, …; see `aliases`).

Layers, top first (each module imports only modules below it; `tests/unit/test_plugin_layers.py`):
this module (the hooks) → `aliases`, `webhook_fixtures` → `fixtures` → `session` (the run's state,
the root every fixture reaches through) → `context` (one test) → `settings`, `runner`, `releases`,
`sweep`, `clusterscoped`, `pointing` → `endpoint`, `rbac`, `artifacts`, `cleanup`, `isolation`,
`state` (leaves).

Under xdist one local control plane serves every worker: the first worker to need it starts it
under a FileLock beside the run's base temp dir, detached; only the xdist controller stops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from envtest.plugin import settings
from envtest.plugin.fixtures import (
    _envtest_place,
    envtest_cluster,
    envtest_context,
    envtest_fake_pods,
    envtest_faults,
    envtest_k8s,
    envtest_kube,
    envtest_namespace,
    envtest_operator,
    envtest_operator_factory,
    envtest_private_cluster,
    envtest_timeouts,
)
from envtest.plugin.state import CTX_KEY, SESSION_KEY, SHARED_DIR

__all__ = [
    "CTX_KEY",
    "SESSION_KEY",
    "_envtest_place",
    "envtest_cluster",
    "envtest_context",
    "envtest_fake_pods",
    "envtest_faults",
    "envtest_k8s",
    "envtest_kube",
    "envtest_namespace",
    "envtest_operator",
    "envtest_operator_factory",
    "envtest_private_cluster",
    "envtest_timeouts",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    settings.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "envtest_local: needs the local backend (kwok-driven pods, private planes); skipped elsewhere",
    )
    config.addinivalue_line(
        "markers",
        "envtest_private(components=…, job_pods=…, pod_exec=…): settings of the test's private_cluster",
    )
    config.addinivalue_line(
        "markers",
        "envtest_clusterwide: the test runs alone on the cluster; its operator is bound and watches "
        "cluster-wide; cluster-scoped objects that appear during it are its own",
    )
    config.addinivalue_line(
        "markers",
        "envtest_pod_exec: kubectl exec into the test's fake pods runs commands on this host",
    )
    from envtest.plugin import webhook_fixtures  # pytest-only at import: `pytest --help` stays fast

    config.pluginmanager.register(webhook_fixtures, webhook_fixtures.PLUGIN_NAME)
    async_fixtures = _async_fixtures()
    if async_fixtures is not None:
        config.pluginmanager.register(async_fixtures, async_fixtures.PLUGIN_NAME)
    if settings.configured(config):
        try:
            settings.check_unknown(config)
        except settings.UsageProblem as exc:
            raise pytest.UsageError(str(exc)) from None
        # Resolved now, so a bad value or a missing file stops the run before any test does.
        from envtest.plugin.session import new_session  # heavy: only in configured projects

        config.stash[SESSION_KEY] = new_session(config)
        from envtest.plugin import aliases, pointing

        pointing.point_at_placeholder(config)
        config.pluginmanager.register(aliases, aliases.PLUGIN_NAME)
        if async_fixtures is not None:
            config.pluginmanager.register(async_fixtures.Short(), async_fixtures.SHORT_PLUGIN_NAME)


def _async_fixtures() -> Any:
    """The async fixtures' module where pytest-asyncio is installed (else None): importing it
    imports pytest_asyncio, so a project without it pays nothing."""
    import importlib.util

    if importlib.util.find_spec("pytest_asyncio") is None:
        return None
    from envtest.plugin import async_fixtures

    return async_fixtures


def pytest_unconfigure(config: pytest.Config) -> None:
    _release_ambient(config)  # a session that never finished (a usage error during collection)


def _release_ambient(config: pytest.Config) -> None:
    from envtest.plugin.state import AMBIENT_KEY

    if AMBIENT_KEY in config.stash:
        from envtest.plugin import pointing

        pointing.release(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings_ = config.stash[SESSION_KEY].settings if SESSION_KEY in config.stash else None
    if settings_ is None or settings_.backend == "local":
        return
    skip = pytest.mark.skip(reason=f"needs the local backend (kwok, private planes), not {settings_.backend}")
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if item.get_closest_marker("envtest_local") or "envtest_private_cluster" in fixtures:
            item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if SESSION_KEY not in config.stash:
        return None
    return config.stash[SESSION_KEY].header_lines()


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if SESSION_KEY in config.stash:
        config.stash[SESSION_KEY].finish()
        # Here, not only at unconfigure: an xdist worker is shut down once it has reported the
        # end of its session, and its unconfigure (with the folder's removal) may never run.
        _release_ambient(config)
    elif not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        # An unconfigured project whose workers used the prefixed fixtures: the controller, which
        # never needed a session of its own, stops the plane they shared (if any: a cheap check).
        base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        if (base / SHARED_DIR).exists():
            from envtest.plugin.session import stop_shared_plane

            stop_shared_plane(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: every worker labels with the controller's run id, so the controller's
    end-of-run sweep finds what any of them (a crashed one too) left."""
    if SESSION_KEY in node.config.stash:
        from envtest.plugin.session import RUN_ID_KEY

        node.workerinput[RUN_ID_KEY] = node.config.stash[SESSION_KEY].run_id


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: a worker ended; what it could not report itself is reported here."""
    config = node.config
    if SESSION_KEY in config.stash:
        config.stash[SESSION_KEY].worker_finished(getattr(node, "workeroutput", None) or {})


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if SESSION_KEY in config.stash:
        for line in config.stash[SESSION_KEY].summary_lines():
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """`envtest_reset = module`: the plane is reset before the module's fixtures are set up."""
    session = item.config.stash.get(SESSION_KEY, None)
    if session is not None and session.settings.reset != "none":
        session.reset_before(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    ctx = item.stash.get(CTX_KEY, None)
    # Artifacts right after the failure, while the operator still runs and nothing is torn down.
    # A failure found at teardown (operator crash, stuck finalizer) has had them written already,
    # by the context, before the namespace went; collect_artifacts() returns that folder.
    if ctx is not None and report.failed:
        ctx.record.keep = True
        dest = ctx.collect_artifacts()
        if dest is not None:
            report.sections.append(("envtest artifacts", str(dest)))
    if ctx is not None and report.when == "teardown":
        try:  # the record never fails a test: at worst its report says it is incomplete
            ctx.finish_record()
        except Exception as exc:
            ctx.session.recording.incomplete.append(f"{item.nodeid} ({type(exc).__name__}: {exc})")
    return report
