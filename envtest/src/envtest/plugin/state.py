"""The plugin's stash keys and shared names: the one module every other plugin module may import.

A leaf on purpose: it imports nothing of the plugin (not even for type checking), so the layers above
it (see `envtest.plugin`) never form a cycle, and it costs nothing in projects that do not use the
plugin. The typed accessors live with what they return: `session.cluster_session(config)` and the
`envtest_context` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

SESSION_KEY: pytest.StashKey[Any] = pytest.StashKey()
"""config.stash → the run's `session.ClusterSession` (set in pytest_configure, or on first use)."""
CTX_KEY: pytest.StashKey[Any] = pytest.StashKey()
"""item.stash → the test's `context.TestContext` (set by the `envtest_context` fixture)."""

SHARED_DIR = "envtest-shared"
"""Beside the run's base temp dir: the state of the local plane the xdist workers share."""
AMBIENT_KEY: pytest.StashKey[Any] = pytest.StashKey()
"""config.stash → (the session's `envtest.ambient.Frame`, its folder), see `pointing`."""
