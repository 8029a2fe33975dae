"""The run's conversion endpoint on kind and existing clusters (ini ``envtest_conversion_webhook``).

Local planes get theirs from the session or from the plane's supervisor (`envtest.webhooks.conversion`,
points 2 to 4). A kind or existing cluster is not ours to run anything beside, so here:

- the address is the one the apiserver reaches this host at (`reachable_host`): the kind network's
  gateway on kind, only what the user configured on an existing cluster. Certificate, URL and bind
  address all use it;
- ``-n 0``: the session process serves it (`conversion.start_endpoint`) and stops it after the sweep;
- xdist: one detached process for the run (`envtest.webhooks.detached`), launched by the first worker
  that needs it, owned by the controller, which stops it at its session end;
- every process installs the CRDs through `conversion.install_crds` with that URL (idempotent), so a
  cluster reused from an earlier run, kept or not, is re-pointed at this run's endpoint at start.

The cluster outlives the endpoint (``--envtest-keep``, ``make kind-up``): between runs its CRDs point at
an endpoint that is gone, so reads at a non-storage version fail until the next run re-points them. The
harness itself never needs conversion then: test teardown deletes custom resources at their storage
version before it deletes the namespace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from envtest.errors import ConfigError

if TYPE_CHECKING:  # light at import: settings checks the host before anything heavy is needed
    from envtest.webhooks.detached import EndpointState

HOST_INI = "envtest_webhook_host"
HOST_ENV = "ENVTEST_WEBHOOK_HOST"
KIND_NETWORK = "kind"
STATE_DIR = "envtest-conversion"
"""Beside the run's base temp dir: the state of the xdist run's detached conversion endpoint."""
START_TIMEOUT = 60.0
"""Seconds for the detached endpoint to record its URL (an import and a TLS listener: ≈ 1 s)."""


def explicit_host(config: pytest.Config) -> str | None:
    """``ENVTEST_WEBHOOK_HOST``, else ini ``envtest_webhook_host``; None when neither is set."""
    try:
        ini = str(config.getini(HOST_INI) or "")
    except ValueError:  # the key is registered by envtest.plugin.webhook_fixtures; not in bare configs
        ini = ""
    return os.environ.get(HOST_ENV) or ini or None


def missing_host(backend: str) -> str:
    return (
        f"the {backend} backend's apiserver must reach webhook servers on this host: set ini "
        f"{HOST_INI} or {HOST_ENV} to the address it dials"
    )


def reachable_host(backend: str, explicit: str | None, *, gateway: Callable[[str], str] | None = None) -> str:
    """The address at which `backend`'s apiserver reaches this host. ConfigError (with the reason)
    when it cannot be known: no configured address on an existing cluster, no kind network."""
    if backend == "local":
        return "127.0.0.1"  # the apiserver is a process on this host
    if explicit:
        return explicit
    if backend == "kind":
        from envtest.webhooks.certs import docker_network_gateway

        return (gateway or docker_network_gateway)(KIND_NETWORK)
    raise ConfigError(missing_host(backend))


def shared(
    state_dir: Path,
    *,
    factory: str,
    path: str,
    host: str,
    owner_pid: int,
    python_path: tuple[str, ...],
    progress: Callable[[str], None],
) -> EndpointState:
    """The run's detached endpoint recorded in `state_dir`, launched if none runs. Call it under the
    run's lock: two workers must not both launch one (the second would fail on the flock anyway)."""
    from envtest.webhooks import detached

    state = detached.read_state(state_dir)
    if state is None:
        progress(f"starting conversion webhook {factory} on {host} (log: {state_dir / 'supervisor.log'})")
        state = detached.launch(
            state_dir,
            factory=factory,
            host=host,
            path=path,
            owner_pid=owner_pid,
            python_path=python_path,
            timeout=START_TIMEOUT,
        )
        progress(f"conversion webhook {factory} serving at {state.url}")
    return state


def stop_shared(base: Path) -> bool:
    """The xdist controller's half: stop the run's detached endpoint, if a worker started one."""
    from envtest.webhooks import detached

    return detached.stop(base / STATE_DIR)
