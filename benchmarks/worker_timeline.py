"""A pytest plugin for bench_make_test.py: each process of a run (the xdist controller and each worker)
appends when it starts and ends each test to $WORKER_TIMELINE_DIR/<worker>.jsonl, so a run's wall
time can be split into each worker's busy and idle time."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO

_out: list[IO[str]] = []


def _write(event: str, nodeid: str = "") -> None:
    folder = os.environ.get("WORKER_TIMELINE_DIR")
    if not folder:
        return
    if not _out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
        _out.append((Path(folder) / f"{worker}.jsonl").open("a"))
    _out[0].write(json.dumps({"event": event, "id": nodeid, "t": time.time()}) + "\n")
    _out[0].flush()


def pytest_runtest_logstart(nodeid: str) -> None:
    _write("start", nodeid)


def pytest_runtest_logfinish(nodeid: str) -> None:
    _write("finish", nodeid)
