"""`envtest_reset = module` and `envtest reset` as users run them: pytester projects and the CLI,
against real planes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from envtest import binaries
from envtest.clusters import Cluster
from envtest.timeouts import Timeouts

pytestmark = pytest.mark.envtest_local
pytest_plugins = ["pytester"]
LOCAL = Timeouts("local")

MAKES = """
import pykube

def test_makes_a_namespace_and_changes_default(kube):
    pykube.Namespace(kube, {"metadata": {"name": "left-behind"}}).create()
    pykube.ConfigMap(kube, {"metadata": {"name": "left", "namespace": "default"}}).create()
"""
FINDS_NONE = """
import pykube

def test_finds_none_of_it(kube, cluster):
    assert not pykube.Namespace.objects(kube).filter(field_selector={"metadata.name": "left-behind"})
    assert not pykube.ConfigMap.objects(kube, namespace="default").filter(
        field_selector={"metadata.name": "left"}
    )
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`envtest …` as this interpreter runs it (never PATH's: CI runs without the venv on it)."""
    argv = [sys.executable, "-m", "envtest.cli", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=LOCAL(300))


@pytest.fixture(autouse=True)
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


@pytest.mark.parametrize("reset", ["module", "none"])
def test_each_module_begins_on_the_plane_as_the_session_began(pytester: pytest.Pytester, reset: str) -> None:
    pytester.makepyfile(test_a_makes=MAKES, test_b_finds=FINDS_NONE)
    result = pytester.runpytest_subprocess("--envtest-components=minimal", f"--envtest-reset={reset}")
    if reset == "module":
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["*plane reset before test_b_finds.py: * deleted*"])
        result.stdout.fnmatch_lines(["envtest: backend=local *reset=module*"])  # the report header
    else:  # the same files without the reset: what module a made is still there
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["FAILED test_b_finds.py::test_finds_none_of_it*"])
        result.stdout.fnmatch_lines([">*assert not pykube.Namespace*left-behind*", "E*AssertionError*"])


WRITER = """
import threading, pykube, pykube.exceptions, pytest

@pytest.fixture(scope="session")
def writer(kube):
    stop, writing = threading.Event(), threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            try:  # a slow answer (429, 5xx) on a loaded machine must not end the writing
                pykube.ConfigMap(kube, {"metadata": {"name": f"w{i}", "namespace": "default"}}).create()
            except pykube.exceptions.HTTPError:
                pass
            writing.set()
            i += 1

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    assert writing.wait(60)
    yield
    stop.set()
    thread.join()
"""


def test_a_reset_that_cannot_finish_fails_every_test_of_the_module(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(WRITER)
    pytester.makepyfile(
        test_a_starts="def test_starts_writing(writer): pass",
        test_b_never_clean="def test_one(cluster): pass\ndef test_two(cluster): pass",
    )
    result = pytester.runpytest_subprocess("--envtest-components=minimal", "--envtest-reset=module")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        ["*envtest_reset = module: resetting the plane failed: the plane kept changing*configmaps/default/w*"]
    )


def test_a_reset_with_keep_under_xdist_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess("-n", "2", "--envtest-keep", "--envtest-reset=module")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--envtest-reset=module with --envtest-keep and -n: the workers would share*"]
    )


def test_with_xdist_each_worker_resets_a_plane_of_its_own(pytester: pytest.Pytester) -> None:
    port_file = """
import os

def test_port(cluster):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    open(f"{{worker}}-{name}.port", "w").write(cluster.server.rsplit(":", 1)[1])
"""
    pytester.makepyfile(**{f"test_{n}": port_file.format(name=n) for n in ("one", "two", "three", "four")})
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadfile", "--envtest-components=minimal", "--envtest-reset=module"
    )
    result.assert_outcomes(passed=4)
    ports: dict[str, set[str]] = {}
    for seen in pytester.path.glob("*.port"):
        ports.setdefault(seen.name.split("-")[0], set()).add(seen.read_text())
    assert len(ports) == 2, "both workers should have run tests"
    assert all(len(p) == 1 for p in ports.values()), ports
    assert len(set.union(*ports.values())) == 2, f"the workers shared a plane: {ports}"


def test_a_reset_on_another_backend_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess("--envtest-backend=existing", "--envtest-reset=module")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--envtest-reset=module*needs the local backend, not existing*"])


def test_envtest_reset_puts_a_kept_plane_back_and_mark_moves_the_point(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "KUBEBUILDER_ASSETS": str(binaries.cache_dir()),  # the real binaries; only state is temporary
    }

    def envtest(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli(*args, "--name", "resettable", env=env)

    up = envtest("up", "--components", "minimal")
    assert up.returncode == 0, up.stderr
    try:
        kubeconfig = Path(up.stdout.strip().split("=", 1)[1])
        kube = Cluster.new_pykube_from(kubeconfig)
        import pykube

        def namespaces() -> set[str]:
            return {ns.name for ns in pykube.Namespace.objects(kube)}

        pykube.Namespace(kube, {"metadata": {"name": "made-before-mark"}}).create()
        reset = envtest("reset")
        assert reset.returncode == 0, reset.stderr
        assert "resettable: reset: 1 object deleted, 0 restored" in reset.stderr, reset.stderr
        assert "made-before-mark" not in namespaces()

        pykube.Namespace(kube, {"metadata": {"name": "kept"}}).create()
        mark = envtest("reset", "--mark")
        assert mark.returncode == 0, mark.stderr
        pykube.Namespace(kube, {"metadata": {"name": "dropped"}}).create()
        assert envtest("reset").returncode == 0
        assert {"kept"} <= namespaces() and "dropped" not in namespaces()
    finally:
        down = envtest("down")
    assert down.returncode == 0, down.stderr
    missing = envtest("reset")
    assert missing.returncode == 1 and "no running control plane named 'resettable'" in missing.stderr


OTHER_RUN = """
from envtest import runs

def test_another_live_run_records_itself(cluster):
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "otherrun-main", "labels": runs.labels("otherrun", "main")},
        "spec": {"holderIdentity": runs.holder_identity()},  # this process: alive while the run lasts
    }
    url = f"{cluster.server}/apis/coordination.k8s.io/v1/namespaces/{runs.RECORDS_NAMESPACE}/leases"
    assert cluster.session.post(url, json=lease, timeout=10).status_code == 201
"""


def test_a_reset_refuses_a_kept_plane_another_live_run_uses(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the kept plane's state: this test's
    pytester.makepyfile(test_a_other=OTHER_RUN, test_b_kept="def test_b(cluster): pass")
    keep = ["--envtest-keep", "--envtest-cluster-name=resetkept", "--envtest-components=minimal"]
    try:
        result = pytester.runpytest_subprocess(*keep, "--envtest-reset=module")
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*another run uses this kept plane*otherrun/main (process * runs)*"])
    finally:
        down = _cli("down", "--name", "resetkept")
    assert down.returncode == 0, down.stderr
