"""The example projects in examples/ pass as a user would run them: pytest started in the example's
folder, configured by its pytest.ini alone (no conftest.py), under xdist, from a virtualenv that holds
the harness's wheel (with its kopf and async extras) and the example's own requirements — nothing
else of this repository —, here against this session's cluster (`--envtest-backend=existing`, so
the running plane is reused, not started again)."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _inner_env(kubeconfig: Path, python: Path) -> dict[str, str]:
    # Nothing of this run leaks in: an inherited ENVTEST_RUN_ID would make the inner run's sweep
    # take this run's namespaces for its own; xdist's variables would make it a worker of ours;
    # PYTHONPATH or this venv's bin/ would let this repository's own packages in.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENVTEST_", "PYTEST_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["KUBECONFIG"] = str(kubeconfig)
    env["PATH"] = f"{python.parent}:/usr/bin:/bin"
    return env


@pytest.mark.parametrize(
    ("example", "tests"),
    [("kopf_widgets", 4), ("client_configmaps", 4), ("async_mirror", 3), ("kopf_tenants", 4)],
)
def test_example_suite_passes_with_its_pytest_ini_alone(
    example: str, tests: int, envtest_cluster: Any, harness_python: Path, tmp_path: Path, timeouts: Any
) -> None:
    folder = EXAMPLES / example
    assert not (folder / "conftest.py").exists(), "the examples show that no glue is needed"
    report = tmp_path / "report.xml"
    args = [
        str(harness_python),
        "-m",
        "pytest",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--envtest-backend=existing",
        f"--basetemp={tmp_path / 'base'}",
        f"--envtest-artifacts-dir={tmp_path / 'artifacts'}",
        f"--junitxml={report}",
    ]
    if envtest_cluster.context:
        args.append(f"--envtest-context={envtest_cluster.context}")
    result = subprocess.run(
        args,
        cwd=folder,
        env=_inner_env(envtest_cluster.kubeconfig, harness_python),
        capture_output=True,
        text=True,
        timeout=timeouts(600),
    )
    output = f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, output
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None, output
    counts = {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": tests, "failures": 0, "errors": 0, "skipped": 0}, output
