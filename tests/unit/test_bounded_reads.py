"""No test reads without a bound: a websocket stream to its end (`run_forever()` waits for ever; the
client's preloaded `stream()` has a 60 s default), a child process's output (`subprocess.run` and
`communicate` wait for the child to exit), a socket opened without a timeout (its reads block for
ever). pytest-timeout would end such a test anyway (tests/conftest.py); this keeps the failure where
the hang is, with its own message."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
UNBOUNDED = {
    "a websocket read to the end without timeout=": re.compile(r"\.run_forever\(\s*\)"),
}


def test_no_test_reads_a_stream_without_a_bound() -> None:
    hits = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__):
            continue
        text = path.read_text()
        for what, pattern in UNBOUNDED.items():
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                hits.append(f"{path.relative_to(TESTS)}:{line}: {what}")
    assert hits == [], "\n".join(hits)


def test_the_patterns_catch_what_they_are_for() -> None:
    assert UNBOUNDED["a websocket read to the end without timeout="].search("resp.run_forever()")
    assert not UNBOUNDED["a websocket read to the end without timeout="].search("resp.run_forever(timeout=5)")


WAITS_FOR_A_CHILD_OR_PEER = frozenset(
    {"subprocess.run", "subprocess.check_output", "subprocess.check_call", "socket.create_connection"}
)

HTTP_CALL = re.compile(r"(^requests|session)\.(get|post|put|patch|delete|head|request)$")


def calls_without_timeout(source: str) -> list[tuple[int, str]]:
    """(line, callee) of each call that waits on a child, a socket or an HTTP peer with no `timeout=`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func)
        waits = callee in WAITS_FOR_A_CHILD_OR_PEER or callee.endswith(".communicate")
        # A requests session's read waits for ever without one (requests has no default timeout).
        waits = waits or HTTP_CALL.search(callee) is not None
        keywords = {k.arg for k in node.keywords}
        if waits and "timeout" not in keywords and None not in keywords:  # **kwargs may carry it
            found.append((node.lineno, callee))
    return found


def test_no_test_waits_on_a_child_or_a_socket_without_a_timeout() -> None:
    hits = [
        f"{path.relative_to(TESTS)}:{line}: {callee}(…) without timeout="
        for path in sorted(TESTS.rglob("*.py"))
        for line, callee in calls_without_timeout(path.read_text())
    ]
    assert hits == [], "\n".join(hits)


def test_the_call_check_finds_what_it_is_for() -> None:
    source = (
        "subprocess.run(['ls'], capture_output=True)\n"
        "subprocess.run(['ls'], timeout=5)\n"
        "socket.create_connection(('127.0.0.1', 1))\n"
        "proc.communicate()\n"
        "subprocess.run(argv, **options)\n"
        "api.session.get(url)\n"
        "api.session.get(url, timeout=5)\n"
    )
    assert calls_without_timeout(source) == [
        (1, "subprocess.run"),
        (3, "socket.create_connection"),
        (4, "proc.communicate"),
        (6, "api.session.get"),
    ]
