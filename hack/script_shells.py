"""Put dash and busybox, the shells the operator's pod scripts run under, into a folder of the project's
virtualenv when this machine has none on PATH; the unit tests run every script under both.

    python hack/script_shells.py .venv/bin

Nothing outside that folder changes. Each missing shell's Debian package is downloaded with `apt-get
download` into a temporary folder (nothing is installed), with the machine's package lists or, when
those are missing or stale, with lists fetched into that folder (apt's update hooks turned off), and
its one binary is extracted with `dpkg-deb`. Both need only the C library. busybox is Debian's
`busybox`, the one `make script-shells` installs system-wide (apt-get install), not `busybox-static`:
that one's sh runs its own applets before PATH (`sleep`, `cat`), so a test's fakes of those commands
would not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

SHELLS = ("dash", "busybox")
"""The shells, each in the Debian package of its own name."""
MEMBERS = ("usr/bin", "bin")
"""Where a package holds the binary: /usr/bin since Debian 13 and the Ubuntu releases of its time."""
HOOKS = ("Pre-Invoke", "Post-Invoke", "Post-Invoke-Success")
"""apt's hooks around an update, turned off for the one into the temporary folder."""


class ShellError(Exception):
    """A shell could not be fetched; the message says what to do instead."""


def fetch(names: Sequence[str], into: Path) -> list[Path]:
    """Each shell's binary from its Debian package, as `into/<name>`; one download for all."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ShellError(
                f"{' and '.join(names)} not on PATH and this machine has no {tool}: install dash and "
                "busybox with the system's package manager"
            )
    with tempfile.TemporaryDirectory(prefix="script-shells-") as tmp:
        debs = _download(list(names), Path(tmp))
        return [_extract(name, debs[name], Path(tmp) / name, into) for name in names]


def _download(packages: list[str], folder: Path) -> dict[str, Path]:
    """Each package's .deb in `folder`: with the machine's lists, else with fresh lists kept in `folder`."""
    failures: list[str] = []
    ok, detail = _apt(["download", *packages], folder)
    if not ok:
        failures.append(f"with this machine's package lists: {detail}")
        for stale in folder.glob("*.deb"):
            stale.unlink()
        hookless = folder / "apt.conf"
        # The update must not run the host's hooks (PackageKit, appstream): they would write outside.
        hookless.write_text("".join(f"#clear APT::Update::{hook};\n" for hook in HOOKS))
        options = [
            f"--config-file={hookless}",
            f"-o=Dir::State::Lists={folder / 'lists'}",
            f"-o=Dir::Cache={folder / 'cache'}",
        ]
        for sub in ("lists/partial", "cache/archives/partial"):
            (folder / sub).mkdir(parents=True)
        updated, update_detail = _apt([*options, "update"], folder)
        ok, detail = _apt([*options, "download", *packages], folder)
        if not ok:
            # apt-get update exits 0 when an index could not be fetched; its warnings say why.
            if update_detail or not updated:
                failures.append(f"apt-get update into {folder.name}: {update_detail}")
            failures.append(f"with fresh package lists: {detail}")
    debs = {p: next(iter(sorted(folder.glob(f"{p}_*.deb"))), None) for p in packages}
    if not ok or None in debs.values():
        missing = [p for p, deb in debs.items() if deb is None]
        raise ShellError(
            f"apt-get download {' '.join(packages)} failed:\n  "
            + "\n  ".join(failures or [f"no .deb for {' '.join(missing)}"])
            + "\ninstall dash and busybox system-wide instead: `make script-shells`"
        )
    return {p: deb for p, deb in debs.items() if deb is not None}


def _extract(name: str, deb: Path, tree: Path, into: Path) -> Path:
    """The shell's binary out of `deb`, copied into `into` under a temporary name, then renamed."""
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
    # A copy cut short must not pass for the shell, nor two runs sharing the folder meet in one file.
    handle, part = tempfile.mkstemp(dir=into, prefix=f".{name}.")
    os.close(handle)
    try:
        shutil.copyfile(binary, part)
        os.chmod(part, 0o755)
        os.replace(part, into / name)
    finally:
        Path(part).unlink(missing_ok=True)
    return into / name


def _apt(args: list[str], cwd: Path) -> tuple[bool, str]:
    """Run apt-get: whether it succeeded, and the end of what it printed on stderr (warnings too)."""
    done = subprocess.run(["apt-get", "-q", *args], cwd=cwd, capture_output=True, text=True, check=False)
    tail = done.stderr.strip()[-400:]
    return done.returncode == 0, (tail if done.returncode == 0 else f"exit {done.returncode}: {tail}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("into", type=Path, help="the folder (the virtualenv's bin)")
    args = parser.parse_args()
    missing = [n for n in SHELLS if not (shutil.which(n) or shutil.which(n, path=str(args.into)))]
    if not missing:
        return 0
    try:
        for path in fetch(missing, args.into):
            print(f"script-shells: {path.name} from Debian's package into {path}")
    except (ShellError, OSError) as exc:
        print(f"script-shells: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
