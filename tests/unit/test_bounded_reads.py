"""No test reads a websocket stream to its end without a bound (`run_forever()` waits for ever; the
client's preloaded `stream()` has a 60 s default). pytest-timeout would end such a test anyway
(tests/conftest.py); this keeps the failure where the hang is, with its own message."""

from __future__ import annotations

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
