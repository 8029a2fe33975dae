"""The plugin's settings: every command-line option is `--envtest-<name>` with an ini twin
`envtest_<name>`; the command line beats the ini file, which beats the default.

pytest-kind-ng (the optional `[kind]` extra) registers `--cluster-name`, `--keep-cluster`,
`--kubeconfig`, `--kind-image`, `--kind-bin` and `--kind-kubectl-bin` itself; registering any of
them again stops pytest, so we never do: when that plugin is present its values are read too.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from envtest.errors import ConfigError, UsageProblem
from envtest.plugin import recording
from envtest.record import hotloop

BACKENDS = ("local", "existing", "kind")
JOB_PODS = ("complete", "hold")
ON_OFF = ("true", "false")
OPERATOR_SCOPES = ("namespace", "cluster")
RESETS = ("none", "module")


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
        "Kubernetes version of the local control plane (kind: the node image's minor): 1.36, 1.36.x, "
        "~1.36.2, 1.36.2, latest or latest-on-disk (default: ENVTEST_K8S_VERSION, else latest)",
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
    _Opt(
        "pod-streams",
        "local plane: kwok serves logs, exec, attach and port-forward for fake pods (false: no server)",
        "true",
        ON_OFF,
    ),
    _Opt(
        "pod-exec",
        "local plane: true runs `kubectl exec` on fake pods as a command on this host in every namespace; "
        "false allows it only in tests that ask (the fake_pods fixture, @pytest.mark.envtest_pod_exec), "
        "elsewhere exec fails naming the pod",
        "false",
        ON_OFF,
    ),
    _Opt(
        "operator-scope",
        "namespace: each test's operator watches its namespace, tests share the cluster; cluster: "
        "every test runs alone with its operator bound and watching cluster-wide (as the "
        "envtest_clusterwide marker does for one test)",
        "namespace",
        OPERATOR_SCOPES,
    ),
    _Opt(
        "reset",
        "local plane: module puts the plane back to how the session began (its CRDs and RBAC in place) "
        "before each test module, in place and in about 0.1 s; with -n N each worker then starts a "
        "plane of its own",
        "none",
        RESETS,
    ),
    _Opt("keep", "keep the cluster after the run (state under ~/.cache/envtest/clusters/<name>)", flag=True),
    _Opt("cluster-name", "name of a kept local plane or of the kind cluster", "envtest"),
    _Opt("kubeconfig", "kubeconfig of the existing backend (default: KUBECONFIG, ~/.kube/config)"),
    _Opt("context", "kubeconfig context of the existing backend"),
    _Opt("artifacts-dir", "where failed tests leave objects, events and logs", "artifacts"),
    _Opt("kind-image", "node image of a kind cluster this run creates (default: ENVTEST_KIND_IMAGE, pinned)"),
    _Opt(
        "record",
        "the operator's requests, read from kube-apiserver's audit log: into the artifacts of failed "
        "tests, of all tests, or off (no audit log at all); hot loops and the RBAC report need it",
        "failed",
        recording.MODES,
    ),
)
# ini-only keys: (name, type, help)
INI_ONLY = (
    ("envtest_crds", "paths", "CRD files or directories installed once per session"),
    ("envtest_operator", "string", "operator factory as package.module:callable"),
    (
        "envtest_operator_rbac",
        "paths",
        "the operator's RBAC manifests: ClusterRoles applied once per session, Roles in each test namespace",
    ),
    ("envtest_operator_clusterrole", "string", "ClusterRole bound to the operator's ServiceAccount"),
    ("envtest_operator_cli", "string", "command that attaches the operator to a kept cluster"),
    (
        "envtest_operator_loggers",
        "args",
        "capture only these loggers (at DEBUG) into the operator log (default: every logger but envtest's)",
    ),
    (
        "envtest_conversion_webhook",
        "string",
        "conversion server factory as package.module:callable, one endpoint per plane or run",
    ),
    (
        "envtest_conversion_path",
        "string",
        "path of the conversion endpoint on that server (default /convert)",
    ),
    (
        "envtest_record_bodies",
        "bool",
        "the record keeps request and response bodies of the operator's requests (never of Secrets, "
        "tokens or token reviews; default false: metadata only)",
    ),
    (
        "envtest_hotloop_writes",
        "string",
        f"HotLoop: writes of one object by the operator with no other user's write in between, above "
        f"which the test warns (default {hotloop.Limits.writes})",
    ),
    (
        "envtest_hotloop_rate",
        "string",
        f"HotLoop: requests per second by the operator on one object, over {hotloop.WINDOW:.0f} s, above "
        f"which the test warns (default {hotloop.Limits.rate:g})",
    ),
)
# Options of pytest-kind-ng we honour but never register: our name → its dest.
KIND_PLUGIN_DESTS = {
    "keep": "keep_cluster",
    "kubeconfig": "kubeconfig",
    "cluster-name": "cluster_name",
    "kind-image": "kind_image",
}


def _plugin_value(config: pytest.Config, dest: str) -> Any:
    """pytest-kind-ng's option `dest` if the user gave it, else None: its defaults (`--cluster-name`
    is `pytest-kind`) must not beat our ini and defaults just because the extra is installed."""
    value = config.getoption(dest, default=None)
    for group in config._parser._groups:  # pytest keeps no "was this given" flag; compare to the default
        for option in group.options:
            if option.dest == dest and value == getattr(option, "default", None):
                return None
    return value or None


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
        # default=None, applied in _value: getini() tells "not set" apart, for configured().
        parser.addini(dest, opt.help, type="bool" if opt.flag else "string", default=None)
    for name, type_, help_ in INI_ONLY:
        parser.addini(name, help_, type=type_, default=None)  # type: ignore[arg-type]


def configured(config: pytest.Config) -> bool:
    """Whether the project uses the plugin: any `envtest_*` ini key set (-o included) or any
    `--envtest-*` option given. An unconfigured project pays for nothing but the prefixed fixtures."""
    dests = ["envtest_" + opt.name.replace("-", "_") for opt in OPTIONS]
    if any(config.getoption(dest, default=None) is not None for dest in dests):
        return True
    if any(config.getini(name) is not None for name in [*dests, *(n for n, _, _ in INI_ONLY)]):
        return True
    # Keys other parts of the plugin register (envtest_webhook_host, …): any set in the config file.
    raw = getattr(config, "_inicfg", None)  # pytest 9 deprecates the public `inicfg`
    return any(str(key).startswith("envtest_") for key in (raw if raw is not None else config.inicfg))


def ini_keys() -> list[str]:
    """Every ini key of the plugin (the webhook host's included)."""
    from envtest.plugin.endpoint import HOST_INI

    return (
        ["envtest_" + opt.name.replace("-", "_") for opt in OPTIONS]
        + [n for n, _, _ in INI_ONLY]
        + [HOST_INI]
    )


def check_unknown(config: pytest.Config) -> None:
    """An `envtest_*` ini key or `ENVTEST_*` variable the plugin does not know is a usage error naming
    the closest known one: a typo would otherwise be ignored, and the run would test something else."""
    import difflib

    from envtest import environment

    known = ini_keys()
    raw = getattr(config, "_inicfg", None)  # pytest 9 deprecates the public `inicfg`
    set_keys = [str(k) for k in (raw if raw is not None else config.inicfg)]
    problems = []
    for key in sorted(k for k in set_keys if k.startswith("envtest_") and k not in known):
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        problems.append(
            f"unknown ini key {key}: " + (f"did you mean {close[0]}?" if close else "see the docs")
        )
    try:
        environment.check()
    except UsageProblem as exc:
        problems.append(str(exc))
    if problems:
        raise UsageProblem("; ".join(problems))


def _value(config: pytest.Config, opt: _Opt) -> Any:
    dest = "envtest_" + opt.name.replace("-", "_")
    value = config.getoption(dest)
    if value is None and opt.name in KIND_PLUGIN_DESTS:
        value = _plugin_value(config, KIND_PLUGIN_DESTS[opt.name])
    if value is None:
        value = config.getini(dest)
    if value is None:
        value = opt.default if not opt.flag else False
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
    """Empty: every record logged in the process while the operator runs (envtest's aside)."""
    kind_image: str | None = None
    """None: ENVTEST_KIND_IMAGE, else the pinned node image (resolved by envtest.kind)."""
    kind_bin: Path | None = None
    """pytest-kind-ng's --kind-bin; None: kind on PATH, else built (envtest.binaries.kind)."""
    conversion_webhook: str | None = None
    """``package.module:factory`` of the plane's conversion server (see envtest.webhooks.conversion)."""
    conversion_path: str = "/convert"
    """Path of the conversion endpoint on that server; the CRDs' clientConfig URL ends with it."""
    pod_streams: bool = True
    """Local plane: logs/exec/attach/port-forward on fake pods (ControlPlane's pod_streams)."""
    operator_scope: str = "namespace"
    """`cluster`: every test in cluster-wide mode (see envtest.plugin.isolation)."""
    pod_exec: bool = False
    """Local plane, with pod_streams: exec runs commands on this host in every namespace (False: in
    the namespaces of tests that ask for it; see envtest.plane.streams)."""
    record: recording.RecordSettings = field(default_factory=recording.RecordSettings)
    """The record: mode, bodies, hot-loop limits (envtest.plugin.recording)."""
    reset: str = "none"
    """`module`: the local plane is reset to the session's start before each test module."""

    def header(self) -> str:
        from envtest import binaries

        if self.backend == "local":
            where = f"k8s v{self.version or binaries.k8s_version()} components={','.join(self.components)}"
        elif self.backend == "existing":
            where = f"kubeconfig={self.kubeconfig or 'KUBECONFIG'}"
        else:
            where = f"cluster={self.cluster_name}"
        reset = f" reset={self.reset}" if self.reset != "none" else ""
        return f"envtest: backend={self.backend} {where}{reset}" + (" (kept)" if self.keep else "")

    def operator_factory(self) -> Callable[..., Any] | None:
        if not self.operator:
            return None
        module, _, attr = self.operator.partition(":")
        if not module or not attr:  # no default name: a factory is whatever the project calls it
            raise UsageProblem(f"envtest_operator = {self.operator!r}: use package.module:factory")
        try:
            return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
        except (ImportError, AttributeError) as exc:
            raise UsageProblem(f"envtest_operator = {self.operator!r}: cannot import: {exc}") from exc


def _check_conversion(spec: str | None, backend: str, host: str | None) -> None:
    """Import the factory now: a typo is a usage error before any plane starts, not a supervisor
    that dies in the background with the reason only in its log. On an existing cluster only the
    user knows the address its apiserver reaches us at; without it the CRDs could not convert."""
    if not spec:
        return
    if backend == "existing" and not host:
        from envtest.plugin.endpoint import missing_host

        raise UsageProblem(f"envtest_conversion_webhook: {missing_host(backend)}")
    from envtest.webhooks.conversion import load_factory

    try:
        load_factory(spec)
    except ConfigError as exc:
        raise UsageProblem(f"envtest_conversion_webhook = {exc}") from None


def _check_reset(config: pytest.Config, reset: str, backend: str, keep: bool) -> None:
    """A reset writes to the plane's etcd and wipes what everyone else made: only a local plane
    this run's processes do not share with one another."""
    if reset == "none":
        return
    if backend != "local":
        raise UsageProblem(
            f"--envtest-reset={reset} (ini envtest_reset): needs the local backend, not {backend} "
            "(a reset writes to the plane's etcd)"
        )
    xdist = hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", None))
    if keep and xdist:
        raise UsageProblem(
            f"--envtest-reset={reset} with --envtest-keep and -n: the workers would share the kept plane "
            "and reset it under each other's tests; run with -n 0 or without --envtest-keep"
        )


def _check_version(version: str | None) -> str:
    """The exact release the selector `version` names (`1.36`, `latest`, …: envtest.binaries.versions;
    None: ENVTEST_K8S_VERSION, else the newest pin), resolved once here so every part of the run
    (header, plane, kept-plane check) sees the same one even for `latest-on-disk`. A selector the
    resolver refuses is a usage error now, not a crash in the report header or a failed first test;
    the message names its source and lists the supported minors."""
    from envtest.binaries.resolver import k8s_version
    from envtest.errors import ConfigError

    try:
        # None: checks ENVTEST_K8S_VERSION, and the message names it
        exact = k8s_version(version, source="--envtest-k8s-version (ini envtest_k8s_version)")
    except ConfigError as exc:
        raise UsageProblem(str(exc)) from None
    return exact


def _limit(config: pytest.Config, key: str, kind: type[int] | type[float], default: float) -> float:
    raw = config.getini(key)
    if raw in (None, ""):
        return default
    try:
        value = kind(str(raw).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageProblem(f"ini {key} = {raw!r}: give a {kind.__name__} above 0 (default {default:g})")
    return value


def _record(config: pytest.Config, mode: str) -> recording.RecordSettings:
    limits = hotloop.Limits(
        writes=int(_limit(config, "envtest_hotloop_writes", int, hotloop.Limits.writes)),
        rate=_limit(config, "envtest_hotloop_rate", float, hotloop.Limits.rate),
    )
    return recording.RecordSettings(mode, bool(config.getini("envtest_record_bodies")), limits)


def resolve(config: pytest.Config) -> Settings:
    from envtest.errors import ConfigError
    from envtest.plane.controlplane import parse_components

    values = {opt.name: _value(config, opt) for opt in OPTIONS}
    try:
        components = parse_components(values["components"] or "all")
    except ConfigError as exc:
        raise UsageProblem(f"--envtest-components: {exc}") from None
    version = _check_version(values["k8s-version"])
    root = config.rootpath
    kubeconfig = values["kubeconfig"]
    if values["backend"] == "existing" and not kubeconfig:
        # Read now: from pytest_configure on, the plugin points KUBECONFIG at the session's cluster
        # (envtest.plugin.pointing), which for this backend is the one named here.
        kubeconfig = os.environ.get("KUBECONFIG") or "~/.kube/config"
    loggers = tuple(config.getini("envtest_operator_loggers") or ())
    operator = config.getini("envtest_operator") or None
    _check_reset(config, values["reset"], values["backend"], bool(values["keep"]))
    conversion = config.getini("envtest_conversion_webhook") or None
    if conversion:
        from envtest.plugin.endpoint import explicit_host

        _check_conversion(conversion, values["backend"], explicit_host(config))
    return Settings(
        backend=values["backend"],
        version=version,
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
        operator_loggers=loggers,
        kind_image=values["kind-image"],
        kind_bin=Path(kind_bin).expanduser() if (kind_bin := _plugin_value(config, "kind_bin")) else None,
        conversion_webhook=conversion,
        conversion_path=config.getini("envtest_conversion_path") or "/convert",
        pod_streams=values["pod-streams"] == "true",
        pod_exec=values["pod-exec"] == "true",
        operator_scope=values["operator-scope"],
        record=_record(config, values["record"]),
        reset=values["reset"],
    )
