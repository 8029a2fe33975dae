"""The plugin in projects that did not ask for it, and in ones that configured it badly: pytest runs
in a subprocess (the way the pytest11 entry point loads it), without any cluster."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

HEAVY = ("envtest.plugin.session", "envtest.clusters", "envtest.binaries", "envtest.plane", "envtest.crds")


def test_unconfigured_project_gets_no_header_no_short_names_and_no_heavy_import(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        f"""
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))
            print("HEAVY:", loaded)
        """
    )
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_no_cluster_fixture(request):
            with pytest.raises(pytest.FixtureLookupError):
                request.getfixturevalue("cluster")
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    assert "envtest:" not in result.stdout.str(), "no report header"
    result.stdout.fnmatch_lines(["*HEAVY: []"])
    fixtures = pytester.runpytest_subprocess("--fixtures").stdout.str()
    assert "envtest_cluster [session scope]" in fixtures, "the prefixed fixtures are always there"
    assert "\ncluster [session scope]" not in fixtures
    assert "\nnamespace\n" not in fixtures


def test_configured_project_gets_header_and_short_names_but_its_own_fixture_wins(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nenvtest_job_pods = hold\n")
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def namespace():
            return "the-project's-own"
        """
    )
    pytester.makepyfile(
        test_own="""
        def test_own_namespace_wins(namespace):
            assert namespace == "the-project's-own"
        """
    )
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["envtest: backend=local k8s v* components=*"])
    fixtures = pytester.runpytest_subprocess("--fixtures").stdout.str()
    assert "cluster [session scope]" in fixtures.replace("envtest_cluster [session scope]", "")


@pytest.mark.parametrize(
    ("ini", "env", "message"),
    [
        ("envtest_crds = missing/crd\n", {}, "*envtest_crds: *missing/crd: no such file or directory*"),
        ("envtest_crds = bad.yaml\n", {}, "*envtest_crds: *bad.yaml: not valid YAML*"),
        ("envtest_job_pods = hold\n", {"ENVTEST_K8S_VERSION": "1.20"}, "*ENVTEST_K8S_VERSION='1.20'*"),
        ("envtest_job_pod = hold\n", {}, "*unknown ini key envtest_job_pod: did you mean envtest_job_pods?*"),
        ("envtest_job_pods = hold\n", {"ENVTEST_KIND_IMAGES": "x"}, "*did you mean ENVTEST_KIND_IMAGE?*"),
    ],
)
def test_configuration_mistakes_are_usage_errors_not_internal_errors(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini: str, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (pytester.path / "bad.yaml").write_text("kind: [unclosed")
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: " + message])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
