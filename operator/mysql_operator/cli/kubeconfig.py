"""Where the operator's identity comes from: a kubeconfig file, or the pod's ServiceAccount.

Bad input here (no file, a context it lacks, a file that does not parse) is a `UsageError` naming the
file and what is wrong: the command line reports it in one line and exits 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pykube
import yaml

from .credentials import TokenFile, in_cluster


class UsageError(Exception):
    """Bad input from the command line or its files; the message names what is wrong."""


def load_config(kubeconfig: str | None, context: str | None) -> pykube.KubeConfig:
    """--kubeconfig, else the in-cluster ServiceAccount, else $KUBECONFIG or ~/.kube/config."""
    if kubeconfig:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise UsageError(f"kubeconfig {kubeconfig}: no such file")
        try:
            config = pykube.KubeConfig.from_file(str(path))
        except (OSError, yaml.YAMLError, pykube.exceptions.PyKubeError) as exc:
            raise UsageError(f"kubeconfig {path}: cannot read it: {one_line(exc)}") from exc
        source = str(path)
    else:
        try:
            config = pykube.KubeConfig.from_env()
        except (OSError, KeyError, yaml.YAMLError, pykube.exceptions.PyKubeError) as exc:
            raise UsageError(
                f"no kubeconfig: not in a cluster, and {one_line(exc)}; pass --kubeconfig or set KUBECONFIG"
            ) from exc
        source = str(config.filepath or "in-cluster service account")
    try:
        if context:
            if context not in config.contexts:
                known = ", ".join(sorted(config.contexts)) or "none"
                raise UsageError(f"kubeconfig {source}: no context {context!r} (contexts: {known})")
            config.set_current_context(context)
        # Resolve the context now, so a broken file fails here and not in a worker thread.
        _ = config.cluster["server"], config.user
    except UsageError:
        raise
    except KeyError as exc:
        raise UsageError(f"kubeconfig {source}: invalid: missing {exc}") from exc
    except Exception as exc:  # pykube raises TypeError/PyKubeError/... on malformed files
        raise UsageError(f"kubeconfig {source}: invalid: {one_line(exc)}") from exc
    return config


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def client_factory(config: pykube.KubeConfig) -> Callable[[], pykube.HTTPClient]:
    """New clients on `config`; in a pod, each re-reads the rotating ServiceAccount token."""
    if not in_cluster(config):
        return lambda: pykube.HTTPClient(config)
    token = TokenFile(config)
    return lambda: token.install(pykube.HTTPClient(config))
