"""The plugin's settings as pytest parses them (no cluster): precedence, what counts as configured,
and configuration mistakes reported as usage errors that name the option or file."""

from __future__ import annotations

from pathlib import Path

import pytest

from envtest.errors import UsageProblem
from envtest.plugin import settings
from envtest.plugin.session import new_session

pytest_plugins = ["pytester"]


def _config(pytester: pytest.Pytester, ini: str, *args: str) -> pytest.Config:
    pytester.makeini("[pytest]\n" + ini)
    return pytester.parseconfig(*args)


def test_command_line_beats_ini_beats_default(pytester: pytest.Pytester) -> None:
    ini = "envtest_job_pods = hold\nenvtest_cluster_name = from-ini\n"
    s = settings.resolve(_config(pytester, ini, "--envtest-job-pods=complete"))
    assert s.job_pods == "complete"  # command line over ini
    assert s.cluster_name == "from-ini"  # ini over default
    assert s.components == settings.resolve(_config(pytester, "")).components  # default
    assert settings.resolve(_config(pytester, "")).job_pods == "complete"
    assert settings.resolve(_config(pytester, "")).artifacts_dir == pytester.path / "artifacts"


def test_flag_given_on_command_line_beats_ini_false(pytester: pytest.Pytester) -> None:
    assert settings.resolve(_config(pytester, "envtest_keep = false\n", "--envtest-keep")).keep is True
    assert settings.resolve(_config(pytester, "envtest_keep = true\n")).keep is True
    assert settings.resolve(_config(pytester, "")).keep is False


def test_unconfigured_project_is_not_configured(pytester: pytest.Pytester) -> None:
    config = _config(pytester, "addopts = -q\n")
    assert not settings.configured(config)


@pytest.mark.parametrize(
    ("ini", "args"),
    [("envtest_crds = crd\n", ()), ("", ("--envtest-backend=existing",)), ("", ("-o", "envtest_keep=true"))],
)
def test_any_envtest_key_or_option_configures_the_plugin(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...]
) -> None:
    config = _config(pytester, ini, *args)
    assert settings.configured(config)


def test_an_unknown_ini_key_is_a_usage_error_naming_the_closest(pytester: pytest.Pytester) -> None:
    config = _config(pytester, "envtest_crds = crd\nenvtest_operater = a.b:c\n")
    with pytest.raises(
        UsageProblem, match=r"unknown ini key envtest_operater: did you mean envtest_operator\?"
    ):
        settings.check_unknown(config)


def test_an_unknown_envtest_variable_is_a_usage_error_naming_the_closest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSON", "1.37.2")
    with pytest.raises(UsageProblem, match=r"ENVTEST_K8S_VERSON: did you mean ENVTEST_K8S_VERSION\?"):
        settings.check_unknown(_config(pytester, "envtest_crds = crd\n"))


def test_every_known_key_and_variable_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envtest import environment

    for name in environment.VARIABLES:
        monkeypatch.setenv(name, "x")
    ini = "".join(f"{key} =\n" for key in settings.ini_keys())
    settings.check_unknown(_config(pytester, ini))  # raises nothing


def test_envtest_k8s_version_malformed_is_a_usage_error_naming_the_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVTEST_K8S_VERSION", "newest")
    with pytest.raises(
        UsageProblem, match=r"ENVTEST_K8S_VERSION='newest': not a Kubernetes version selector"
    ):
        settings.resolve(_config(pytester, ""))
    monkeypatch.delenv("ENVTEST_K8S_VERSION")
    with pytest.raises(
        UsageProblem, match=r"--envtest-k8s-version .*'1\.20': Kubernetes 1\.20 is not supported"
    ):
        settings.resolve(_config(pytester, "", "--envtest-k8s-version=1.20"))


@pytest.mark.parametrize(
    ("ini", "files", "message"),
    [
        ("envtest_crds = nope\n", {}, r"envtest_crds: .*nope: no such file or directory"),
        (
            "envtest_crds = crd\n",
            {"crd/bad.yaml": "kind: [unclosed"},
            r"envtest_crds: .*bad\.yaml: not valid YAML",
        ),
        ("envtest_operator_rbac = rbac.yaml\n", {}, r"envtest_operator_rbac: .*rbac\.yaml: cannot read"),
    ],
)
def test_missing_or_invalid_files_are_usage_errors_naming_option_and_file(
    pytester: pytest.Pytester, ini: str, files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with pytest.raises(pytest.UsageError, match=message):
        new_session(_config(pytester, ini))


def test_rbac_roles_are_kept_for_test_namespaces_not_applied_at_session_start(
    pytester: pytest.Pytester,
) -> None:
    Path(pytester.path / "rbac.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: op}\nrules: []\n"
        "---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"
        "metadata: {name: leader, namespace: op-system}\n"
        "rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get]}]\n"
    )
    session = new_session(_config(pytester, "envtest_operator_rbac = rbac.yaml\n"))
    assert [d["kind"] for _, d in session._session_rbac] == ["ClusterRole"]
    assert [d["metadata"]["name"] for d in session.operator_roles] == ["leader"]
    assert session.operator_clusterrole() == "op"


def test_pod_streams_are_on_and_exec_everywhere_off_unless_asked(pytester: pytest.Pytester) -> None:
    default = settings.resolve(_config(pytester, ""))
    assert (default.pod_streams, default.pod_exec) == (True, False)
    on = settings.resolve(_config(pytester, "envtest_pod_exec = true\n"))
    assert (on.pod_streams, on.pod_exec) == (True, True)
    cli = settings.resolve(
        _config(
            pytester, "envtest_pod_exec = false\n", "--envtest-pod-streams=false", "--envtest-pod-exec=true"
        )
    )
    assert (cli.pod_streams, cli.pod_exec) == (False, True)


def test_a_pod_exec_value_other_than_true_or_false_is_a_usage_error(pytester: pytest.Pytester) -> None:
    with pytest.raises(
        UsageProblem, match=r"--envtest-pod-exec \(ini envtest_pod_exec\): 'off' is not one of true, false"
    ):
        settings.resolve(_config(pytester, "envtest_pod_exec = off\n"))
