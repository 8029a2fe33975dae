"""Kubernetes resource quantities (`resource.Quantity`) as exact decimals, for comparing sizes.

The apiserver rewrites a quantity in canonical form (`1024Mi` comes back as `1Gi`), so the desired
and the live value of a limit may differ as text and still be equal. The operator needs only this
comparison, not the `kubernetes` client that ships a parser for it.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_FORM = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """`"1Gi"` → `Decimal(1073741824)`; ValueError naming the value when it is not a quantity."""
    if isinstance(value, int | float | Decimal):
        return Decimal(value)
    match = _FORM.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return base.scaleb(int(suffix[1:]))
    return base.scaleb(_DECIMAL[suffix])
