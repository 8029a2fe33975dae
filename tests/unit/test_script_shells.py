"""hack/script_shells.py: the pod scripts' shells copied out of Debian packages, with apt-get and
dpkg-deb replaced by fakes on PATH (the real download is what `make test` runs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_modules import import_from

HACK = Path(__file__).resolve().parents[2] / "hack"
shells = import_from(HACK, "script_shells")
RUN_LIMIT = 60
"""Seconds before a run is called hung: a safety net, never an assertion."""

# apt-get [-q] [--config-file=…] [-o=…] download <package>… | update: every call logged, a config file's
# text too; a fake .deb per package, named as Debian names them. FAIL_DOWNLOAD: every download fails;
# STALE_LISTS: a download with the machine's lists fails; FAIL_UPDATE: the update cannot reach the mirror
# (apt warns and exits 0), so the download with the fresh lists fails as well.
FAKE_APT = """#!/bin/sh
echo "$*" >> "$APT_LOG"
private=
while [ "${1#-}" != "$1" ]; do
  case "$1" in
    -o=Dir::State::Lists=*) private=1 ;;
    --config-file=*) cat "${1#--config-file=}" >> "$APT_LOG.conf" ;;
  esac
  shift
done
if [ "$1" = update ]; then
  [ -n "$FAIL_UPDATE" ] && echo "W: Failed to fetch http://deb.example/InRelease  Temporary failure" >&2
  exit 0
fi
[ "$1" = download ] || exit 2
shift
if [ -n "$FAIL_DOWNLOAD" ] || [ -n "$FAIL_UPDATE" ] || { [ -n "$STALE_LISTS" ] && [ -z "$private" ]; }; then
  echo "E: Unable to locate package $1" >&2
  exit 100
