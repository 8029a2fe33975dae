"""LabelIndex: which keys carry which labels, kept as objects come, change and go."""

from __future__ import annotations

from mysql_operator.runtime.labelindex import LabelIndex
from mysql_operator.runtime.types import Key

A, B, C = Key("ns/a"), Key("ns/b"), Key("other/c")


def index() -> LabelIndex:
    found = LabelIndex()
    found.put(A, {"app": "db", "cluster": "one"})
    found.put(B, {"app": "db", "cluster": "two"})
    found.put(C, {"app": "db", "cluster": "one"})
    return found


def test_select_needs_every_term_and_the_namespace() -> None:
    found = index()
    assert found.select("ns", {"app": "db"}) == [A, B]
    assert found.select("ns", {"app": "db", "cluster": "one"}) == [A]
    assert found.select(None, {"cluster": "one"}) == [A, C]
    assert found.select("ns", {"cluster": "three"}) == []
    assert found.select("ns", {"app": "db", "cluster": "missing"}) == []


def test_no_terms_selects_the_whole_namespace() -> None:
    assert index().select("ns", {}) == [A, B]
    assert index().select(None, {}) == [A, B, C]


def test_a_relabelled_object_moves_and_a_removed_one_goes() -> None:
    found = index()
    found.put(A, {"app": "db", "cluster": "two"})
    assert found.select("ns", {"cluster": "one"}) == []
    assert found.select("ns", {"cluster": "two"}) == [A, B]
    found.remove(B)
    found.remove(B)  # twice: nothing to do
    assert found.select("ns", {"app": "db"}) == [A]
    found.put(A, None)  # its labels all removed
    assert found.select("ns", {"app": "db"}) == []
    assert found.select("ns", {}) == [A]
    found.remove(A)
    assert found.select(None, {}) == [C]
