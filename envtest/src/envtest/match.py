"""Subset matching of live Kubernetes objects, with every mismatch reported by path.

    assert_matches(live, {
        "spec": {"template": {"spec": {"containers": [{"image": re.compile(r"nginx:1\\..*")}]}}},
        "status": {"readyReplicas": lambda n: n >= 3, "conditions": [{"type": "Ready", "status": "True"}]},
    }, unordered=["status.conditions"])

Rules, applied recursively from the expected side:

* mapping: a subset. Every expected key must be in live and match; live keys not asked about are ignored,
  because a live object always carries far more (uid, managedFields, defaults) than a test cares about.
* list: element-wise, in order, with equal length. Where order is not part of the contract (conditions,
  env, ports) ask for ``unordered``: ``True`` for every list, or the paths of the lists without indices
  (``"spec.template.spec.containers.env"``; ``[*]`` may be written for readability). An unordered list is
  a containment: each expected element must match a distinct live element; other live elements are ignored.
* scalar: equal, except that bool never equals int (JSON true is not 1).
* ``re.Pattern``: fullmatch against a live string. ``type``: isinstance. Other callables: a predicate
  whose truthy result passes; an exception it raises counts as a mismatch, because it usually means
  the live value has an unexpected shape (None where a number was due) - a state to report, not a crash.
* ``ABSENT``: the key is missing or null (``{"metadata": {"deletionTimestamp": ABSENT}}``).

``live`` (and ``expected``) may be a plain mapping, a pykube-ng APIObject (``.obj``) or a kubernetes
client model (converted to its camelCase JSON form, the keys the API server uses).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["ABSENT", "Mismatch", "assert_matches", "by_key", "condition", "mismatches"]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


ABSENT: Any = _Sentinel("ABSENT")
"""Expected value meaning "this key is missing or null"."""
MISSING: Any = _Sentinel("<missing>")
"""Mismatch.actual when the live object has no such key or list item."""

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 120
_repr.maxdict = _repr.maxlist = 8
_repr.maxlevel = 4

_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")


@dataclass(frozen=True)
class Mismatch:
    """One place where live differs from expected.

    ``reason`` is one of: "differs", "missing key", "not absent", "type differs", "length differs",
    "predicate failed", "no regex match", "no matching element".
    """

    path: str
    """Where: ``spec.template.spec.containers[0].image``, ``metadata.labels["app.kubernetes.io/name"]``."""
    expected: Any
    actual: Any
    reason: str
    detail: str = field(default="", compare=False)
    """Extra words for the reader: the predicate's error, extra items, the closest list element."""

    def __str__(self) -> str:
        where = self.path or "(root)"
        if self.reason == "missing key":
            text = f"missing key (expected {_describe(self.expected)})"
        elif self.reason == "not absent":
            text = f"expected absent, got {_repr.repr(self.actual)}"
        elif self.reason == "length differs":
            n = len(self.expected)
            text = f"length differs: expected {n} item{'s' * (n != 1)}, got {len(self.actual)}"
        elif self.reason == "no matching element":
            text = f"no element matches {_describe(self.expected)}"
        else:
            text = f"expected {_describe(self.expected)}, got {_repr.repr(self.actual)}"
        return f"{where}: {text}" + (f" ({self.detail})" if self.detail else "")


def _describe(expected: Any) -> str:
    if isinstance(expected, re.Pattern):
        return f"a string matching {expected.pattern!r}"
    if isinstance(expected, type):
        return f"an instance of {expected.__name__}"
    if callable(expected):
        return f"a value accepted by {getattr(expected, '__qualname__', repr(expected))}"
    if isinstance(expected, Mapping):
        return f"a mapping {_repr.repr(_render(expected))}"
    if isinstance(expected, list | tuple):
        return f"a list {_repr.repr(_render(expected))}"
    return _repr.repr(expected)


@functools.cache
def _api_client() -> Any:
    # Lazy: importing kubernetes costs ~0.4 s, and pykube-only suites never need it.
    from kubernetes.client import ApiClient

    return ApiClient()


