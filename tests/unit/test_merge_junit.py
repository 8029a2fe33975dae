"""hack/merge_junit.py: CI's last word on a sharded run, fed with reports real pytest runs wrote."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _pytest.junitxml import mangle_test_address

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("merge_junit", ROOT / "hack" / "merge_junit.py")
assert _spec and _spec.loader
merge_junit = importlib.util.module_from_spec(_spec)
sys.modules["merge_junit"] = merge_junit  # its dataclasses look their module up there
_spec.loader.exec_module(merge_junit)

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.fixture
def breaks_on_teardown():
    yield
    if FAIL_TEARDOWN:
        raise RuntimeError("teardown broke")

def test_plain():
    assert not FAIL_PLAIN

@pytest.mark.parametrize("x", [1, 2], ids=["one", "a::b"])
def test_param(x):
    pass

class TestGroup:
    def test_in_class(self, breaks_on_teardown):
        assert not FAIL_CLASS_CALL

def test_skipped():
    pytest.skip("not here")
"""


class Suite:
    """A tiny project; `run(group)` runs one of two pytest-split groups into its own JUnit report."""

    def __init__(self, pytester: pytest.Pytester, **fail: bool) -> None:
        self.pytester = pytester
        flags = ("plain", "teardown", "class_call")
        header = "".join(f"FAIL_{flag.upper()} = {fail.get(flag, False)}\n" for flag in flags)
        pytester.makepyfile(test_suite=header + SUITE)
        self.durations = pytester.path / "durations.json"
        self.durations.write_text("{}")  # none stored: pytest-split splits evenly
        listing = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
        self.expected = pytester.path / "collected.txt"
        self.expected.write_text("\n".join(listing.outlines))

    def run(self, group: int | None) -> Path:
        report = self.pytester.path / f"junit-{group}.xml"
        split = ["--splits", "2", "--group", str(group)] if group else []
        self.pytester.runpytest(
            f"--junitxml={report}", f"--durations-path={self.durations}", "-p", "no:cacheprovider", *split
        )
        return report

    def merge(self, *reports: Path, shards: int = 2) -> int:
        out = self.pytester.path / "merged.xml"
        args = ["--expected", str(self.expected), "--shards", str(shards), "--out", str(out)]
        return int(merge_junit.main([*args, *map(str, reports)]))


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/e2e/test_x.py::test_y",
        "tests/e2e/test_x.py::TestA::test_y[p-1]",
        "test_suite.py::test_param[a::b]",
        "tests/e2e/reliability/test_r.py::test_y[a/b.py]",
    ],
)
def test_junit_key_is_what_pytest_junitxml_writes(nodeid: str) -> None:
    names = mangle_test_address(nodeid)
    assert merge_junit.junit_key(nodeid) == (".".join(names[:-1]), names[-1])


def test_shards_that_ran_the_suite_once_between_them_merge_green(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester)
    assert suite.merge(suite.run(1), suite.run(2)) == 0
    out = capsys.readouterr().out
    assert "5 tests collected, 5 ran, 0 problems" in out
    merged = ET.parse(pytester.path / "merged.xml").getroot()
    assert len(merged.findall("testsuite")) == 2
    assert len(list(merged.iter("testcase"))) == 5


def test_a_failed_test_fails_the_merge_naming_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester, plain=True)
    assert suite.merge(suite.run(1), suite.run(2)) == 1
    assert "failed: test_suite.py::test_plain (shard" in capsys.readouterr().err


def test_a_teardown_error_after_a_passing_call_fails_the_merge(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester, teardown=True)
    assert suite.merge(suite.run(1), suite.run(2)) == 1
    assert "error: test_suite.py::TestGroup::test_in_class (shard" in capsys.readouterr().err


def test_a_test_failing_in_call_and_teardown_is_one_failed_test_not_two_runs(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest writes two <testcase> entries for it into the one report.
    suite = Suite(pytester, teardown=True, class_call=True)
    assert suite.merge(suite.run(1), suite.run(2)) == 1
    out, err = capsys.readouterr()
    assert "failed: test_suite.py::TestGroup::test_in_class (shard" in err
    assert "shards:" not in err
    assert "5 tests collected, 5 ran, 1 problems" in out


def test_a_shard_without_a_report_leaves_its_tests_in_no_shard(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester)
    first = suite.run(1)
    ran = {case.get("name") for case in ET.parse(first).getroot().iter("testcase")}
    assert suite.merge(first) == 1
    err = capsys.readouterr().err
    assert "1 shard reports, expected 2: a shard wrote none" in err
    missing = [line for line in err.splitlines() if "ran in no shard" in line]
    assert len(missing) == 5 - len(ran) > 0
    assert not any(f"::{name}" in line for line in missing for name in ran)


def test_a_test_run_by_two_shards_is_reported_with_both(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester)
    everything, first = suite.run(None), suite.run(1)
    assert suite.merge(everything, first) == 1
    twice = [line for line in capsys.readouterr().err.splitlines() if "ran in 2 shards" in line]
    assert len(twice) == len(list(ET.parse(first).getroot().iter("testcase")))
    assert all(str(everything) in line and str(first) in line for line in twice)


def test_a_test_not_in_the_collected_list_is_reported(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester)
    reports = suite.run(1), suite.run(2)
    lines = suite.expected.read_text().splitlines()
    suite.expected.write_text("\n".join(line for line in lines if "test_skipped" not in line))
    assert suite.merge(*reports) == 1
    assert "ran but not in the collected suite: test_suite::test_skipped" in capsys.readouterr().err


def test_unreadable_report_and_bad_listing_are_named(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = Suite(pytester)
    broken = pytester.path / "junit-broken.xml"
    broken.write_text("<testsuites><testsuite>")
    assert suite.merge(suite.run(1), broken) == 1
    assert f"{broken}: not a readable JUnit report" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"--expected .*nothing\.txt"):
        merge_junit.main(["--expected", str(pytester.path / "nothing.txt")])
    (pytester.path / "empty.txt").write_text("no tests ran\n")
    with pytest.raises(SystemExit, match=r"empty\.txt: no node ids"):
        merge_junit.main(["--expected", str(pytester.path / "empty.txt")])
