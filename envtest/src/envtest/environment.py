"""Every environment variable the harness reads, in one place: name → what it does.

A variable spelled wrong would otherwise be ignored without a word (controller-runtime's envtest has
the same problem); the pytest plugin and the CLI refuse an unknown `ENVTEST_*` name and name the
closest known one. The documentation's configuration reference is generated from this table
(docs/hooks/configref.py; tests/unit/test_configuration_reference.py).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

from envtest.errors import UsageProblem

VARIABLES: dict[str, str] = {
    "ENVTEST_K8S_VERSION": "Kubernetes version selector: 1.36, 1.36.x, 1.36.4, latest, latest-on-disk",
    "ENVTEST_OFFLINE": "1: no release downloads, build the binaries with go straight away",
    "ENVTEST_KWOK_STAGES": "directory of kwok Stage YAMLs to use instead of the installed ones",
    "ENVTEST_K8S_RELEASE_URL": "mirror of the Kubernetes release downloads",
    "ENVTEST_ETCD_RELEASE_URL": "mirror of the etcd release downloads",
    "ENVTEST_KWOK_RELEASE_URL": "mirror of the kwok release downloads",
    "ENVTEST_KWOK_API_URL": "mirror of the kwok release API (its checksums)",
    "ENVTEST_KIND_IMAGE": "kind node image (default: the pinned one, else the offline one if built)",
    "ENVTEST_DEBIAN_MIRROR": "Debian mirror for `envtest kind image build` (default: debootstrap's)",
    "ENVTEST_WEBHOOK_HOST": "address at which the apiserver reaches webhook servers on this host",
    "ENVTEST_TIMEOUT_SCALE": "factor for the `timeouts` fixture (default: 1 local, 4 existing, 6 kind)",
    "ENVTEST_RUN_ID": "the run's id in labels (default: random); lets CI name a run it may sweep later",
    "ENVTEST_TIMINGS": "file to which fixtures append their durations as JSON lines (benchmarks)",
    "ENVTEST_PLANE_TEMPLATE": "0 (or false, no, off): local planes start without a plane template",
}
"""Also read, as controller-runtime's envtest reads them: KUBEBUILDER_ASSETS and TEST_ASSET_<NAME>."""

FOREIGN = {"ENVTEST_ASSETS_DIR"}
"""Other tools' ENVTEST_* names (operator-sdk's Makefiles export this one): not ours, not a typo."""

PREFIX = "ENVTEST_"


def check(environ: Mapping[str, str] | None = None) -> None:
    """UsageProblem naming every unknown `ENVTEST_*` variable and the closest known name."""
    environ = os.environ if environ is None else environ
    known = VARIABLES.keys() | FOREIGN
    unknown = sorted(name for name in environ if name.startswith(PREFIX) and name not in known)
    if unknown:
        raise UsageProblem("; ".join(_unknown(name) for name in unknown))


def _unknown(name: str) -> str:
    close = difflib.get_close_matches(name, VARIABLES, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(VARIABLES)}"
    return f"unknown environment variable {name}: {hint}"
