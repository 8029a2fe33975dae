"""benchmarks/bench_scale.py's pure parts, and the kopf peer's children against the reference's builders.

The live conformance check (benchmarks/peers/conformance.py) compares every peer's children with the
reference on a real plane; this pins the kopf peer's builders without one, for specs the check does
not create (resources, storage class, time zone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from bench_modules import BENCHMARKS, import_from
from peer_specs import BUILDERS, SPECS, assert_tls_secret_like_the_reference, cluster, reference

from mysql_operator.controller.children import resources


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return import_from(BENCHMARKS, "bench_scale")


@pytest.fixture(scope="module")
def kopf_children() -> ModuleType:
    return import_from(BENCHMARKS / "peers", "kopfmysql.children")


@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
@pytest.mark.parametrize("builder", BUILDERS)
def test_kopf_peer_builds_the_reference_children(kopf_children: ModuleType, builder: str, spec: str) -> None:
    obj = cluster(SPECS[spec])
    assert getattr(kopf_children, builder)(obj) == reference(builder)(obj)


def test_kopf_peer_secret_is_the_reference_secret_with_its_own_password(kopf_children: ModuleType) -> None:
    obj = cluster(SPECS["minimal"])
    ours, reference = kopf_children.credentials_secret(obj), resources.credentials_secret(obj)
    assert ours.pop("stringData").keys() == reference.pop("stringData").keys()
    assert ours == reference


@pytest.mark.parametrize("spec", ["minimal", "mariadb"])
def test_kopf_peer_tls_secret_is_the_reference_one_with_its_own_keys(spec: str) -> None:
    tls = import_from(BENCHMARKS / "peers", "kopfmysql.tls")
    assert_tls_secret_like_the_reference(tls.tls_secret(cluster(SPECS[spec])), SPECS[spec])


def test_floor_children_are_the_operator_children_without_an_owner(bench: ModuleType) -> None:
    children = bench.floor_children(7, "ns")
    assert [(c["kind"], c["metadata"]["name"]) for c in children] == [
        ("Secret", "db0007-credentials"),
        ("Secret", "db0007-tls"),
        ("Service", "db0007-headless"),
        ("Service", "db0007-primary"),
        ("StatefulSet", "db0007-mysql"),
    ]
    assert not any("ownerReferences" in c["metadata"] for c in children)
    # The converged cluster's pod: labelled primary, so the primary Service selects it.
    pod_labels = children[-1]["spec"]["template"]["metadata"]["labels"]
    assert children[3]["spec"]["selector"].items() <= pod_labels.items()


def sample(impl: str, seconds: float, **extra: Any) -> dict[str, Any]:
    base = {"requests_per_cluster": 7.0, "writes_per_cluster": 7.0, "peak_rss_mb": 50.0}
    return {"implementation": impl, "n": 10, "repeat": 0, "seconds": seconds, **base, **extra}


def test_summary_takes_medians_and_ratios_against_floor_and_reference(bench: ModuleType) -> None:
    samples = [
        {"implementation": "floor", "n": 10, "repeat": 0, "seconds": 2.0},
        sample("reference", 4.0),
        sample("reference", 6.0, repeat=1),
        sample("go", 2.5, peak_rss_mb=25.0),
        sample("kopf", 0.0, error="timed out"),  # failed runs stay out of the medians
    ]
    (row,) = bench.summarize(samples, ["floor", "reference", "kopf", "go"], {"reference": True, "go": False})
    assert row["floor_seconds"] == 2.0
    assert row["reference"]["seconds"] == 5.0
    assert row["reference"]["over_floor"] == 2.5
    assert row["go"]["vs_reference"]["seconds"] == 0.5
    assert row["go"]["vs_reference"]["peak_rss_mb"] == 0.5
    assert row["go"]["counted"] is False
    assert "kopf" not in row
    text = bench.table([row], ["floor", "reference", "kopf", "go"])
    assert "NO (failed its checks)" in text.splitlines()[-1]


def test_the_reference_passes_are_read_from_its_work_queue_metrics(bench: ModuleType) -> None:
    meta = import_from(BENCHMARKS, "benchmeta")
    text = (
        "# TYPE controller_runtime_reconcile_total counter\n"
        'controller_runtime_reconcile_total{controller="c",result="success"} 380.0\n'
        'controller_runtime_reconcile_total{controller="c",result="requeue"} 20.0\n'
        'controller_runtime_reconcile_created{controller="c",result="success"} 1.7e9\n'
        "# TYPE controller_runtime_reconcile_time_seconds histogram\n"
        'controller_runtime_reconcile_time_seconds_bucket{controller="c",le="+Inf"} 400.0\n'
        'controller_runtime_reconcile_time_seconds_count{controller="c"} 400.0\n'
        'controller_runtime_reconcile_time_seconds_sum{controller="c"} 25.0\n'
        "# TYPE workqueue_queue_duration_seconds histogram\n"
        'workqueue_queue_duration_seconds_bucket{name="c",le="+Inf"} 400.0\n'
        'workqueue_queue_duration_seconds_count{name="c"} 400.0\n'
        'workqueue_queue_duration_seconds_sum{name="c"} 1000.0\n'
    )
    queue = meta.work_queue(text)
    assert queue == {"reconciles": 400.0, "reconcile_seconds": 25.0, "queue_seconds": 1000.0, "queued": 400.0}
    fields = bench.passes(queue, 100)
    assert fields == {
        "reconciles_per_cluster": 4.0,
        "reconcile_seconds": 25.0,
        "queue_wait_seconds_mean": 2.5,
    }
    assert meta.work_queue("# TYPE up gauge\nup 1.0\n") is None
    assert bench.passes(None, 100) == {}
    no_queue = bench.passes({"reconciles": 400.0, "reconcile_seconds": 25.0}, 100)
    assert no_queue["queue_wait_seconds_mean"] is None, "not exposed is not a wait of 0 s"
    with pytest.raises(ValueError):
        meta.work_queue("<html>not metrics</html>")  # launch.Operator.work_queue: None
    samples = [
        sample("reference", 4.0, **fields),
        sample("reference", 6.0, repeat=1, reconciles_per_cluster=6.0),
    ]
    (row,) = bench.summarize(samples, ["reference"], {"reference": True})
    assert row["reference"]["reconciles_per_cluster"] == 5.0
    assert row["reference"]["reconcile_seconds"] == 25.0, "the median of the samples that have it"
    samples.append(sample("go", 3.0))
    (row,) = bench.summarize(samples, ["reference", "go"], {"reference": True, "go": True})
    go_line = bench.table([row], ["reference", "go"]).splitlines()[-1]
    assert go_line.split()[-6:-4] == ["-", "-"], "a peer without the metrics shows none"


def test_the_plane_cpu_the_busy_share_and_the_plane_writes_are_taken_over_the_window(
    bench: ModuleType,
) -> None:
    cores = bench.psutil.cpu_count()
    fields = bench.cpu_fields(({1: 4.0, 2: 6.0}, 100.0), ({1: 14.0, 2: 26.0}, 100.0 + 15.0 * cores), 20.0)
    assert fields == {"plane_cpu_seconds": 30.0, "machine_busy": 0.75}
    restarted = bench.cpu_fields(({1: 4.0, 2: 6.0}, 100.0), ({1: 14.0, 3: 1.0}, 100.0 + 15.0 * cores), 20.0)
    assert restarted["plane_cpu_seconds"] is None, "a process that was not there at both ends"
    assert bench.cpu_fields((None, 100.0), ({1: 14.0}, 110.0), 20.0)["plane_cpu_seconds"] is None

    # Read off live processes: this one by pid; a process that is gone, or was never started, gives none.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    plane = bench.Plane.__new__(bench.Plane)
    plane.plane = SimpleNamespace(processes={"here": SimpleNamespace(pid=os.getpid())})
    used, busy = plane.cpu()
    assert used is not None and list(used) == [os.getpid()] and used[os.getpid()] > 0 and busy > 0
    for missing in (gone.pid, None):
        plane.plane = SimpleNamespace(
            processes={"here": SimpleNamespace(pid=os.getpid()), "gone": SimpleNamespace(pid=missing)}
        )
        assert plane.cpu()[0] is None
    before = Counter({("POST", "", "pods", ""): 5, ("GET", "", "pods", ""): 9})
    after = Counter(
        {
            ("POST", "", "pods", ""): 25,
            ("PATCH", "", "pods", "status"): 10,
            ("GET", "", "pods", ""): 90,  # reads are not writes
            ("WATCH", "", "pods", ""): 3,
            ("POST", "", "events", ""): 6,
            ("POST", "events.k8s.io", "events", ""): 4,  # the same name in another group
        }
    )
    writes = bench.plane_writes(before, after, 10)
    assert writes == {
        "plane_writes_per_cluster": 4.0,
        "plane_writes": {
            "PATCH pods status": 10,
            "POST events": 6,
            "POST events.events.k8s.io": 4,
            "POST pods": 20,
        },
    }
    samples = [
        {"implementation": "floor", "n": 10, "repeat": 0, "seconds": 2.0, **fields, **writes},
        {"implementation": "floor", "n": 10, "repeat": 1, "seconds": 2.2},  # recorded before them
        sample("reference", 4.0, plane_cpu_seconds=50.0, machine_busy=1.0, plane_writes_per_cluster=9.0),
    ]
    (row,) = bench.summarize(samples, ["floor", "reference"], {"reference": True})
    assert row["floor_plane"] == {
        "plane_cpu_seconds": 30.0,
        "machine_busy": 0.75,
        "plane_writes_per_cluster": 4.0,
    }
    assert (row["reference"]["plane_cpu_seconds"], row["reference"]["machine_busy"]) == (50.0, 1.0)
    floor_line, reference_line = bench.table([row], ["floor", "reference"]).splitlines()[2:]
    assert floor_line.split()[-3:] == ["30.0", "0.75", "4.0"]
    assert reference_line.split()[-4:] == ["50.0", "1.00", "9.0", "yes"]


def test_go_peer_version_is_read_from_its_go_mod(bench: ModuleType) -> None:
    assert bench.go_module_version("sigs.k8s.io/controller-runtime").startswith("v0.")


def test_cli_rejects_an_unknown_peer(bench: ModuleType) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--peers", "rust"])
