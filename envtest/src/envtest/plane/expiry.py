"""When a kept plane's certificates stop working, and refusing to hand out one that is about to.

A plane's CA and every certificate it issued expire together (`envtest.pki`): from that moment each
client, the plane's own controller-manager and kwok included, fails with "x509: certificate has
expired". A test plane lives minutes; a kept one (`envtest up`, --envtest-keep) is reused for as long
as its supervisor runs, so its supervisor asks for `KEPT_CERT_VALID_DAYS`, and a reuse within
`RENEW_MARGIN` of the end is refused with the command that replaces the plane.

Why refuse rather than renew in place: a new serving certificate alone would do for a while, but the
CA ends at the same moment, and a new CA means new kubeconfigs for every component and for every user
who exported the old one; that is a new plane in all but name, and pretending otherwise would hide
it from whoever holds the old kubeconfig.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from envtest.pki import earliest_not_after

__all__ = ["KEPT_CERT_VALID_DAYS", "RENEW_MARGIN", "Expiring", "describe", "expiring"]

KEPT_CERT_VALID_DAYS = 365
"""Days the certificates of a supervised plane are valid: a kept plane may serve for months."""

RENEW_MARGIN = dt.timedelta(days=1)
"""A plane whose certificates end within this much is not reused: a run that starts on it would
fail halfway through, with errors that name TLS rather than the plane's age."""

_KUBECONFIG_PEMS = ("client-certificate-data", "certificate-authority-data")


@dataclass(frozen=True)
class Expiring:
    """One certificate that ends too soon: where it was read, and its notAfter (UTC)."""

    source: str
    not_after: dt.datetime


def expiring(
    workdir: Path,
    *,
    now: dt.datetime,
    extra: Mapping[str, bytes] | None = None,
    margin: dt.timedelta = RENEW_MARGIN,
) -> list[Expiring]:
    """The certificates of the plane in ``workdir`` that end before ``now + margin``, earliest first.

    Read: ``pki/*.crt`` (CA, serving, admin) and the certificates embedded in the plane's kubeconfigs
    (admin and components), plus ``extra`` PEMs by name (a conversion webhook's CA). A file that is
    missing or unreadable is skipped: whether the plane runs is the liveness protocol's question.
    """
    found = [
        Expiring(source, not_after)
        for source, pem in _pems(Path(workdir), extra or {})
        if (not_after := _not_after(pem)) is not None and not_after <= now + margin
    ]
    return sorted(found, key=lambda e: (e.not_after, e.source))


def describe(name: str, found: list[Expiring], *, now: dt.datetime, replace: str) -> str:
    """The refusal: when the earliest certificate ends, which ones, and the command that replaces it."""
    first = found[0].not_after
    when = first.strftime("%Y-%m-%d %H:%M UTC")
    state = f"expired at {when}" if first <= now else f"expire at {when} (in {_span(first - now)})"
    sources = ", ".join(dict.fromkeys(e.source for e in found))
    return (
        f"control plane {name!r}: its certificates {state} ({sources}); every client of it would fail "
        f'with "x509: certificate has expired", so it is not reused. Replace it with `{replace}` (its '
        "objects go with it), then start it again"
    )


def _pems(workdir: Path, extra: Mapping[str, bytes]) -> Iterator[tuple[str, bytes]]:
    for path in sorted((workdir / "pki").glob("*.crt")):
        yield from _read(f"pki/{path.name}", path)
    for path in sorted(workdir.glob("*.kubeconfig")):
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        for section in ("users", "clusters"):
            for entry in (doc or {}).get(section) or []:
                body = entry.get("user" if section == "users" else "cluster") or {}
                for key in _KUBECONFIG_PEMS:
                    if body.get(key):
                        yield path.name, base64.b64decode(body[key])
    yield from extra.items()


def _read(source: str, path: Path) -> Iterator[tuple[str, bytes]]:
    try:
        yield source, path.read_bytes()
    except OSError:
        return


def _not_after(pem: bytes) -> dt.datetime | None:
    try:
        return earliest_not_after(pem)
    except ValueError:  # not a certificate (a corrupt file): not this check's concern
        return None


def _span(delta: dt.timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.0f} h" if hours >= 1 else f"{delta.total_seconds() / 60:.0f} min"
