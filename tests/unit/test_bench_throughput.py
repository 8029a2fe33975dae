"""bench_throughput's own parsing (the plane runs are the benchmark itself)."""

from __future__ import annotations

import pytest
from bench_modules import BENCHMARKS, import_from

bench = import_from(BENCHMARKS, "bench_throughput")


def test_peer_flags_become_extra_args_per_component() -> None:
    flags = bench.parse_flags(
        [
            "kube-controller-manager:concurrent-statefulset-syncs=20",
            "kube-controller-manager:v=2",
            "kube-scheduler:kube-api-qps=50",
        ]
    )
    assert flags == {
        "kube-controller-manager": {"concurrent-statefulset-syncs": "20", "v": "2"},
        "kube-scheduler": {"kube-api-qps": "50"},
    }


@pytest.mark.parametrize("item", ["concurrent-statefulset-syncs=20", "kube-scheduler:v", ":v=2", "kwok:=1"])
def test_a_malformed_peer_flag_is_named(item: str) -> None:
    with pytest.raises(ValueError, match=item):
        bench.parse_flags([item])
