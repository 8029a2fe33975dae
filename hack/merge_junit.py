"""Merge the JUnit reports of a sharded run and fail unless the shards together ran the whole suite once.

    python hack/merge_junit.py --expected collected.txt --shards 4 --out junit.xml shard-*/junit-*.xml

`--expected` is `pytest --collect-only -q` of the unsharded suite (one node id a line; other lines are
ignored). Exit 1 when a shard's report is missing or unreadable, a test failed or errored, a test of the
suite ran in no shard (a shard that died, a split that dropped it), a test ran in more than one shard (the
groups overlap), or a report holds a test the suite does not (the lists come from different trees). The
merged report (one <testsuite> per shard) is written either way, for the CI summary and skipcheck.py.

Standard library only: the CI job that merges has Python but not the project installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

Key = tuple[str, str]
"""A test as JUnit names it: (classname, name)."""


def junit_key(nodeid: str) -> Key:
    """The (classname, name) pytest's junitxml writes for `nodeid`: its `mangle_test_address`, so
    `tests/e2e/test_x.py::TestY::test_z[a::b]` → (`tests.e2e.test_x.TestY`, `test_z[a::b]`)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def expected_tests(listing: Path) -> dict[Key, str]:
    """Node ids of a `--collect-only -q` listing, by their JUnit key."""
    try:
        lines = listing.read_text().splitlines()
    except OSError as exc:
        raise SystemExit(f"merge_junit: --expected {listing}: {exc.strerror}") from None
    ids = [line.strip() for line in lines if "::" in line and not line.startswith(" ")]
    if not ids:
        raise SystemExit(f"merge_junit: --expected {listing}: no node ids (not `pytest --collect-only -q`?)")
    return {junit_key(nodeid): nodeid for nodeid in ids}


@dataclass
class Shard:
    report: Path
    suites: list[ET.Element]
    outcomes: dict[Key, str] = field(default_factory=dict)
    """passed, skipped, failed or error, per test of this shard."""


def read_shard(report: Path) -> Shard:
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ValueError(f"{report}: not a readable JUnit report ({exc})") from None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    shard = Shard(report, suites)
    for case in root.iter("testcase"):
        key = (case.get("classname") or "", case.get("name") or "")
        kinds = {child.tag for child in case}
        outcome = next((k for k in ("error", "failure", "skipped") if k in kinds), "passed")
        outcome = "failed" if outcome == "failure" else outcome
        # A test failing in its call and again in teardown has two entries here: one test, the worst outcome.
        if shard.outcomes.get(key) not in ("failed", "error"):
            shard.outcomes[key] = outcome
    return shard


@dataclass
class Verdict:
    problems: list[str]
    lines: list[str]
    """The summary: one line per shard, then the totals."""


def merge(shards: list[Shard], expected: dict[Key, str]) -> Verdict:
    problems: list[str] = []
    ran_in: dict[Key, list[int]] = defaultdict(list)
    lines = []
    for i, shard in enumerate(shards):
        for key, outcome in shard.outcomes.items():
            ran_in[key].append(i)
            if outcome in ("failed", "error"):
                label = expected.get(key, "::".join(key))
                problems.append(f"{outcome}: {label} (shard {shard.report})")
        counts = Counter(shard.outcomes.values())
        seconds = sum(float(s.get("time") or 0) for s in shard.suites)
        lines.append(
            f"{shard.report}: {len(shard.outcomes)} tests, {counts['failed']} failed, {counts['error']} "
            f"errors, {counts['skipped']} skipped, {seconds:.0f}s"
        )
    for key, nodeid in expected.items():
        if key not in ran_in:
            problems.append(f"ran in no shard: {nodeid}")
        elif len(ran_in[key]) > 1:
            where = ", ".join(str(shards[i].report) for i in ran_in[key])
            problems.append(f"ran in {len(ran_in[key])} shards: {nodeid} ({where})")
    for key in ran_in.keys() - expected.keys():
        problems.append(f"ran but not in the collected suite: {'::'.join(key)} (lists from different trees?)")
    lines.append(f"{len(expected)} tests collected, {len(ran_in)} ran, {len(problems)} problems")
    return Verdict(problems, lines)


def write_merged(shards: list[Shard], out: Path) -> None:
    root = ET.Element("testsuites")
    for shard in shards:
        for suite in shard.suites:
            suite.set("name", f"{suite.get('name') or 'pytest'} ({shard.report})")
            root.append(suite)
    out.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("reports", nargs="*", type=Path, help="one JUnit report per shard")
    parser.add_argument("--expected", type=Path, required=True, help="`pytest --collect-only -q` output")
    parser.add_argument("--shards", type=int, help="how many reports there must be")
    parser.add_argument("--out", type=Path, help="where to write the merged report")
    args = parser.parse_args(argv)
    expected = expected_tests(args.expected)
    shards, problems = [], []
    if args.shards is not None and len(args.reports) != args.shards:
        problems.append(f"{len(args.reports)} shard reports, expected {args.shards}: a shard wrote none")
    for report in args.reports:
        try:
            shards.append(read_shard(report))
        except ValueError as exc:
            problems.append(str(exc))
    verdict = merge(shards, expected)
    if args.out:
        write_merged(shards, args.out)
    for line in verdict.lines:
        print(f"merge_junit: {line}")
    for problem in problems + verdict.problems:
        print(f"merge_junit: {problem}", file=sys.stderr)
    return 1 if problems or verdict.problems else 0


if __name__ == "__main__":
    sys.exit(main())
