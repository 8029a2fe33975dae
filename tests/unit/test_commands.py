"""Printed commands work as printed: absolute paths to this interpreter and the plane's kubectl."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from envtest import commands


def test_down_command_runs_the_cli_with_this_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    command = commands.down("kept")
    assert shlex.split(command)[:3] == [sys.executable, "-m", "envtest.cli"]
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=60, env={"PATH": ""})
    assert out.returncode == 0, out.stderr  # works with nothing on PATH
    assert "kept: was not running" in out.stderr


@pytest.mark.parametrize(
    ("configured", "printed_tail"),
    [
        ("python -m mysql_operator run", " -m mysql_operator run"),
        ("python3 -m mysql_operator run", " -m mysql_operator run"),
        ("kopf run handlers.py", None),
        ("pythonic-operator run", None),
    ],
)
def test_operator_cli_gets_this_interpreter_instead_of_a_bare_python(
    configured: str, printed_tail: str | None
) -> None:
    printed = commands.with_this_python(configured)
    if printed_tail is None:
        assert printed == configured
    else:
        assert printed == shlex.quote(sys.executable) + printed_tail


def test_kubectl_is_the_cached_binary_when_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_ASSET_KUBECTL", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert commands.kubectl("1.37.2") == "kubectl"  # nothing installed: the plain name, not a crash
    from envtest import binaries

    kubectl = binaries.cache_dir("1.37.2") / "kubectl"
    kubectl.parent.mkdir(parents=True)
    kubectl.write_text("#!/bin/sh\n")
    kubectl.chmod(0o755)
    assert commands.kubectl("1.37.2") == str(kubectl)