fi
for package in "$@"; do echo fake > "${package}_1.0_amd64.deb"; done
"""
# dpkg-deb -x <deb> <dir>: the shell in $LAYOUT (bin or usr/bin); EMPTY_DEB: no shell; FAIL_DPKG: exit 2.
FAKE_DPKG = """#!/bin/sh
[ "$1" = -x ] || exit 2
[ -n "$FAIL_DPKG" ] && { echo "dpkg-deb: error: not a Debian format archive" >&2; exit 2; }
shell=$(basename "$2" | cut -d_ -f1)
mkdir -p "$3/$LAYOUT"
[ -n "$EMPTY_DEB" ] || printf '#!/bin/sh\\necho from-deb\\n' > "$3/$LAYOUT/$shell"
"""
TOOLS = ("basename", "cat", "cut", "mkdir")
"""What the fakes run, linked beside them: PATH holds nothing else, so no real shell is found on it."""


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    for name, body in (("apt-get", FAKE_APT), ("dpkg-deb", FAKE_DPKG)):
        (folder / name).write_text(body)
        (folder / name).chmod(0o755)
    for name in TOOLS:
        real = shutil.which(name)
        assert real is not None, name
        (folder / name).symlink_to(real)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv("APT_LOG", str(tmp_path / "apt.log"))
    monkeypatch.setenv("LAYOUT", "bin")
    return folder


def apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def script(into: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HACK / "script_shells.py"), str(into)],
        capture_output=True,
        text=True,
        check=False,
        timeout=RUN_LIMIT,
    )


@pytest.mark.parametrize("layout", ["bin", "usr/bin"])
def test_a_shell_is_copied_out_of_its_package(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    monkeypatch.setenv("LAYOUT", layout)
    (target,) = shells.fetch(["busybox"], tmp_path / "bin")
    assert target == tmp_path / "bin" / "busybox"
    ran = subprocess.run([str(target)], capture_output=True, text=True, check=True, timeout=RUN_LIMIT)
    assert ran.stdout == "from-deb\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["busybox"]
    assert apt_calls(tmp_path) == ["-q download busybox"]


def test_stale_package_lists_are_fetched_into_the_temporary_folder(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALE_LISTS", "1")
    paths = shells.fetch(["dash", "busybox"], tmp_path / "bin")
    assert paths == [tmp_path / "bin" / "dash", tmp_path / "bin" / "busybox"]
    first, update, download = apt_calls(tmp_path)
    assert first == "-q download dash busybox"
    assert update.endswith(" update") and download.endswith(" download dash busybox")
    for call in (update, download):
        paths_given = [
            arg.rsplit("=", 1)[1] for arg in call.split() if arg.startswith(("-o=Dir::", "--config-"))
        ]
        assert len(paths_given) == 3, call  # the lists, the cache, the hookless configuration
        folders = {Path(path).parent for path in paths_given}
        assert len(folders) == 1 and folders.pop().name.startswith("script-shells-"), call
    cleared = [
        f"#clear APT::Update::{hook};" for hook in ("Pre-Invoke", "Post-Invoke", "Post-Invoke-Success")
    ]
    # The same hookless configuration given to the update and to the download.
    assert (tmp_path / "apt.log.conf").read_text().splitlines() == cleared * 2


def test_an_unreachable_mirror_is_named_with_each_attempt(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_UPDATE", "1")
    with pytest.raises(shells.ShellError) as err:
        shells.fetch(["busybox"], tmp_path / "bin")
    lines = str(err.value).splitlines()
    assert lines[0] == "apt-get download busybox failed:"
    assert lines[1].startswith("  with this machine's package lists: exit 100: E: Unable to locate")
    assert "Temporary failure" in lines[2] and lines[2].startswith("  apt-get update into script-shells-")
    assert lines[3].startswith("  with fresh package lists: exit 100")
    assert "make script-shells" in lines[4]


def test_a_failed_download_names_the_package_and_the_way_out(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_DOWNLOAD", "1")
    with pytest.raises(shells.ShellError, match=r"apt-get download busybox failed") as err:
        shells.fetch(["busybox"], tmp_path / "bin")
    assert "exit 100: E: Unable to locate package busybox" in str(err.value)
    assert "make script-shells" in str(err.value)
    assert not (tmp_path / "bin").exists()


def test_a_failed_extraction_is_named(tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_DPKG", "1")
    with pytest.raises(shells.ShellError, match=r"dpkg-deb -x dash_1.0_amd64.deb failed \(exit 2\)"):
        shells.fetch(["dash"], tmp_path / "bin")


def test_a_package_without_the_binary_is_named(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMPTY_DEB", "1")
    with pytest.raises(shells.ShellError, match=r"dash_1.0_amd64.deb holds no usr/bin/dash or bin/dash"):
        shells.fetch(["dash"], tmp_path / "bin")


def test_without_apt_get_it_says_to_install_the_shells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(shells.ShellError, match="dash not on PATH and this machine has no apt-get"):
        shells.fetch(["dash"], tmp_path / "bin")


def test_the_command_fetches_only_what_is_missing(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tools / "dash").write_text("#!/bin/sh\n")
    (tools / "dash").chmod(0o755)
    into = tmp_path / "venv-bin"
    done = script(into)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in into.iterdir()) == ["busybox"]
    # A second run finds the copy and downloads nothing.
    monkeypatch.setenv("FAIL_DOWNLOAD", "1")
    again = script(into)
    assert again.returncode == 0, again.stderr
    assert apt_calls(tmp_path) == ["-q download busybox"]


def test_the_command_fails_naming_the_shells_without_a_traceback(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_DOWNLOAD", "1")
    done = script(tmp_path / "venv-bin")
    assert done.returncode == 1
    assert done.stderr.startswith("script-shells: apt-get download dash busybox failed"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_folder_it_cannot_write_is_named_without_a_traceback(tools: Path, tmp_path: Path) -> None:
    into = tmp_path / "not-a-folder"
    into.write_text("")
    done = script(into)
    assert done.returncode == 1
    assert done.stderr.startswith("script-shells: ") and str(into) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
