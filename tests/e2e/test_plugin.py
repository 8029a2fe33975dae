"""The pytest plugin tested the way its users run it: pytester runs small test files in a subprocess
against real control planes, and we check outcomes and what was left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mysqlkit import Timeouts

from envtest import binaries, eventually

# kwok-driven pods, private planes or local binaries: skipped on other backends.
pytestmark = pytest.mark.envtest_local

LOCAL = Timeouts("local")
"""Every test here runs local planes of its own (pytester), whatever the backend of this run."""

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _real_binary_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester moves HOME, and with it ~/.cache: point the inner runs at the binaries we have.
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries.cache_dir()))
    monkeypatch.setenv("ENVTEST_KWOK_STAGES", str(binaries.kwok_stages_dir()))


def _pids_under(path: Path) -> set[str]:
    out = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True, timeout=LOCAL(30)).stdout
    return set(out.split())


def test_xdist_workers_share_one_control_plane_and_none_is_left(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"  # the inner run's temporary folders (TMPDIR): none may outlive it
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    pytester.makepyfile(
        test_shared="""
        import os, pytest

        @pytest.mark.parametrize("i", range(4))
        def test_sees_plane(i, cluster, namespace, kube):
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with open(f"{cluster.server.split(':')[-1]}-{worker}-{i}.seen", "w") as fh:
                fh.write(namespace)
            import pykube
            assert pykube.Namespace.objects(kube).get(name=namespace).exists()
        """
    )
    basetemp = pytester.path / "base"
    result = pytester.runpytest_subprocess(
        "-n", "2", "--envtest-components=minimal", f"--basetemp={basetemp}"
    )
    result.assert_outcomes(passed=4)
    seen = list(pytester.path.glob("*.seen"))
    assert len(seen) == 4
    assert len({p.name.split("-")[0] for p in seen}) == 1, f"more than one apiserver port: {seen}"
    assert len({p.name.split("-")[1] for p in seen}) == 2, "both workers should have run tests"
    assert len({p.read_text() for p in seen}) == 4, "each test gets its own namespace"
    log = (basetemp / "envtest-shared" / "supervisor.log").read_text()
    assert log.count("starting kube-apiserver") == 1
    # A worker's stdout never reaches the terminal: its progress goes to the inherited stderr.
    result.stderr.fnmatch_lines(["envtest: starting a control plane*"])
    assert not _pids_under(basetemp), "control-plane processes outlived the run"
    assert not list(scratch.iterdir()), "a worker left temporary files behind"


def test_what_a_sigkilled_session_left_is_removed_when_the_next_one_starts(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGKILL runs no exit handler: the plane's processes die with their parent (PDEATHSIG), but
    # its workdir (the CA's and the admin's keys, etcd's data), the session's kubeconfig folder and
    # pykube-ng's key files stay in the temporary directory until the next session starts.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    pytester.makepyfile(
        test_killed="""
        import os, signal

        def test_killed(cluster, namespace, kube):
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    killed = pytester.runpytest_subprocess("--envtest-components=minimal", "-p", "no:cacheprovider")
    assert killed.ret == -9, killed.stdout.str()[-2000:]
    left = sorted(p.name for p in scratch.glob("envtest-*"))
    assert any(name.startswith("envtest-pems-") for name in left), left
    assert any(name.startswith("envtest-ambient-") for name in left), left
    assert [n for n in left if not n.startswith(("envtest-pems-", "envtest-ambient-"))], (
        f"no plane workdir: {left}"
    )
    following = pytester.runpytest_subprocess(
        "--envtest-components=minimal", "-p", "no:cacheprovider", "-k", "nothing_here"
    )
    following.stdout.fnmatch_lines(["*1 deselected*"])
    assert not sorted(scratch.glob("envtest-*")), "the next session left what the killed one left"


