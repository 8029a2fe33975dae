"""Fail a run in which most tests were skipped: a backend that skips everything must not look green.

    python hack/skipcheck.py artifacts/junit-kind.xml --max-skipped 0.5
    python hack/skipcheck.py artifacts/junit-kind-smoke.xml --max-skipped 0   # a smoke set: no skip at all

Reads a JUnit XML report (pytest --junitxml); exit 1 when no test ran or when the skipped share exceeds
--max-skipped, printing the counts and the most common skip reasons, and on failure the skipped tests.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SHOWN = 10
"""Skipped tests named on failure; the rest are counted."""


def counts(report: Path) -> tuple[int, list[str], Counter[str]]:
    """(tests, the skipped tests' ids, skip reasons) over every testcase of the report."""
    cases = ET.parse(report).getroot().iter("testcase")
    total, skipped, reasons = 0, [], Counter[str]()
    for case in cases:
        total += 1
        skip = case.find("skipped")
        if skip is not None:
            skipped.append(f"{case.get('classname', '?')}::{case.get('name', '?')}")
            reasons[(skip.get("message") or "").strip()[:120]] += 1
    return total, skipped, reasons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path)
    parser.add_argument("--max-skipped", type=float, default=0.5, help="largest skipped share allowed (0-1)")
    args = parser.parse_args(argv)
    total, skipped, reasons = counts(args.report)
    share = len(skipped) / total if total else 1.0
    allowed = f"at most {args.max_skipped:.0%} allowed"
    print(f"skipcheck: {total} tests, {len(skipped)} skipped ({share:.0%}; {allowed})")
    for reason, n in reasons.most_common(5):
        print(f"  {n:4d}x {reason}")
    if total and share <= args.max_skipped:
        return 0
    for test in skipped[:SHOWN]:
        print(f"  skipped: {test}")
    if len(skipped) > SHOWN:
        print(f"  ... and {len(skipped) - SHOWN} more")
    return 1


if __name__ == "__main__":
    sys.exit(main())
