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
