"""The benchmarks are scripts that import their siblings (benchmeta, peers.*) from their own folder:
their tests import them with that folder on sys.path for the import only."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def import_from(folder: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
