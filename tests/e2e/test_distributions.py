"""Each distribution installs and works alone, the way a stranger installs it: both wheels are built
from this repository, and each goes into a fresh virtualenv that holds nothing else of it.

- kube-envtest alone: the pytest plugin loads and runs a test against a plane of its own `envtest up`,
  and `envtest down` leaves nothing; none of the reference operator's modules or libraries is there.
- mysqlcluster-operator alone: its CLI runs; neither pytest nor the harness is there.
"""

from __future__ import annotations

import importlib.util
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import distkit
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_dists", ROOT / "hack" / "check_dists.py")
assert _spec is not None and _spec.loader is not None
check_dists = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_dists)
pytestmark = pytest.mark.envtest_local  # local binaries for `envtest up`

# pydantic is the operator's too, but the `kubernetes` client (>= 35) depends on it as well.
OPERATOR_ONLY = ("mysql_operator", "croniter", "prometheus_client")
HARNESS_ONLY = ("envtest", "pytest", "xdist", "tenacity", "kubernetes", "filelock")


LIMIT: list[float] = []
"""The scaled limit of one install or CLI call (set from the `timeouts` fixture)."""


@pytest.fixture(autouse=True, scope="module")
def _limit(timeouts: Any) -> None:
    LIMIT[:] = [timeouts(900)]  # a cold pip install with dependencies takes minutes on a busy machine


def _run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    return distkit.run(*argv, env=env, cwd=cwd, timeout=LIMIT[0])


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both distributions built as `make dist` builds them: the sdist, then the wheel from it."""
    dist = tmp_path_factory.mktemp("dist")
    for project in ("envtest", "operator"):
        # From a copy: a build in the tree leaves build/ there, and two xdist workers may build at once.
        source = distkit.copy_project(project, tmp_path_factory.mktemp("src"))
        # What a working checkout holds beside the code, which no distribution may carry.
        package = next(p for p in (source / "src" / "envtest", source / "mysql_operator") if p.is_dir())
        (package / "__pycache__").mkdir(exist_ok=True)
        (package / "__pycache__" / "stray.cpython-311.pyc").write_bytes(b"\0")
        (source / ".pytest_cache").mkdir()
        (source / "tests").mkdir()
        (source / "tests" / "test_stray.py").write_text("def test_stray(): pass\n")
        distkit.build(source, dist, timeout=LIMIT[0])
    return dist


@pytest.fixture(scope="module")
def wheels(dists: Path) -> dict[str, Path]:
    (harness,) = dists.glob("kube_envtest-*.whl")
    (operator,) = dists.glob("mysqlcluster_operator-*.whl")
    return {"harness": harness, "operator": operator}


def test_sdist_and_wheel_hold_the_package_and_its_licence_and_no_tests_or_caches(dists: Path) -> None:
    # The strays planted in the copies (tests/, __pycache__, .pytest_cache) must not come through.
    assert check_dists.check(dists) == []
    for wheel in dists.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            metadata = next(m for m in zf.namelist() if m.endswith(".dist-info/METADATA"))
            assert "License-Expression: Apache-2.0" in zf.read(metadata).decode(), wheel.name


def _venv_with(wheel: Path, where: Path) -> Path:
    return distkit.venv_with(wheel, where, timeout=LIMIT[0])


def _missing(python: Path, modules: tuple[str, ...]) -> list[str]:
    code = (
        "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    )
    return _run(python, "-c", code, *modules, cwd=python.parents[2]).split()  # not here: ./envtest


def _clean_env(python: Path, home: Path) -> dict[str, str]:
    return distkit.clean_env(python, home)


def test_the_harness_installs_alone_and_its_plugin_and_cli_work(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    python = _venv_with(wheels["harness"], tmp_path / "venv")
    assert _missing(python, OPERATOR_ONLY) == list(OPERATOR_ONLY), "the harness pulled in the operator"
    env = _clean_env(python, tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    name = "alone"
    exports = _run(python, "-m", "envtest.cli", "up", "--name", name, env=env)
    try:
        kubeconfig = next(
            line.split("=", 1)[1].strip().strip("'\"")
            for line in exports.splitlines()
            if "KUBECONFIG=" in line
        )
        (project / "pytest.ini").write_text("[pytest]\nenvtest_backend = existing\n")
        (project / "test_alone.py").write_text(
            textwrap.dedent(
                """
                def test_a_namespace_of_its_own(namespace, kube):
                    import pykube

                    assert pykube.Namespace.objects(kube).get(name=namespace).name == namespace
                """
            )
        )
        out = _run(
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            env={**env, "KUBECONFIG": kubeconfig},
            cwd=project,
        )
        assert "1 passed" in out
    finally:
        _run(python, "-m", "envtest.cli", "down", "--name", name, env=env)
    assert "alone" not in _run(python, "-m", "envtest.cli", "list", env=env)


def test_the_operator_installs_alone_and_its_cli_runs(wheels: dict[str, Path], tmp_path: Path) -> None:
    python = _venv_with(wheels["operator"], tmp_path / "venv")
    assert _missing(python, HARNESS_ONLY) == list(HARNESS_ONLY), (
        "the operator pulled in the harness or pytest"
    )
    env = _clean_env(python, tmp_path)
    out = _run(python, "-m", "mysql_operator", "run", "--help", env=env, cwd=tmp_path)
    assert "--kubeconfig" in out
    assert "--kubeconfig" in _run(tmp_path / "venv" / "bin" / "mysql-operator", "run", "--help", env=env)


def test_the_operator_image_installs_only_the_operators_wheel() -> None:
    dockerfile = (ROOT / "operator" / "config" / "Dockerfile").read_text()
    copies = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY")]
    assert copies and all(src.startswith("operator") for src in copies), copies
    instructions = [line for line in dockerfile.splitlines() if line.strip() and not line.startswith("#")]
    assert not [line for line in instructions if "envtest" in line], "the image installs the harness"