def _plain(obj: Any) -> Any:
    """A pykube object, a kubernetes model, or a list of them, as the JSON the API server speaks."""
    if isinstance(obj, Mapping | str | bytes) or obj is None:
        return obj
    inner = getattr(obj, "obj", None)
    if isinstance(inner, Mapping):  # pykube-ng APIObject
        return inner
    if hasattr(type(obj), "openapi_types") or type(obj).__module__.startswith("kubernetes."):
        # to_dict() would give python attribute names (creation_timestamp); the API's names are camelCase.
        return _api_client().sanitize_for_serialization(obj)
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(obj, list | tuple):
        return [_plain(item) for item in obj]
    return obj


def _unordered_paths(unordered: bool | Iterable[str]) -> bool | frozenset[str]:
    if isinstance(unordered, bool):
        return unordered
    if isinstance(unordered, str):  # one path given bare: a str is an Iterable of characters
        unordered = [unordered]
    return frozenset(path.replace("[*]", "") for path in unordered)


def _key_path(path: str, key: Any) -> str:
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    quoted = json.dumps(key) if isinstance(key, str) else repr(key)
    return f"{path}[{quoted}]"


@dataclass
class _Result:
    mismatches: list[Mismatch]
    expected_view: Any  # expected, with predicates rendered, for the diff
    live_view: Any  # live, trimmed to the keys expected asks about

    def append(self, item: _Result) -> None:
        """Add a list item's result; only for results whose views are lists."""
        self.mismatches += item.mismatches
        self.expected_view.append(item.expected_view)
        self.live_view.append(item.live_view)


