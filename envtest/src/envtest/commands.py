"""Commands the harness prints for a person to paste into another shell.

They must work as printed from any shell: no virtualenv activated, nothing of the project on PATH.
So each names an absolute path: this interpreter (`sys.executable -m …`), and the kubectl installed
with the plane's binaries (the same pin as the plane, so its skew is zero).
"""

from __future__ import annotations

import re
import shlex
import sys

_PYTHON_PREFIX = re.compile(r"^python3?(?=\s)")


def python() -> str:
    """This interpreter, quoted: the one that has envtest and the operator installed."""
    return shlex.quote(sys.executable)


def envtest(*args: str) -> str:
    """`<python> -m envtest.cli ARGS…`: the CLI without relying on the `envtest` script being on PATH."""
    return " ".join([python(), "-m", "envtest.cli", *(shlex.quote(a) for a in args)])


def down(name: str) -> str:
    return envtest("down", "--name", name)


def kubectl(version: str | None = None) -> str:
    """The cached kubectl of the plane's version; plain `kubectl` only when none is installed."""
    from envtest import binaries
    from envtest.errors import EnvtestError

    try:
        return shlex.quote(str(binaries.resolve("kubectl", version=version, install=False)))
    except EnvtestError:
        return "kubectl"


def with_this_python(command: str) -> str:
    """`python -m myoperator run` → `/abs/python -m myoperator run` (a bare `python` on
    PATH is rarely the virtualenv's); any other command is returned unchanged."""
    return _PYTHON_PREFIX.sub(lambda _m: python(), command.strip(), count=1)
