"""Put dash and busybox, the shells the operator's pod scripts run under, into a folder of the project's
virtualenv when this machine has none on PATH; the unit tests run every script under both.

    python hack/script_shells.py .venv/bin

Nothing outside that folder changes. Each missing shell's Debian package is downloaded with `apt-get
download` into a temporary folder (nothing is installed), with the machine's package lists or, when
those are missing or stale, with lists fetched into that folder, and its one binary is extracted with
`dpkg-deb`. Both need only the C library. busybox is Debian's `busybox`, the one `make script-shells`
installs system-wide (apt-get install), not `busybox-static`: that one's sh runs its own applets
before PATH (`sleep`, `cat`), so a test's fakes of those commands would not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = {"dash": "dash", "busybox": "busybox"}
"""Shell → its Debian package."""
MEMBERS = ("usr/bin", "bin")
"""Where a package holds the binary: /usr/bin since Debian 13 and the Ubuntu releases of its time."""


class ShellError(Exception):
    """A shell could not be fetched; the message says what to do instead."""


def fetch(name: str, into: Path) -> Path:
    """`name`'s binary from its Debian package, as `into/name`."""
    package = PACKAGES[name]
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ShellError(
                f"{name} is not on PATH and this machine has no {tool}: install dash and busybox "
                "with the system's package manager"
            )
    with tempfile.TemporaryDirectory(prefix="script-shells-") as tmp:
        deb = _download(package, Path(tmp))
        tree = Path(tmp) / "tree"
        done = subprocess.run(
            ["dpkg-deb", "-x", str(deb), str(tree)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise ShellError(
                f"dpkg-deb -x {deb.name} failed (exit {done.returncode}): {done.stderr.strip()[-400:]}"
            )
        binary = next((tree / d / name for d in MEMBERS if (tree / d / name).is_file()), None)
        if binary is None:
            raise ShellError(f"{deb.name} holds no {' or '.join(f'{d}/{name}' for d in MEMBERS)}")
        into.mkdir(parents=True, exist_ok=True)
        target, part = into / name, into / f"{name}.part"
        # Copied under another name first: a copy cut short must not pass for the shell.
        shutil.copyfile(binary, part)
        part.chmod(0o755)
        os.replace(part, target)
    return target


def _download(package: str, folder: Path) -> Path:
    """The package's .deb in `folder`: with the machine's lists, else with fresh lists kept in `folder`."""
    failed = _apt(["download", package], folder)
    if failed:
        lists = [f"-o=Dir::State::Lists={folder / 'lists'}", f"-o=Dir::Cache={folder / 'cache'}"]
        for sub in ("lists/partial", "cache/archives/partial"):
            (folder / sub).mkdir(parents=True)
        failed = _apt([*lists, "update"], folder) or _apt([*lists, "download", package], folder)
    debs = sorted(folder.glob(f"{package}_*.deb"))
    if failed or not debs:
        raise ShellError(
            f"apt-get download {package} failed, with this machine's package lists and with fresh ones: "
            f"{failed or 'no .deb'}\nor install dash and busybox system-wide: `make script-shells`"
        )
    return debs[0]


def _apt(args: list[str], cwd: Path) -> str:
    """Run apt-get; '' when it succeeded, else its exit code and the end of its stderr."""
    done = subprocess.run(["apt-get", "-q", *args], cwd=cwd, capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()[-400:]}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("into", type=Path, help="the folder (the virtualenv's bin)")
    args = parser.parse_args()
    for name in PACKAGES:
        if shutil.which(name) or shutil.which(name, path=str(args.into)):
            continue
        try:
            print(f"script-shells: {name} from Debian's package into {fetch(name, args.into)}")
        except (ShellError, OSError) as exc:
            print(f"script-shells: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
