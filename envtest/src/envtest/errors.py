"""The exception root of envtest: every error the harness raises on purpose derives from EnvtestError."""

from __future__ import annotations


class EnvtestError(Exception):
    """Base of all envtest errors; catch this to handle any harness failure."""


class ConfigError(EnvtestError):
    """A setting (option, environment variable, file) has a bad value; the message names it."""


class BinaryNotFound(EnvtestError):
    """A control-plane binary could not be resolved or installed; the message lists what was tried."""


class InstallError(BinaryNotFound):
    """Downloading or building a binary failed."""


class ProcessError(EnvtestError):
    """A managed process exited unexpectedly or could not be started."""


class StartTimeout(ProcessError):
    """A managed process did not become ready in time; the message carries its log tail."""


class StopError(EnvtestError):
    """One or more components failed to stop; every failure is listed."""


class CRDError(EnvtestError):
    """A CRD file is invalid or the CRD did not become Established/served; the message names the file."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The apiserver's HTTP status when it refused the CRD; None for errors found before sending."""


class ExecPluginError(ConfigError):
    """A kubeconfig user's exec plugin failed or printed no usable credential; the message names the
    command, its exit status and stderr, and the plugin's install hint when it has one."""


class UsageProblem(ConfigError):
    """A bad pytest option, ini value or file named in them; the plugin turns it into pytest.UsageError."""


class OperatorFailed(EnvtestError):
    """The operator under test crashed (an exception escaped its threads) or would not stop."""


class EnvtestWarning(UserWarning):
    """Something a test left behind that the harness had to force (e.g. a stuck finalizer)."""


class FinalizerStuck(EnvtestWarning):
    """A test's custom resource kept its finalizers after teardown deleted it with the operator running."""


class ClusterScopedLeftover(EnvtestWarning):
    """Cluster-scoped custom resources appeared during a test that ran beside other workers' tests and
    could not be told apart from theirs: left for the end-of-run sweep instead of deleted at once."""


class HotLoop(EnvtestWarning):
    """A test's operator kept writing one object with nobody else changing it, or kept requeueing
    it faster than its limit (envtest.record.hotloop): the message names the object and the writes."""
