"""The plugin's settings: every command-line option is `--envtest-<name>` with an ini twin
`envtest_<name>`; the command line beats the ini file, which beats the default.

pytest-kind-ng (the optional `[kind]` extra) registers `--cluster-name`, `--keep-cluster`,
`--kubeconfig`, `--kind-image`, `--kind-bin` and `--kind-kubectl-bin` itself; registering any of
them again stops pytest, so we never do: when that plugin is present its values are read too.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envtest.errors import UsageProblem

BACKENDS = ("local", "existing", "kind")
JOB_PODS = ("complete", "hold")


@dataclass(frozen=True)
class _Opt:
    name: str
    help: str
    default: str | None = None
    choices: tuple[str, ...] | None = None
    flag: bool = False


OPTIONS = (
    _Opt(
        "backend",
        "where tests run: local (control-plane processes), existing (a kubeconfig), kind",
        "local",
        BACKENDS,
    ),
    _Opt(
        "k8s-version",
        "Kubernetes version of the local control plane (default: ENVTEST_K8S_VERSION or pinned)",
    ),
    _Opt(
        "components",
        "local components: 'all', 'minimal' or a comma list of etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok",
        "all",
    ),
    _Opt(
        "job-pods",
        "kwok and Job pods: complete them, or hold them Running for the test to finish",
        "complete",
        JOB_PODS,
    ),
    _Opt("keep", "keep the cluster after the run (state under ~/.cache/envtest/clusters/<name>)", flag=True),
    _Opt("cluster-name", "name of a kept local plane or of the kind cluster", "envtest"),
    _Opt("kubeconfig", "kubeconfig of the existing backend (default: KUBECONFIG, ~/.kube/config)"),
    _Opt("context", "kubeconfig context of the existing backend"),
    _Opt("artifacts-dir", "where failed tests leave objects, events and logs", "artifacts"),
)
# ini-only keys: (name, type, help)
INI_ONLY = (
    ("envtest_crds", "paths", "CRD files or directories installed once per session"),
    ("envtest_operator", "string", "operator factory as package.module:callable"),
    ("envtest_operator_rbac", "paths", "RBAC manifests (ClusterRoles) applied once per session"),
    ("envtest_operator_clusterrole", "string", "ClusterRole bound to the operator's ServiceAccount"),
    ("envtest_operator_cli", "string", "command that attaches the operator to a kept cluster"),
    ("envtest_operator_loggers", "args", "logger names captured into the operator log"),
)
# Options of pytest-kind-ng we honour but never register: our name → its dest.
KIND_PLUGIN_DESTS = {"keep": "keep_cluster", "kubeconfig": "kubeconfig", "cluster-name": "cluster_name"}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("envtest", "envtest: a real Kubernetes control plane for tests")
    for opt in OPTIONS:
        dest = "envtest_" + opt.name.replace("-", "_")
        if opt.flag:
            group.addoption(
                f"--envtest-{opt.name}", action="store_true", default=None, dest=dest, help=opt.help
            )
        else:
            group.addoption(
                f"--envtest-{opt.name}",
                default=None,
                dest=dest,
                help=opt.help + (f" (one of: {', '.join(opt.choices)})" if opt.choices else ""),
            )
        parser.addini(dest, opt.help, type="bool" if opt.flag else "string", default=opt.default)
    for name, type_, help_ in INI_ONLY:
        parser.addini(name, help_, type=type_)  # type: ignore[arg-type]


def _value(config: pytest.Config, opt: _Opt) -> Any:
    dest = "envtest_" + opt.name.replace("-", "_")
    value = config.getoption(dest)
    if value is None and opt.name in KIND_PLUGIN_DESTS:
        value = config.getoption(KIND_PLUGIN_DESTS[opt.name], default=None) or None
    if value is None:
        value = config.getini(dest)
    if opt.choices and value not in opt.choices:
        raise UsageProblem(
            f"--envtest-{opt.name} (ini {dest}): {value!r} is not one of {', '.join(opt.choices)}"
        )
    return value if value != "" else None


@dataclass(frozen=True)
class Settings:
    backend: str
    version: str | None
    components: tuple[str, ...]
    job_pods: str
    keep: bool
    cluster_name: str
    kubeconfig: Path | None
    context: str | None
    artifacts_dir: Path
    crds: list[Path] = field(default_factory=list)
    operator: str | None = None
    operator_rbac: list[Path] = field(default_factory=list)
    operator_clusterrole: str | None = None
    operator_cli: str | None = None
    operator_loggers: tuple[str, ...] = ()

    def header(self) -> str:
        from envtest import binaries

        if self.backend == "local":
            where = f"k8s v{self.version or binaries.k8s_version()} components={','.join(self.components)}"
        elif self.backend == "existing":
            where = f"kubeconfig={self.kubeconfig or 'KUBECONFIG'}"
        else:
            where = f"cluster={self.cluster_name}"
        return f"envtest: backend={self.backend} {where}" + (" (kept)" if self.keep else "")

    def operator_factory(self) -> Callable[..., Any] | None:
        if not self.operator:
            return None
        module, _, attr = self.operator.partition(":")
        try:
            return getattr(importlib.import_module(module), attr or "build_manager")  # type: ignore[no-any-return]
        except (ImportError, AttributeError) as exc:
            raise UsageProblem(f"envtest_operator = {self.operator!r}: cannot import: {exc}") from exc


def resolve(config: pytest.Config) -> Settings:
    from envtest.errors import ConfigError
    from envtest.plane.controlplane import parse_components

    values = {opt.name: _value(config, opt) for opt in OPTIONS}
    try:
        components = parse_components(values["components"] or "all")
    except ConfigError as exc:
        raise UsageProblem(f"--envtest-components: {exc}") from None
    root = config.rootpath
    kubeconfig = values["kubeconfig"]
    loggers = tuple(config.getini("envtest_operator_loggers") or ())
    operator = config.getini("envtest_operator") or None
    return Settings(
        backend=values["backend"],
        version=values["k8s-version"],
        components=components,
        job_pods=values["job-pods"],
        keep=bool(values["keep"]),
        cluster_name=values["cluster-name"],
        kubeconfig=Path(kubeconfig).expanduser() if kubeconfig else None,
        context=values["context"],
        artifacts_dir=root / values["artifacts-dir"],
        crds=list(config.getini("envtest_crds") or []),
        operator=operator,
        operator_rbac=list(config.getini("envtest_operator_rbac") or []),
        operator_clusterrole=config.getini("envtest_operator_clusterrole") or None,
        operator_cli=config.getini("envtest_operator_cli") or None,
        operator_loggers=loggers or ((operator.split(".")[0],) if operator else ()),
    )
