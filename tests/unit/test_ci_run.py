""".ci/run judges more than make's exit code: a process left running from the envtest binary cache
fails the run (and is killed), and pytest's "no tests ran" is a failure. `make` is faked on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PASSED = "============================== 3 passed in 1.23s =============================="
NO_TESTS = "============================ no tests ran in 0.01s ============================="


def _ci_run(tmp_path: Path, make_script: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text("#!/usr/bin/env bash\n" + make_script)
    make.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.run([str(ROOT / ".ci/run")], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def cached_sleep(tmp_path: Path) -> Path:
    """A copy of `sleep` inside the fake binary cache: stands in for a leaked kube-apiserver."""
    path = tmp_path / "cache" / "envtest" / "k8s" / "1.37.2-linux-amd64" / "kube-apiserver"
    path.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", path)
    return path


def test_a_clean_green_run_passes_and_ends_with_pytests_summary(tmp_path: Path) -> None:
    out = _ci_run(tmp_path, f"echo '{PASSED}'\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == PASSED


def test_a_process_left_from_the_binary_cache_fails_the_run_and_is_killed(
    tmp_path: Path, cached_sleep: Path
) -> None:
    # The fake make leaves the "apiserver" running, detached, as a leaking harness would.
    out = _ci_run(tmp_path, f"setsid {cached_sleep} 120 >/dev/null 2>&1 < /dev/null &\necho '{PASSED}'\n")
    assert out.returncode == 1
    assert "leaked process" in out.stderr and str(cached_sleep) in out.stderr
    assert out.stdout.strip().splitlines()[-1] == PASSED
    survivors = [p for p in Path("/proc").glob("[0-9]*/exe") if _target(p) == str(cached_sleep)]
    assert survivors == [], "the leaked process was not killed"


def test_a_process_from_elsewhere_is_not_counted(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "120"])
    try:
        out = _ci_run(tmp_path, f"echo '{PASSED}'\n")
        assert out.returncode == 0, out.stderr
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_no_tests_collected_is_a_failure(tmp_path: Path) -> None:
    out = _ci_run(tmp_path, f"echo '{NO_TESTS}'\nexit 2\n")
    assert out.returncode == 5
    assert "collected no tests" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == NO_TESTS


def test_a_failing_make_fails_the_run(tmp_path: Path) -> None:
    out = _ci_run(tmp_path, "echo '=== 1 failed, 2 passed in 3.00s ==='\nexit 2\n")
    assert out.returncode == 2


def _target(exe: Path) -> str | None:
    try:
        return os.readlink(exe).removesuffix(" (deleted)")
    except OSError:
        return None
