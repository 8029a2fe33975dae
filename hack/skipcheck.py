"""Fail a run in which most tests were skipped: a backend that skips everything must not look green.

    python hack/skipcheck.py artifacts/junit-kind.xml --max-skipped 0.5

Reads a JUnit XML report (pytest --junitxml); exit 1 when no test ran or when the skipped share exceeds
--max-skipped, printing the counts and the most common skip reasons.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def counts(report: Path) -> tuple[int, int, Counter[str]]:
    """(tests, skipped, skip reasons) over every testcase of the report."""
    cases = ET.parse(report).getroot().iter("testcase")
    total, reasons = 0, Counter[str]()
    for case in cases:
        total += 1
        skip = case.find("skipped")
        if skip is not None:
            reasons[(skip.get("message") or "").strip()[:120]] += 1
    return total, sum(reasons.values()), reasons


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path)
    parser.add_argument("--max-skipped", type=float, default=0.5, help="largest skipped share allowed (0-1)")
    args = parser.parse_args(argv)
    total, skipped, reasons = counts(args.report)
    share = skipped / total if total else 1.0
    allowed = f"at most {args.max_skipped:.0%} allowed"
    print(f"skipcheck: {total} tests, {skipped} skipped ({share:.0%}; {allowed})")
    for reason, n in reasons.most_common(5):
        print(f"  {n:4d}x {reason}")
    return 0 if total and share <= args.max_skipped else 1


if __name__ == "__main__":
    sys.exit(main())
