"""CI's Kubernetes minors are written out in .github/workflows/ci.yml (a static matrix reads plainly in
GitHub's UI); these tests keep them equal to envtest.pins.SUPPORTED, so a minor added or dropped there
is added or dropped in CI too, and the merge job checks exactly the minors the shards ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from envtest.pins import SUPPORTED

WORKFLOW = Path(__file__).resolve().parents[2] / ".github/workflows/ci.yml"
MINORS = [p.minor for p in SUPPORTED]


def _jobs() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def test_e2e_local_runs_every_supported_minor_on_four_shards() -> None:
    job = _jobs()["e2e-local"]
    assert job["strategy"]["matrix"]["minor"] == MINORS
    assert job["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert job["env"]["ENVTEST_K8S_VERSION"] == "${{ matrix.minor }}"


def test_e2e_kind_runs_the_oldest_and_the_newest_minor() -> None:
    job = _jobs()["e2e-kind"]
    assert job["strategy"]["matrix"]["minor"] == [MINORS[0], MINORS[-1]]
    assert job["env"]["ENVTEST_K8S_VERSION"] == "${{ matrix.minor }}"


def test_e2e_merge_checks_the_minors_the_shards_ran() -> None:
    jobs = _jobs()
    env = jobs["e2e-merge"]["env"]
    assert env["LOCAL_MINORS"].split() == jobs["e2e-local"]["strategy"]["matrix"]["minor"]
    assert env["KIND_MINORS"].split() == jobs["e2e-kind"]["strategy"]["matrix"]["minor"]


def test_each_minor_has_its_own_binary_cache_and_artifact_names() -> None:
    jobs = _jobs()
    for name in ("e2e-local", "e2e-kind"):
        steps = jobs[name]["steps"]
        uploads = [
            s["with"]["name"] for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")
        ]
        assert uploads == [f"{name}-${{{{ matrix.minor }}}}-${{{{ matrix.shard }}}}"], name
    caches = [s for s in jobs["e2e-local"]["steps"] if str(s.get("uses", "")).startswith("actions/cache")]
    assert all("${{ matrix.minor }}" in s["with"]["key"] for s in caches) and caches