class _Matcher:
    def __init__(self, unordered: bool | frozenset[str]) -> None:
        self.unordered = unordered

    def _is_unordered(self, path: str, generic: str) -> bool:
        if isinstance(self.unordered, bool):
            return self.unordered
        return generic in self.unordered or path in self.unordered

    def walk(self, live: Any, expected: Any, path: str, generic: str) -> _Result:
        """Compare; ``generic`` is ``path`` without list indices, for the ``unordered`` lookup."""
        if isinstance(expected, Mapping):
            if not isinstance(live, Mapping):
                return self._type_differs(live, expected, path)
            return self._mapping(live, expected, path, generic)
        if isinstance(expected, list | tuple):
            if not isinstance(live, list | tuple):
                return self._type_differs(live, expected, path)
            if self._is_unordered(path, generic):
                return self._unordered(live, expected, path, generic)
            return self._ordered(live, expected, path, generic)
        return self._leaf(live, expected, path)

    def _type_differs(self, live: Any, expected: Any, path: str) -> _Result:
        return _Result([Mismatch(path, expected, live, "type differs")], _render(expected), live)

    def _leaf(self, live: Any, expected: Any, path: str) -> _Result:
        reason, detail = "", ""
        if expected is ABSENT:
            reason = "" if live is None else "not absent"
        elif isinstance(expected, re.Pattern):
            ok = isinstance(live, str) and expected.fullmatch(live) is not None
            reason = "" if ok else "no regex match"
        elif isinstance(expected, type):
            reason = "" if isinstance(live, expected) else "differs"
        elif callable(expected):
            try:
                reason = "" if expected(live) else "predicate failed"
            except Exception as exc:
                reason, detail = "predicate failed", f"it raised {type(exc).__name__}: {exc}"
        elif isinstance(expected, bool) != isinstance(live, bool) or expected != live:
            reason = "differs"
        if not reason:
            # Rendering the live value on both sides keeps a passing predicate out of the diff.
            return _Result([], live, live)
        return _Result([Mismatch(path, expected, live, reason, detail)], _render(expected), live)

    def _mapping(self, live: Mapping, expected: Mapping, path: str, generic: str) -> _Result:
        found: list[Mismatch] = []
        exp_view: dict[Any, Any] = {}
        live_view: dict[Any, Any] = {}
        for key, want in expected.items():
            sub, sub_generic = _key_path(path, key), _key_path(generic, key)
            if key not in live:
                if want is not ABSENT:
                    found.append(Mismatch(sub, want, MISSING, "missing key"))
                    exp_view[key] = _render(want)
                continue
            result = self.walk(live[key], want, sub, sub_generic)
            found += result.mismatches
            if want is ABSENT and not result.mismatches:
                continue  # null and absent read the same; keep both out of the diff
            exp_view[key], live_view[key] = result.expected_view, result.live_view
        return _Result(found, exp_view, live_view)

    def _ordered(self, live: Sequence, expected: Sequence, path: str, generic: str) -> _Result:
        out = _Result([], [], [])
        if len(live) != len(expected):
            if len(live) > len(expected):
                detail = f"extra items: {_repr.repr(list(live[len(expected) :]))}"
            else:
                detail = f"missing items: {_repr.repr(_render(list(expected[len(live) :])))}"
            out.mismatches.append(Mismatch(path, expected, live, "length differs", detail))
        for index, (have, want) in enumerate(zip(live, expected, strict=False)):
            out.append(self.walk(have, want, f"{path}[{index}]", generic))
        out.expected_view += [_render(want) for want in expected[len(live) :]]
        # Extra live items are trimmed to the shape of the last expected one, so a long container
        # spec does not flood the diff.
        for have in live[len(expected) :]:
            out.live_view.append(self.walk(have, expected[-1], path, generic).live_view if expected else have)
        return out

    def _unordered(self, live: Sequence, expected: Sequence, path: str, generic: str) -> _Result:
        # grid[i][j]: expected item i against live item j; small lists, so every pair is affordable.
        grid = [
            [self.walk(have, want, f"{path}[{j}]", generic) for j, have in enumerate(live)]
            for want in expected
        ]
        owner = _assign([[not cell.mismatches for cell in row] for row in grid], len(live))
        matched = {i: j for j, i in owner.items()}
        out = _Result([], [], [])
        for i, want in enumerate(expected):
            if i in matched:
                out.append(grid[i][matched[i]])
                continue
            detail = "the list is empty" if not live else ""
            if live:
                j = min(range(len(live)), key=lambda j: _distance(grid[i][j].mismatches, f"{path}[{j}]"))
                closest = grid[i][j]
                if not closest.mismatches:
                    detail = f"[{j}] would, but it is already matched by expected[{owner[j]}]"
                else:
                    detail = f"closest is [{j}]: " + "; ".join(map(str, closest.mismatches))
                if j not in owner:
                    out.live_view.append(closest.live_view)
            out.mismatches.append(Mismatch(path, want, list(live), "no matching element", detail))
            out.expected_view.append(_render(want))
        return out


_IDENTITY_KEYS = ("name", "type")  # the merge keys of most Kubernetes list-maps (containers, conditions)


def _distance(found: list[Mismatch], item_path: str) -> tuple[int, int]:
    """How far a live item is from an expected one. Agreeing on name/type counts most: for "Ready must be
    True" the helpful neighbour is the Ready condition that is False, not a Progressing one that is True."""
    identity = {f"{item_path}.{key}" for key in _IDENTITY_KEYS}
    return sum(m.path in identity for m in found), len(found)


def _assign(fits: list[list[bool]], n_live: int) -> dict[int, int]:
    """Maximum bipartite matching (Kuhn): live index -> expected index. Greedy first-fit is not enough:
    expected [{"a": 1}, {"a": 1, "b": 2}] against live [{"a": 1, "b": 2}, {"a": 1}] strands the second."""
    owner: dict[int, int] = {}

    def place(i: int, seen: set[int]) -> bool:
        for j in range(n_live):
            if fits[i][j] and j not in seen:
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        place(i, set())
    return owner


def _render(expected: Any) -> Any:
    """Expected as plain data for YAML and reprs: matchers become readable placeholders."""
    if isinstance(expected, Mapping):
        return {k: _render(v) for k, v in expected.items() if v is not ABSENT}
    if isinstance(expected, list | tuple):
        return [_render(v) for v in expected]
    if expected is ABSENT:
        return "<absent>"
    if isinstance(expected, re.Pattern | type) or callable(expected):
        return f"<{_describe(expected)}>"
    return expected


