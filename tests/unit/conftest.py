"""Fixtures of the reconciler unit tests: an in-memory apiserver, recorded events, a still clock, and
the reconciler on all three. `kube` here is the FakeKube, not the envtest plugin's live-cluster client:
no unit test talks to a cluster."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from cli_logging import restored
from operator_fakes import Clock, FakeKube, RecordingEvents

from envtest import runs
from mysql_operator.controller.reconciler import MySQLClusterReconciler


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kube(clock: Clock) -> FakeKube:
    return FakeKube(clock=clock)


@pytest.fixture
def events() -> RecordingEvents:
    return RecordingEvents()


@pytest.fixture
def reconciler(kube: FakeKube, events: RecordingEvents, clock: Clock) -> MySQLClusterReconciler:
    return MySQLClusterReconciler(kube, recorder=events, now=clock)  # type: ignore[arg-type]


@pytest.fixture
def restore_cli_logging() -> Iterator[None]:
    """For a test that runs the operator's command line in this process (`cli_logging.restored`)."""
    with restored():
        yield


@pytest.fixture
def dead_owner() -> str:
    """The holder identity (`envtest.runs`) of a process that has since been killed, read while it
    ran, as a run record or a temporary folder (`envtest.ownedtemp`) would hold it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        return runs.holder_identity(child.pid)
    finally:
        child.kill()
        child.wait()
