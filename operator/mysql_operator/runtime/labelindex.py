"""Which cached objects carry which labels: an informer's label index (client-go's Indexer, for labels).

An informer keeps its objects as JSON text (see `informer`), so finding "the pods of cluster X" by
parsing every cached pod costs a parse per pod per read: with many clusters in a namespace, every pass
would parse every cluster's pods. The index keeps each object's labels beside its text, and an inverted
map from each `key=value` to the objects that carry it, so a selection touches only the objects that
share its rarest term, and parses only those that match.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .types import Key, split_key

Labels = Mapping[str, str]


class LabelIndex:
    """Labels of each key, and the keys of each `(label, value)`. Not thread-safe: the informer's lock
    guards it together with its store."""

    def __init__(self) -> None:
        self._labels: dict[Key, dict[str, str]] = {}
        self._keys: dict[tuple[str, str], set[Key]] = {}

    def put(self, key: Key, labels: Labels | None) -> None:
        self.remove(key)
        own = {str(k): str(v) for k, v in (labels or {}).items()}
        self._labels[key] = own
        for term in own.items():
            self._keys.setdefault(term, set()).add(key)

    def remove(self, key: Key) -> None:
        for term in (self._labels.pop(key, None) or {}).items():
            keys = self._keys.get(term)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._keys[term]

    def select(self, namespace: str | None, wanted: Labels) -> list[Key]:
        """Keys in `namespace` (None: any) whose labels hold every `wanted` term (none: every key)."""
        if wanted:
            # The rarest term's keys are the fewest to check against the others.
            sets = [self._keys.get((k, v), set()) for k, v in wanted.items()]
            candidates: Iterable[Key] = min(sets, key=len)
        else:
            candidates = self._labels
        found = []
        for key in candidates:
            labels = self._labels[key]
            if namespace is not None and split_key(key)[0] != namespace:
                continue
            if all(labels.get(k) == v for k, v in wanted.items()):
                found.append(key)
        return sorted(found)
