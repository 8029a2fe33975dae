"""hack/skipcheck.py: the CI guard that turns a mostly-skipped run red."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("skipcheck", ROOT / "hack" / "skipcheck.py")
assert _spec and _spec.loader
skipcheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(skipcheck)


def _report(tmp_path: Path, passed: int, skipped: int) -> Path:
    cases = [f'<testcase classname="t" name="p{i}"/>' for i in range(passed)]
    cases += [
        f'<testcase classname="t" name="s{i}"><skipped message="needs the local backend"/></testcase>'
        for i in range(skipped)
    ]
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return path


@pytest.mark.parametrize(
    ("passed", "skipped", "code"), [(6, 4, 0), (4, 6, 1), (0, 0, 1)], ids=["few", "most", "none-ran"]
)
def test_run_fails_when_most_tests_were_skipped_or_none_ran(
    tmp_path: Path, passed: int, skipped: int, code: int
) -> None:
    assert skipcheck.main([str(_report(tmp_path, passed, skipped)), "--max-skipped", "0.5"]) == code


def test_a_smoke_set_fails_on_a_single_skip_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _report(tmp_path, 5, 1)
    assert skipcheck.main([str(report), "--max-skipped", "0"]) == 1
    out = capsys.readouterr().out
    assert "6 tests, 1 skipped" in out
    assert "1x needs the local backend" in out
    assert "skipped: t::s0" in out
    assert skipcheck.main([str(_report(tmp_path, 5, 0)), "--max-skipped", "0"]) == 0


def _reasons_report(tmp_path: Path, reasons: list[str]) -> Path:
    cases = ['<testcase classname="t" name="ran"/>']
    cases += [
        f'<testcase classname="t" name="s{i}"><skipped message="{reason}"/></testcase>'
        for i, reason in enumerate(reasons)
    ]
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return path


def test_make_test_allows_the_documented_kind_only_skips_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kind_only = [
        "needs containers that really run (kind), not local",
        "the operator&apos;s image runs in a real cluster only (kind)",
    ]
    args = ["--max-skipped", "0", "--allow-kind-only"]
    assert skipcheck.main([str(_reasons_report(tmp_path, kind_only)), *args]) == 0
    assert "2 kind-only skips set apart" in capsys.readouterr().out
    # A skip of any other kind fails the run, and is named.
    report = _reasons_report(tmp_path, [*kind_only, "tests/e2e/test_x.py:12: kopf is not installed"])
    assert skipcheck.main([str(report), *args]) == 1
    out = capsys.readouterr().out
    assert "1x kopf is not installed" in out and "skipped: t::s2" in out
    # Without the flag the kind-only skips count like any other.
    assert skipcheck.main([str(_reasons_report(tmp_path, kind_only)), "--max-skipped", "0"]) == 1


def test_the_kind_only_reasons_are_the_ones_the_tests_give() -> None:
    sources = "".join(p.read_text() for p in (ROOT / "tests" / "e2e").rglob("*.py"))
    assert 'needs containers that really run (kind), not {cluster.backend}"' in sources
    assert skipcheck.kind_only("needs containers that really run (kind), not local")
    assert not skipcheck.kind_only("needs containers that really run (kind), not existing")
    assert "the operator's image runs in a real cluster only (kind)" in sources
