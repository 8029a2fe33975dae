"""Fixtures of the reliability suite (the scenarios' shared code is in reliability_support.py)."""

from __future__ import annotations

from typing import Any

import pytest
from mysqlkit import Timeouts
from reliability_support import Scenario


@pytest.fixture
def scenario(request: pytest.FixtureRequest, api: Any, namespace: str, timeouts: Timeouts) -> Scenario:
    """A scenario in the test's namespace; measured through `faults` when the test uses it; its
    waits stretched for the backend (kind runs real containers)."""
    proxy = request.getfixturevalue("faults") if "faults" in request.fixturenames else None
    return Scenario(api, namespace, proxy, request.node.nodeid, scale=timeouts.scale)
