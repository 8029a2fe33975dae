"""Private temporary folders that name the process owning them, swept once it is gone.

What a process writes to the temporary directory (a kubeconfig with an admin key, a client key
written out for requests) is removed at its exit; a SIGKILLed process (a pytest run, an xdist worker,
an operator under test) never gets there. So each folder holds an `owner` file naming its process
(`envtest.runs.holder_identity`), and making one removes every such folder whose owner is gone,
whatever it held: the next process of the same user that makes one (a session's start does) cleans
up after a killed one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from envtest import runs

OWNER = "owner"
"""In each folder: the holder identity (`envtest.runs`) of the process it belongs to."""

PREFIX = "envtest-"
"""What every such folder's name begins with (a plane's workdir is `envtest-<random>`)."""


def make(kind: str = "") -> Path:
    """A new folder (0700) named `envtest-<kind><random>` in the temporary directory, owned by this
    process; first, the folders of processes that are gone are removed (`sweep`)."""
    sweep(Path(tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}"))
    (folder / OWNER).write_text(runs.holder_identity())
    return folder


def remove_own(folder: Path) -> None:
    """Remove `folder` if this process owns it: exit handlers and finalizers also run in a child
    forked after the folder was made, which must not take its parent's."""
    try:
        if (folder / OWNER).read_text() != runs.holder_identity():
            return
    except OSError:
        return
    shutil.rmtree(folder, ignore_errors=True)


def sweep(where: Path) -> None:
    """Remove the folders named `envtest-*` in `where` whose owning process is gone. Left alone: a
    folder without an owner (being made, or not made here), one whose owner is on another machine or
    in another container, another user's, a link."""
    for folder in where.glob(f"{PREFIX}*"):
        try:
            if folder.is_symlink() or folder.lstat().st_uid != os.getuid():
                continue
            owner = (folder / OWNER).read_text()
        except OSError:
            continue
        if runs.process_alive(owner) is False:
            shutil.rmtree(folder, ignore_errors=True)
