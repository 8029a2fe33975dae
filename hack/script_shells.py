"""Put dash and busybox, the shells the operator's pod scripts run under, into a folder of the project's
virtualenv when this machine has none on PATH; the unit tests run every script under both.

    python hack/script_shells.py .venv/bin

Nothing outside that folder changes: each missing shell's Debian package is downloaded with `apt-get
download` (from the package lists this machine already has; nothing is installed) into a temporary
folder, and its one binary is extracted with `dpkg-deb`. Both need only the C library. busybox is
Debian's `busybox`, the one `make script-shells` installs system-wide (apt-get install), not
`busybox-static`: that one's sh runs its own applets before PATH (`sleep`, `cat`), so a test's fakes
of those commands would not run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = {"dash": ("dash", "bin/dash"), "busybox": ("busybox", "bin/busybox")}
"""Shell → (Debian package, its binary inside the package)."""


class ShellError(Exception):
    """A shell could not be fetched; the message says what to do instead."""


def fetch(name: str, into: Path) -> Path:
    """`name`'s binary from its Debian package, as `into/name`."""
    package, member = PACKAGES[name]
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ShellError(
                f"{name} is not on PATH and this machine has no {tool}: install dash and busybox "
                "with the system's package manager"
            )
    with tempfile.TemporaryDirectory(prefix="script-shells-") as tmp:
        got = subprocess.run(
            ["apt-get", "download", package], cwd=tmp, capture_output=True, text=True, check=False
        )
        debs = sorted(Path(tmp).glob(f"{package}_*.deb"))
        if got.returncode != 0 or not debs:
            raise ShellError(
                f"apt-get download {package} failed (exit {got.returncode}): {got.stderr.strip()[-400:]}\n"
                "if the package lists are missing, `apt-get update` first (changes the host), "
                "or `make script-shells`"
            )
        tree = Path(tmp) / "tree"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tree)], check=True, capture_output=True)
        binary = tree / member
        if not binary.is_file():
            raise ShellError(f"{debs[0].name} holds no {member}")
        into.mkdir(parents=True, exist_ok=True)
        target = into / name
        shutil.copy2(binary, target)
        target.chmod(0o755)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("into", type=Path, help="the folder (the virtualenv's bin)")
    args = parser.parse_args()
    for name in PACKAGES:
        found = shutil.which(name) or shutil.which(name, path=str(args.into))
        if found:
            continue
        try:
            print(f"script-shells: {name} from Debian's package into {fetch(name, args.into)}")
        except ShellError as exc:
            print(f"script-shells: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
