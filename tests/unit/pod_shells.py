"""The shells the operator's pod scripts run under (dash, busybox), found on PATH or where `make test`
puts them when this machine has none: the virtualenv's bin (hack/script_shells.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def find(name: str) -> str | None:
    """The full path of shell `name`, or None."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def require(name: str) -> str:
    """The full path of shell `name`; fails the test naming the targets that provide it."""
    path = find(name)
    if path is None:
        pytest.fail(
            f"{name} is not on PATH nor in {Path(sys.executable).parent}: run `make shells` (a copy in the "
            "virtualenv) or `make script-shells` (system-wide)"
        )
    return path
