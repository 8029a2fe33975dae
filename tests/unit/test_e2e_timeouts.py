"""Every timeout in the E2E suite goes through the backend's scaling (`timeouts(60)`, tests/e2e/mysqlkit.py).

A literal is written for the local plane, where kwok makes pods Ready at once; on kind a kubelet pulls
and starts real containers, so the same wait times out there. The suite is parsed, not run: a literal
timeout anywhere in tests/e2e fails here, naming file:line, before a slow backend ever meets it.
"""

from __future__ import annotations

import ast
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"

TIMEOUT_WORDS = frozenset({"timeout", "duration", "within"})
"""Keywords (and parameter names) that hold seconds to wait."""

WAITS = {"eventually": "timeout", "consistently": "duration"}
"""Waits whose second positional argument is the timeout, and whose default (30 s / 5 s) no backend scales."""

_NUMERIC_CALLS = frozenset({"float", "int", "min", "max", "abs", "round"})


def literal_timeouts(source: str, name: str) -> list[str]:
    """``name:line: why`` for each timeout in ``source`` that is a number written out (or a module
    constant, or arithmetic of those) instead of an expression through the scaling helper."""
    tree = ast.parse(source, filename=name)
    constants = _module_constants(tree)
    found: list[tuple[int, str]] = []

    def literal(node: ast.expr | None) -> bool:
        return node is not None and _is_literal(node, constants, frozenset())

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in TIMEOUT_WORDS and literal(kw.value):
                    found.append((kw.value.lineno, f"{kw.arg}={ast.unparse(kw.value)} is not scaled"))
            wait = _callee(node.func)
            if wait in WAITS:
                keyword = WAITS[wait]
                positional = node.args[1] if len(node.args) > 1 else None
                if literal(positional):
                    assert positional is not None
                    found.append((positional.lineno, f"{wait}(…, {ast.unparse(positional)}) is not scaled"))
                given = positional is not None or any(kw.arg in (keyword, None) for kw in node.keywords)
                if not given:
                    found.append((node.lineno, f"{wait}() without {keyword}= waits its unscaled default"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional_args = [*args.posonlyargs, *args.args]
            with_defaults = list(
                zip(positional_args[len(positional_args) - len(args.defaults) :], args.defaults, strict=True)
            )
            with_defaults += [
                (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
            ]
            for arg, default in with_defaults:
                if arg.arg in TIMEOUT_WORDS and literal(default):
                    why = f"{node.name}({arg.arg}={ast.unparse(default)}) defaults to an unscaled literal"
                    found.append((default.lineno, why + " (default to None and scale inside)"))
    return [f"{name}:{line}: {why}" for line, why in sorted(found, key=lambda f: f[0])]


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    constants: dict[str, ast.expr] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            constants[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            constants[stmt.target.id] = stmt.value
    return constants


def _is_literal(node: ast.expr, constants: dict[str, ast.expr], seen: frozenset[str]) -> bool:
    def again(child: ast.expr) -> bool:
        return _is_literal(child, constants, seen)

    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return again(node.operand)
    if isinstance(node, ast.BinOp):
        return again(node.left) and again(node.right)
    if isinstance(node, ast.Name):
        bound = constants.get(node.id)
        return bound is not None and node.id not in seen and _is_literal(bound, constants, seen | {node.id})
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        # LEASE["lease_duration"], with LEASE a module-level dict of numbers
        table = constants.get(node.value.id)
        if isinstance(table, ast.Dict) and isinstance(node.slice, ast.Constant):
            for key, value in zip(table.keys, table.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == node.slice.value:
                    return again(value)
        return False
    if (
        isinstance(node, ast.Call)
        and _callee(node.func) in _NUMERIC_CALLS
        and isinstance(node.func, ast.Name)
    ):
        return bool(node.args) and all(again(a) for a in node.args) and not node.keywords
    return False


# -- the suite ------------------------------------------------------------------------------------------


def test_no_e2e_timeout_bypasses_the_backend_scaling() -> None:
    files = sorted(E2E.rglob("*.py"))
    assert len(files) > 10, f"found only {files} under {E2E}: the walk is wrong"
    found = [
        line
        for path in files
        for line in literal_timeouts(path.read_text(), str(path.relative_to(E2E.parent.parent)))
    ]
    assert not found, (
        "literal timeouts in tests/e2e skip the backend's scaling (write timeouts(30), or "
        "mysql.timeouts(30) where the fixture is not at hand):\n" + "\n".join(found)
    )


# -- the checker itself: each way of writing a literal timeout is caught, the scaled ones are not ---------

SCALED = """
from envtest import consistently, eventually
def t(timeouts, mysql, s):
    eventually(check, timeout=timeouts(30))
    consistently(check, duration=mysql.timeouts(2.0), interval=0.5)
    s.get(url, timeout=timeouts(10))
    mysql.wait_gone("x", timeout=seconds)
    eventually(check, **options)
def helper(x, timeout=None, interval=0.5):
    pass
"""


def test_scaled_and_computed_timeouts_pass() -> None:
    assert literal_timeouts(SCALED, "ok.py") == []


UNSCALED = """
LEASE = {"lease_duration": 4.0}
PATIENCE = 30
def t(s, eventually):
    eventually(check, timeout=30)
    consistently(check, duration=-2.5 * 2)
    s.get(url, timeout=PATIENCE)
    eventually(check, timeout=LEASE["lease_duration"] + 1)
    waiter.wait(within=float(5))
    eventually(check)
    consistently(check, interval=0.5)
    eventually(check, 15)
def helper(x, timeout=60.0, *, duration: float = PATIENCE):
    pass
"""


DEFAULTS = "defaults to an unscaled literal (default to None and scale inside)"


def test_each_form_of_literal_timeout_is_named_with_its_line() -> None:
    assert literal_timeouts(UNSCALED, "bad.py") == [
        "bad.py:5: timeout=30 is not scaled",
        "bad.py:6: duration=-2.5 * 2 is not scaled",
        "bad.py:7: timeout=PATIENCE is not scaled",
        "bad.py:8: timeout=LEASE['lease_duration'] + 1 is not scaled",
        "bad.py:9: within=float(5) is not scaled",
        "bad.py:10: eventually() without timeout= waits its unscaled default",
        "bad.py:11: consistently() without duration= waits its unscaled default",
        "bad.py:12: eventually(…, 15) is not scaled",
        f"bad.py:13: helper(timeout=60.0) {DEFAULTS}",
        f"bad.py:13: helper(duration=PATIENCE) {DEFAULTS}",
    ]
