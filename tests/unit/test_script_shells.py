"""hack/script_shells.py: the pod scripts' shells copied out of Debian packages, with apt-get and
dpkg-deb replaced by fakes on PATH (the real download is what `make setup` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench_modules import import_from

HACK = Path(__file__).resolve().parents[2] / "hack"
shells = import_from(HACK, "script_shells")
RUN_LIMIT = 60
"""Seconds before a run is called hung: a safety net, never an assertion."""

# apt-get download <package>: a fake .deb named as Debian names them; dpkg-deb -x <deb> <dir>: the tree.
FAKE_APT = """#!/bin/sh
[ "$1" = download ] || exit 2
[ -n "$FAIL_DOWNLOAD" ] && { echo "E: Unable to locate package $2" >&2; exit 100; }
echo fake > "$2_1.0_amd64.deb"
"""
FAKE_DPKG = """#!/bin/sh
[ "$1" = -x ] || exit 2
mkdir -p "$3/bin"
shell=$(basename "$2" | cut -d_ -f1)
[ -n "$EMPTY_DEB" ] || printf '#!/bin/sh\\necho from-deb\\n' > "$3/bin/$shell"
"""


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, body in (("apt-get", FAKE_APT), ("dpkg-deb", FAKE_DPKG)):
        (tools / name).write_text(body)
        (tools / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    return tools


def test_a_shell_is_copied_out_of_its_package(fake_tools: Path, tmp_path: Path) -> None:
    target = shells.fetch("busybox", tmp_path / "bin")
    assert target == tmp_path / "bin" / "busybox"
    ran = subprocess.run([str(target)], capture_output=True, text=True, check=True, timeout=RUN_LIMIT)
    assert ran.stdout == "from-deb\n"


def test_a_failed_download_names_the_package_and_the_way_out(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_DOWNLOAD", "1")
    with pytest.raises(shells.ShellError, match=r"apt-get download busybox failed \(exit 100\)") as err:
        shells.fetch("busybox", tmp_path / "bin")
    assert "Unable to locate package" in str(err.value)
    assert "make script-shells" in str(err.value)
    assert not (tmp_path / "bin" / "busybox").exists()


def test_a_package_without_the_binary_is_named(
    fake_tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMPTY_DEB", "1")
    with pytest.raises(shells.ShellError, match=r"dash_1.0_amd64.deb holds no bin/dash"):
        shells.fetch("dash", tmp_path / "bin")


def test_without_apt_get_it_says_to_install_the_shells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(shells.ShellError, match="dash is not on PATH and this machine has no apt-get"):
        shells.fetch("dash", tmp_path / "bin")


def test_the_command_leaves_a_shell_already_on_path_alone(fake_tools: Path, tmp_path: Path) -> None:
    (fake_tools / "dash").write_text("#!/bin/sh\n")
    (fake_tools / "dash").chmod(0o755)
    (fake_tools / "busybox").write_text("#!/bin/sh\n")
    (fake_tools / "busybox").chmod(0o755)
    into = tmp_path / "bin"
    done = subprocess.run(
        [sys.executable, str(HACK / "script_shells.py"), str(into)],
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_LIMIT,
    )
    assert done.returncode == 0, done.stderr
    assert not into.exists()
