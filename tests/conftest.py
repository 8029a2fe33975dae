"""A time limit on every test (pytest-timeout), so a hung read fails one test instead of stalling CI.

Defaults per suite, written for the local plane and stretched like `envtest.timeouts` (4 times on an
existing cluster, 6 times on kind; ENVTEST_TIMEOUT_SCALE overrides the factor):

- tests/unit: UNIT_LIMIT seconds (no cluster; the slowest unit tests take a few seconds);
- tests/e2e: E2E_LIMIT seconds, setup included (the first test of a worker also waits for the plane).

A test that needs longer says so with `@pytest.mark.timeout(seconds)`; that number is scaled too.
`-p no:timeout` or `--timeout=0` turns the limits off (a debugger session).

A cold machine's first plane needs its binaries built (≈ 20 min without release downloads): that
happens once collection is done and before the first test's clock starts, not inside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envtest.timeouts import Timeouts

UNIT_LIMIT = 180.0
E2E_LIMIT = 300.0
HERE = Path(__file__).resolve().parent


def _setting(config: pytest.Config, name: str) -> str | None:
    value = config.getoption(f"envtest_{name}", default=None)
    if value is None:
        try:
            value = config.getini(f"envtest_{name}")
        except ValueError:  # the plugin is not loaded (-p no:envtest)
            value = None
    return value or None


def _limit(item: pytest.Item, scale: Timeouts, unit_scale: Timeouts) -> float:
    marker = item.get_closest_marker("timeout")
    e2e = HERE / "e2e" in item.path.parents
    base = float(marker.args[0]) if marker and marker.args else (E2E_LIMIT if e2e else UNIT_LIMIT)
    return (scale if e2e else unit_scale)(base)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.has_plugin("timeout") or config.getoption("timeout", default=None) == 0:
        return
    scale = Timeouts(_setting(config, "backend") or "local")
    unit_scale = Timeouts("local")  # no backend: only ENVTEST_TIMEOUT_SCALE stretches unit tests
    for item in items:
        # Prepended, so it is the marker pytest-timeout reads (the closest one wins).
        item.add_marker(pytest.mark.timeout(_limit(item, scale, unit_scale)), append=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install the local plane's binaries before any test runs (each xdist worker asks; the install
    lock makes one build and the others wait; a cached install costs a few stat calls)."""
    config = session.config
    if config.option.collectonly or (_setting(config, "backend") or "local") != "local":
        return
    if not any(HERE / "e2e" in item.path.parents for item in session.items):
        return
    from envtest import binaries
    from envtest.plane.controlplane import parse_components

    components = parse_components(_setting(config, "components") or "all")
    version = binaries.k8s_version(_setting(config, "k8s_version"))
    binaries.resolve_all(components, version=version)
    if "kwok" in components:
        binaries.kwok_stages_dir(version)
