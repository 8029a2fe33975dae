"""Which process of the run this is, and the labels it puts on what it creates.

Everything the harness creates on a cluster carries two labels: the run (shared by every xdist
worker) and the creating process (`gw0`, `gw1`, … or `main`). The sweep at a process's session end
selects both, so the first worker to finish can never delete the namespaces of workers still running
their tests; the xdist controller sweeps the whole run once every worker has ended, and any later run
sweeps what provably dead runs left (`envtest.runs`).
"""

from __future__ import annotations

import os

import pytest

from envtest.runs import RUN_LABEL, WORKER_LABEL, labels, selector

__all__ = ["RUN_LABEL", "WORKER_LABEL", "labels", "selector", "worker_id"]


def worker_id(config: pytest.Config) -> str:
    """`gw0`, `gw1`, … in an xdist worker; `main` otherwise."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "workerid" in workerinput:
        return str(workerinput["workerid"])
    return os.environ.get("PYTEST_XDIST_WORKER", "main")