def test_kind_plugin_options_are_reused_not_registered_twice(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real pytest-kind-ng (the `[kind]` extra, installed by `make setup`): its pytest11 entry
    # point registers --cluster-name, --keep-cluster, ... in the same run as our plugin.
    if os.environ.get("CI") == "true":
        import pytest_kind  # noqa: F401  (under CI a missing extra fails, it does not skip)
    else:
        pytest.importorskip("pytest_kind")
    pytester.makepyfile(
        test_kept="""
        def test_uses_cluster(cluster):
            assert cluster.server.startswith("https://127.0.0.1:")
        """,
    )
    helpresult = pytester.runpytest_subprocess("--help")
    assert helpresult.ret == 0
    helpresult.stdout.fnmatch_lines(["*--envtest-keep*", "*--keep-cluster*"])
    env_cache = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(env_cache))
    state_dir = env_cache / "envtest" / "clusters" / "kept"
    try:
        # The kind plugin's --keep-cluster and --cluster-name are honoured by the local backend too.
        result = pytester.runpytest_subprocess(
            "--keep-cluster", "--cluster-name=kept", "--envtest-components=minimal"
        )
        result.assert_outcomes(passed=1)
        # The printed stop command names this interpreter, not an `envtest` that may not be on PATH.
        down_command = f"{sys.executable} -m envtest.cli down --name kept"
        result.stdout.fnmatch_lines(["*kept control plane 'kept'*", "*export KUBECONFIG=*"])
        assert f"`{down_command}`" in result.stdout.str()
        assert _pids_under(state_dir), "the kept plane should still run"
    finally:
        # Never PATH: `make test` and CI run without the virtualenv's bin on it.
        down = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "down", "--name", "kept"],
            capture_output=True,
            text=True,
            timeout=LOCAL(120),
        )
    assert down.returncode == 0, down.stderr

    def gone() -> None:
        assert not _pids_under(state_dir)

    eventually(gone, timeout=LOCAL(30))


def test_kept_plane_reused_with_other_settings_is_a_usage_error_naming_them(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    pytester.makepyfile(test_kept="def test_uses_cluster(cluster):\n    assert cluster.server\n")
    keep = ["--envtest-keep", "--envtest-cluster-name=reuse", "--envtest-components=minimal"]
    try:
        first = pytester.runpytest_subprocess(*keep)
        first.assert_outcomes(passed=1)
        second = pytester.runpytest_subprocess(*keep, "--envtest-job-pods=hold")
        second.assert_outcomes(errors=1)
        second.stdout.fnmatch_lines(["*job_pods: running complete, asked for hold*"])
        assert f"{sys.executable} -m envtest.cli down --name reuse" in second.stdout.str()
        # The same settings reuse it (CRDs are applied again, none configured here).
        pytester.runpytest_subprocess(*keep).assert_outcomes(passed=1)
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "envtest.cli", "down", "--name", "reuse"],
            capture_output=True,
            text=True,
            timeout=LOCAL(120),
        )
    assert "reuse: stopped" in down.stderr, down.stderr


def test_bad_option_value_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess("--envtest-backend=docker")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--envtest-backend*'docker' is not one of local, existing, kind*"])
    result = pytester.runpytest_subprocess("--envtest-components=etcd,kubelet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown component*kubelet*"])


def test_failed_test_leaves_objects_events_and_logs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fails="""
        import pykube

        def test_fails_on_purpose(kube, namespace):
            pykube.ConfigMap(kube, {"metadata": {"name": "evidence", "namespace": namespace},
                                    "data": {"k": "v"}}).create()
            assert False, "failing on purpose"
        """
    )
    result = pytester.runpytest_subprocess("--envtest-components=minimal", "--envtest-artifacts-dir=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*envtest artifacts*", "*out*test_fails.py-test_fails_on_purpose*"])
    dest = pytester.path / "out" / "test_fails.py-test_fails_on_purpose"
    (ns_dir,) = [p for p in dest.iterdir() if p.is_dir() and p.name not in ("logs", "record")]
    assert "evidence" in (ns_dir / "configmaps.api_v1.yaml").read_text()
    assert (ns_dir / "events.txt").exists()
    assert (dest / "logs" / "kube-apiserver.log").stat().st_size > 0
    assert (dest / "logs" / "etcd.log").exists()


def test_operator_crash_fails_the_test_that_owns_it(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        envtest_operator = crashing:factory
        envtest_operator_clusterrole = system:aggregate-to-view
        """
    )
    pytester.makepyfile(
        crashing="""
        import time
        from envtest import ThreadOperator

        def factory(api_factory, namespace):
            def run(stop):
                api = api_factory()
                # The operator really runs as its ServiceAccount, with read-only rights.
                resp = api.session.get(f"{api.url}/api/v1/namespaces/{namespace}/configmaps")
                assert resp.status_code == 200, resp.text
                resp = api.session.post(f"{api.url}/api/v1/namespaces/{namespace}/configmaps",
                                        json={"metadata": {"name": "x"}})
                assert resp.status_code == 403, resp.text
                raise RuntimeError("operator blew up")
            return ThreadOperator(run)
        """,
        test_crash="""
        import time

        def test_with_crashing_operator(operator):
            time.sleep(1)
        """,
    )
    result = pytester.runpytest_subprocess("--envtest-components=minimal")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*OperatorFailed: operator crashed: RuntimeError: operator blew up*"])
