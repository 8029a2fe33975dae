"""Fail a run in which most tests were skipped: a backend that skips everything must not look green.

    python hack/skipcheck.py artifacts/junit-kind.xml --max-skipped 0.5
    python hack/skipcheck.py artifacts/junit-kind-smoke.xml --max-skipped 0   # a smoke set: no skip at all
    python hack/skipcheck.py artifacts/junit-test.xml --max-skipped 0 --allow-kind-only   # `make test`

Reads a JUnit XML report (pytest --junitxml); exit 1 when no test ran or when the skipped share exceeds
--max-skipped, printing the counts and the most common skip reasons, and on failure the skipped tests.
With --allow-kind-only, a skip whose reason is one of KIND_ONLY (a test that needs a real kind cluster,
on a local run) is counted apart and never fails the run; every other skip counts against the limit.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SHOWN = 10
"""Skipped tests named on failure; the rest are counted."""

KIND_ONLY = (
    # tests/e2e/conftest.py `kind_only`, test_kind.py, test_run_kind.py: a kubelet must run containers
    re.compile(r"^needs containers that really run \(kind\), not local$"),
    # test_deployed_operator.py: the operator's image deployed into a kind cluster
    re.compile(r"^the operator's image runs in a real cluster only \(kind\)$"),
)
"""The documented kind-only skips (docs/ci.md): a local `make test` skips these and nothing else."""


def _reason(message: str) -> str:
    # pytest's junit message for a skip is "<reason>", or "<file>:<line>: <reason>" for some skips
    return re.sub(r"^\S+:\d+: ", "", message.strip())


def kind_only(reason: str) -> bool:
    return any(pattern.match(reason) for pattern in KIND_ONLY)


def counts(report: Path, *, allow_kind_only: bool = False) -> tuple[int, list[str], Counter[str], int]:
    """(tests, the skipped tests' ids, skip reasons, kind-only skips set apart) over every testcase."""
    cases = ET.parse(report).getroot().iter("testcase")
    total, skipped, reasons, apart = 0, [], Counter[str](), 0
    for case in cases:
        skip = case.find("skipped")
        if skip is not None and allow_kind_only and kind_only(_reason(skip.get("message") or "")):
            apart += 1
            continue
        total += 1
        if skip is not None:
            skipped.append(f"{case.get('classname', '?')}::{case.get('name', '?')}")
            reasons[_reason(skip.get("message") or "")[:120]] += 1
    return total, skipped, reasons, apart


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("report", type=Path)
    parser.add_argument("--max-skipped", type=float, default=0.5, help="largest skipped share allowed (0-1)")
    parser.add_argument(
        "--allow-kind-only", action="store_true", help="set the documented kind-only skips apart (KIND_ONLY)"
    )
    args = parser.parse_args(argv)
    total, skipped, reasons, apart = counts(args.report, allow_kind_only=args.allow_kind_only)
    share = len(skipped) / total if total else 1.0
    allowed = f"at most {args.max_skipped:.0%} allowed"
    print(f"skipcheck: {total} tests, {len(skipped)} skipped ({share:.0%}; {allowed})")
    if args.allow_kind_only:
        print(f"  {apart} kind-only skips set apart (documented: they need a real kind cluster)")
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
