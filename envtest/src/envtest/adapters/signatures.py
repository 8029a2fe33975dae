"""What a blocking or async `run(stop, **keywords)` asks for, read from its signature: the adapters'
shared contract (the stop event first, then any of the offered keywords by name)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from envtest.errors import ConfigError


def wanted(run: Callable[..., object], offered: Sequence[str], *, adapter: str, stop: str) -> tuple[str, ...]:
    """The `offered` keywords `run` names (all of them for `**kwargs`), in `offered`'s order; its
    first positional parameter is the stop event's (`stop` describes it), whatever its name. A
    signature that cannot take what the harness passes is a ConfigError naming `adapter(run)`."""
    label = f"{adapter}({name_of(run)})"
    try:
        signature = inspect.signature(run)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{adapter}({run!r}): cannot read its signature: {exc}") from None
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ConfigError(f"{label}: its first parameter must take the stop event ({stop})")
    if any(p.kind is p.VAR_KEYWORD for p in params):
        names = set(offered)
    else:
        names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if positional:
            names.discard(positional[0].name)
    chosen = tuple(key for key in offered if key in names)
    try:
        signature.bind(None, **dict.fromkeys(chosen))
    except TypeError as exc:
        raise ConfigError(
            f"{label}: {exc}; it gets the stop event first and any of {', '.join(offered)} by name"
        ) from None
    return chosen


def name_of(run: Callable[..., object]) -> str:
    return str(getattr(run, "__name__", None) or type(run).__name__)