def _match(live: Any, expected: Any, unordered: bool | Iterable[str]) -> _Result:
    return _Matcher(_unordered_paths(unordered)).walk(_plain(live), _plain(expected), "", "")


def mismatches(live: Any, expected: Any, *, unordered: bool | Iterable[str] = False) -> list[Mismatch]:
    """Every difference between ``live`` and ``expected`` under the module's rules; empty if it matches."""
    return _match(live, expected, unordered).mismatches


def assert_matches(live: Any, expected: Any, *, unordered: bool | Iterable[str] = False) -> None:
    """Raise AssertionError listing every mismatch, then a diff trimmed to the keys ``expected`` names."""
    result = _match(live, expected, unordered)
    if not result.mismatches:
        return
    count = len(result.mismatches)
    lines = [f"{_title(live)} does not match ({count} mismatch{'es' if count > 1 else ''}):"]
    lines += [f"  {m}" for m in result.mismatches]
    want, have = _yaml(result.expected_view), _yaml(result.live_view)
    # Trimmed views are short, so show them whole; fall back to 3 lines of context for big ones.
    context = max(len(want), len(have)) if len(want) + len(have) <= 120 else 3
    diff = list(difflib.unified_diff(want, have, "expected", "live (trimmed)", n=context, lineterm=""))
    if diff:
        lines += ["", *diff]
    raise AssertionError("\n".join(lines))


def _title(live: Any) -> str:
    """``StatefulSet ns/name``, so a failure inside eventually() says which object it was about."""
    plain = _plain(live)
    if not (isinstance(plain, Mapping) and isinstance(plain.get("metadata"), Mapping)):
        return "live value"
    # kubernetes models built in code often lack kind; their class name says it.
    kind = plain.get("kind") or ("object" if isinstance(live, Mapping) else type(live).__name__)
    name = "/".join(str(p) for p in (plain["metadata"].get("namespace"), plain["metadata"].get("name")) if p)
    return f"{kind} {name}".strip()


class _Dumper(yaml.SafeDumper):
    """SafeDumper that prints anything it cannot represent (datetimes from models, custom objects) by repr."""


for _type, _represent in [
    (dict, lambda d, v: d.represent_dict(dict(v))),  # subclasses too: SafeDumper knows exact types only
    (list | tuple, lambda d, v: d.represent_list(list(v))),
    (str, lambda d, v: d.represent_str(str(v))),
    (object, lambda d, v: d.represent_str(repr(v))),
]:
    for _cls in getattr(_type, "__args__", (_type,)):
        _Dumper.add_multi_representer(_cls, _represent)


def _yaml(value: Any) -> list[str]:
    text = yaml.dump(value, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True)
    return text.splitlines()


def by_key(items: Iterable[Mapping[str, Any]] | None, key: str = "type") -> dict[Any, Mapping[str, Any]]:
    """Index list items by a field, e.g. conditions by ``type`` or containers by ``name``.

    ``None`` (an absent list) gives ``{}``. A duplicate or missing key raises ValueError: for conditions
    it means the object breaks the API's own list-map contract, which a test must not paper over.
    """
    index: dict[Any, Mapping[str, Any]] = {}
    for position, item in enumerate(items or ()):
        if key not in item:
            raise ValueError(f"item {position} has no {key!r}: {_repr.repr(item)}")
        if item[key] in index:
            raise ValueError(f"duplicate {key}={item[key]!r} at item {position}")
        index[item[key]] = item
    return index


def condition(obj: Any, type_: str) -> Mapping[str, Any] | None:
    """The ``status.conditions`` entry of ``type_`` in a live object, or None if there is none yet."""
    plain = _plain(obj)
    status = plain.get("status") if isinstance(plain, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for entry in conditions or ():
        if isinstance(entry, Mapping) and entry.get("type") == type_:
            return entry
    return None
