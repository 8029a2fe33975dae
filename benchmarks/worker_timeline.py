"""A pytest plugin for bench_make_test.py: each process of a run (the xdist controller and each worker)
appends when it starts and ends each test to $WORKER_TIMELINE_DIR/<worker>.jsonl, so a run's wall
time can be split into each worker's busy and idle time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest


class Timeline:
    """One pytest session's writer (an in-process pytest inside a test gets its own)."""

    def __init__(self, path: Path) -> None:
        self._out = path.open("a")

    def _write(self, event: str, nodeid: str) -> None:
        self._out.write(json.dumps({"event": event, "id": nodeid, "t": time.time()}) + "\n")
        self._out.flush()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._write("start", nodeid)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._write("finish", nodeid)

    def pytest_unconfigure(self) -> None:
        self._out.close()


def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get("WORKER_TIMELINE_DIR")
    if folder:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        config.pluginmanager.register(Timeline(Path(folder) / f"{worker}.jsonl"), "worker-timeline")
