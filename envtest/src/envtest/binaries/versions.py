"""Kubernetes version selectors, spelled as setup-envtest spells them, resolved against envtest.pins.

A selector picks one exact release (a leading ``v`` is accepted wherever a version is):

=================  =====================================================================
``latest``         the newest supported minor's pinned patch (the default)
``latest-on-disk`` the newest release of a supported minor whose kube-apiserver is cached
``1.36``           that minor's pinned patch; ``1.36.x`` and ``1.36.*`` say the same
``~1.36.2``        that minor's pinned patch if it is 1.36.2 or newer, else 1.36.2 itself
``1.36.2``         exactly that release (pre-releases too); its minor must be supported
=================  =====================================================================

An exact release need not be the pinned patch (a user reproducing a bug wants that patch): it is
downloaded or built like any other, into its own cache directory. Its etcd and kwok are its minor's.
Anything else — malformed, or a minor no pin covers — is a ConfigError listing what is supported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from envtest import commands
from envtest.errors import ConfigError
from envtest.pins import SUPPORTED, for_minor

_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z][0-9A-Za-z.-]*))?")
_MINOR = re.compile(r"(\d+)\.(\d+)(?:\.[x*])?")

LATEST = "latest"
LATEST_ON_DISK = "latest-on-disk"

VersionKey = tuple[int, int, int, int, str]


def sort_key(version: str) -> VersionKey | None:
    """Orders releases as semver does (1.37.0-rc.1 < 1.37.0 < 1.37.1); None for a non-release."""
    m = _RELEASE.fullmatch(version.strip().removeprefix("v"))
    if not m:
        return None
    major, minor, patch, pre = m.groups()
    # A release sorts after its pre-releases; pre-releases by their text (good enough: alpha < beta < rc).
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre or "")


def supported_hint() -> str:
    """The selectors that work today, for error messages."""
    pins = ", ".join(f"{p.minor} (pinned {p.kubernetes})" for p in SUPPORTED)
    example = SUPPORTED[-1].minor
    return (
        f"supported minors: {pins}; select with {example}, {example}.x, ~{example}.0, an exact {example}.z, "
        f"{LATEST} or {LATEST_ON_DISK}"
    )


def _supported(minor: str, what: str) -> None:
    if for_minor(minor) is None:
        raise ConfigError(f"Kubernetes {what} is not supported; {supported_hint()}")


def select(selector: str, *, on_disk: Callable[[], Iterable[str]], where: str = "the cache") -> str:
    """The exact release ``selector`` names, without a leading ``v``.

    ``on_disk`` lists the releases installed (called only for ``latest-on-disk``; entries that are no
    release are ignored); ``where`` names that place in the error when none is.
    """
    text = selector.strip()
    if text == LATEST:
        return SUPPORTED[-1].kubernetes
    if text == LATEST_ON_DISK:
        installed = [v.removeprefix("v") for v in on_disk()]
        usable = [v for v in installed if sort_key(v) is not None and for_minor(v) is not None]
        if not usable:
            others = f" (only unsupported: {', '.join(sorted(installed))})" if installed else ""
            install = commands.envtest("binaries", "install", "--k8s-version", LATEST)
            raise ConfigError(
                f"no release of a supported minor is installed in {where}{others}; install one with "
                f"`{install}` or pick a version; {supported_hint()}"
            )
        return max(usable, key=lambda v: sort_key(v) or ())
    bare = text.removeprefix("v")
    if m := _RELEASE.fullmatch(bare):
        _supported(bare, f"{m.group(1)}.{m.group(2)} (of {bare})")
        return bare
    floor = text.removeprefix("~").removeprefix("v")
    if text.startswith("~") and (m := _RELEASE.fullmatch(floor)):
        _supported(floor, f"{m.group(1)}.{m.group(2)} (of {text})")
        pinned = for_minor(floor).kubernetes  # type: ignore[union-attr]  # checked just above
        return pinned if (sort_key(pinned) or ()) >= (sort_key(floor) or ()) else floor
    if m := _MINOR.fullmatch(bare):
        minor = f"{int(m.group(1))}.{int(m.group(2))}"
        _supported(minor, minor)
        return for_minor(minor).kubernetes  # type: ignore[union-attr]  # checked just above
    raise ConfigError(f"not a Kubernetes version selector; {supported_hint()}")
