"""hack/check_dists.py, on archives shaped like setuptools' own: a clean pair passes, and each thing a
release must not carry (or must carry) is named."""

from __future__ import annotations

import importlib.util
import io
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_dists", ROOT / "hack" / "check_dists.py")
assert _spec is not None and _spec.loader is not None
check_dists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_dists)

LICENCE = (ROOT / "LICENSE").read_text()


def _sdist(path: Path, top: str, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _wheel(path: Path, files: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)


def _pair(dist: Path, prefix: str, package: str, *, extra: dict[str, str] | None = None) -> None:
    code = {f"{package}/__init__.py": "__version__ = '1.0.0'\n"}
    sdist_code = {f"src/{k}" if prefix == "kube_envtest" else k: v for k, v in code.items()}
    _sdist(
        dist / f"{prefix}-1.0.0.tar.gz",
        f"{prefix}-1.0.0",
        {"LICENSE": LICENCE, "PKG-INFO": "Name: x\n", **sdist_code, **(extra or {})},
    )
    info = f"{prefix}-1.0.0.dist-info"
    _wheel(
        dist / f"{prefix}-1.0.0-py3-none-any.whl",
        {**code, f"{info}/METADATA": "Name: x\n", f"{info}/licenses/LICENSE": LICENCE},
    )


def test_a_clean_pair_of_each_distribution_passes(tmp_path: Path) -> None:
    _pair(tmp_path, "kube_envtest", "envtest")
    _pair(tmp_path, "mysqlcluster_operator", "mysql_operator")
    assert check_dists.check(tmp_path) == []
    assert check_dists.main([str(tmp_path)]) == 0


def test_tests_caches_a_missing_licence_or_wheel_are_each_named(tmp_path: Path) -> None:
    strays = {
        "tests/test_x.py": "",
        "envtest/__pycache__/x.cpython-311.pyc": "",
        ".pytest_cache/README.md": "",
    }
    _pair(tmp_path, "kube_envtest", "envtest", extra=strays)
    _wheel(
        tmp_path / "mysqlcluster_operator-1.0.0-py3-none-any.whl",
        {"mysql_operator/__init__.py": "", "mysqlcluster_operator-1.0.0.dist-info/METADATA": ""},
    )
    report = check_dists.check(tmp_path)
    assert "kube_envtest-1.0.0.tar.gz: holds tests/test_x.py" in report
    assert "kube_envtest-1.0.0.tar.gz: holds envtest/__pycache__/x.cpython-311.pyc" in report
    assert "kube_envtest-1.0.0.tar.gz: holds .pytest_cache/README.md" in report
    assert any(line.startswith("mysqlcluster_operator: expected one sdist and one wheel") for line in report)
    assert (
        "mysqlcluster_operator-1.0.0-py3-none-any.whl: the repository's LICENSE is missing or differs"
        in report
    )
    assert check_dists.main([str(tmp_path)]) == 1


def test_an_archive_without_its_package_is_named(tmp_path: Path) -> None:
    _pair(tmp_path, "kube_envtest", "envtest")
    _pair(tmp_path, "mysqlcluster_operator", "other_package")
    report = check_dists.check(tmp_path)
    assert "mysqlcluster_operator-1.0.0-py3-none-any.whl: no mysql_operator/__init__.py" in report
    assert "mysqlcluster_operator-1.0.0.tar.gz: no mysql_operator/__init__.py" in report


def test_a_wrong_command_line_gets_a_usage_line_and_a_missing_folder_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        check_dists.main(["one", "two"])
    assert exited.value.code == 2 and "usage: check_dists.py" in capsys.readouterr().err
    missing = tmp_path / "nowhere"
    assert check_dists.main([str(missing)]) == 2
    assert f"{missing}: no such folder" in capsys.readouterr().err
