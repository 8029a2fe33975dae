"""Where the plugin keeps its per-run and per-test state, and the lazy creation of the run's session.

Light on purpose (pytest only): the hooks and fixtures import it in every project of the virtualenv.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from envtest.plugin.context import TestContext
    from envtest.plugin.session import ClusterSession

CTX_KEY: pytest.StashKey[TestContext] = pytest.StashKey()
SESSION_KEY: pytest.StashKey[ClusterSession] = pytest.StashKey()


def cluster_session(config: pytest.Config) -> ClusterSession:
    """The run's ClusterSession. A configured project gets it in pytest_configure (so mistakes are
    usage errors before any test runs); an unconfigured one that uses a prefixed fixture anyway gets
    it here, on first use, with the defaults."""
    if SESSION_KEY not in config.stash:
        config.stash[SESSION_KEY] = new_session(config)
    return config.stash[SESSION_KEY]


def new_session(config: pytest.Config) -> ClusterSession:
    """Resolve the settings and load the files they name; every mistake is a pytest.UsageError."""
    from envtest.errors import ConfigError, CRDError
    from envtest.plugin import settings

    try:
        resolved = settings.resolve(config)
        from envtest.plugin.session import ClusterSession

        return ClusterSession(config, resolved)
    except CRDError as exc:
        raise pytest.UsageError(f"envtest_crds: {exc}") from None
    except ConfigError as exc:  # UsageProblem included: its message names the option already
        raise pytest.UsageError(str(exc)) from None


SHARED_DIR = "envtest-shared"
"""Beside the run's base temp dir: the state of the local plane the xdist workers share."""
