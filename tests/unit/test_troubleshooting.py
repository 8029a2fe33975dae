"""docs/troubleshooting.md has a section for every error and warning class the harness defines."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import envtest
from envtest.errors import EnvtestError, EnvtestWarning

PAGE = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


def _classes() -> set[str]:
    found: set[str] = set()
    for info in pkgutil.walk_packages(envtest.__path__, "envtest."):
        if ".nodeimage" in info.name or info.name.endswith("__main__"):
            continue  # the node-image builder runs only behind its own CLI command
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            ours = inspect.isclass(obj) and issubclass(obj, (EnvtestError, EnvtestWarning))
            if ours and obj.__module__ == info.name:
                found.add(name)
    return found


def test_every_error_class_of_the_harness_has_a_section() -> None:
    headings = set(re.findall(r"^### (\w+)$", PAGE.read_text(), flags=re.M))
    classes = _classes()
    assert {"ConfigError", "InstallError", "FinalizerStuck"} <= classes, classes
    assert sorted(classes - headings) == []
