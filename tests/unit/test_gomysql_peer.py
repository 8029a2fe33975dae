"""The Go peer (benchmarks/peers/gomysql) builds the reference's children, scripts included.

The live conformance check compares a running peer's children with the reference on a real plane;
this pins the Go peer's builders without one, for both engines and the specs the check does not create
(resources, storage class, time zone), through the peer's own `--print-children` mode.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from peer_specs import BUILDERS, SPECS, assert_tls_secret_like_the_reference, cluster, reference

from mysql_operator.controller.children import resources
from mysql_operator.controller.children.quantity import parse_quantity

PEER = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "gomysql"
_spec = importlib.util.spec_from_file_location("genscripts", PEER / "genscripts.py")
assert _spec and _spec.loader
genscripts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(genscripts)

BUILDS = pytest.mark.timeout(1320)
"""For the tests that use `gomysql`: the first of them in each xdist worker builds the peer in its
setup, which the per-test limit covers (tests/conftest.py); on a machine whose Go caches are cold the
module download and build take minutes on two cores. Longer than the build's own timeout, so a hung
build fails with go's command."""


def pruned(obj: Any) -> Any:
    """Without the empty values Go's encoding writes for unset fields (null, {}, []), and with the
    quantities of requests and limits as numbers (Go writes them in canonical form, `5Gi` for the
    reference's `5120Mi`): the shape the apiserver stores either way."""
    if isinstance(obj, dict):
        out = {k: pruned(v) for k, v in obj.items()}
        out = {k: v for k, v in out.items() if v not in (None, {}, [])}
        for key in ("requests", "limits"):
            if isinstance(out.get(key), dict):
                out[key] = {name: parse_quantity(value) for name, value in out[key].items()}
        return out
    if isinstance(obj, list):
        return [pruned(v) for v in obj]
    return obj


def test_the_kopf_peers_scripts_are_what_genscripts_writes_from_the_reference() -> None:
    assert genscripts.KOPF_OUTPUT.read_text() == genscripts.render_json(), (
        "kopfmysql/scripts.json is stale: run .venv/bin/python benchmarks/peers/gomysql/genscripts.py"
    )


def test_scripts_go_is_what_genscripts_writes_from_the_reference() -> None:
    assert (PEER / "scripts.go").read_text() == genscripts.render(), (
        "scripts.go is stale: run .venv/bin/python benchmarks/peers/gomysql/genscripts.py"
    )


@pytest.fixture(scope="module")
def gomysql(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not on PATH")
    out = tmp_path_factory.mktemp("gomysql") / "gomysql"
    # The flags of launch.build_go (the benchmark's build): one build cache for both.
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    # A cold module download and build take minutes on two cores; a hung one must not take the run.
    subprocess.run([go, "build", "-o", str(out), "."], cwd=PEER, env=env, check=True, timeout=1200)
    return out


@pytest.fixture(scope="module")
def printed(gomysql: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name, spec in SPECS.items():
        run = subprocess.run(
            [str(gomysql), "--print-children"],
            input=json.dumps(cluster(spec)), capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        out[name] = json.loads(run.stdout)
    return out


@BUILDS
@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
@pytest.mark.parametrize("builder", BUILDERS)
def test_go_peer_builds_the_reference_children(printed: dict[str, Any], builder: str, spec: str) -> None:
    ours = dict(printed[spec][builder])
    # Go writes a zero status for a StatefulSet; the apiserver drops any status in a create or an apply
    # of the object itself (status is its subresource's).
    ours.pop("status", None)
    assert pruned(ours) == pruned(reference(builder)(cluster(SPECS[spec])))


@BUILDS
@pytest.mark.parametrize("spec", ["minimal", "mariadb"])
def test_go_peer_secret_is_the_reference_secret_with_its_own_passwords(
    printed: dict[str, Any], spec: str
) -> None:
    ours = copy.deepcopy(printed[spec]["credentials_secret"])
    reference = resources.credentials_secret(cluster(SPECS[spec]))
    assert ours.pop("stringData").keys() == reference.pop("stringData").keys()
    assert pruned(ours) == pruned(reference)


@BUILDS
@pytest.mark.parametrize("spec", ["minimal", "mariadb"])
def test_go_peer_tls_secret_is_the_reference_one_with_its_own_keys(
    printed: dict[str, Any], spec: str
) -> None:
    assert_tls_secret_like_the_reference(copy.deepcopy(printed[spec]["tls_secret"]), SPECS[spec])


@BUILDS
def test_go_peer_refuses_a_spec_it_cannot_read(gomysql: Path) -> None:
    bad = cluster({"replicas": "three", "storage": {"size": "1Gi"}})
    run = subprocess.run(
        [str(gomysql), "--print-children"], input=json.dumps(bad), capture_output=True, text=True, timeout=60
    )
    assert run.returncode != 0
    assert "spec" in run.stderr
