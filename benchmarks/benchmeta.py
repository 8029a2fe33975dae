"""What every benchmark result records beside its samples: machine, date, commit (nothing is copied
forward from an older run, so a result file always describes one run)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_metadata() -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
    }


def import_origin(package: str, env: dict[str, str]) -> str:
    """Where `import package` comes from in a fresh interpreter with this environment (what a
    benchmark's subprocess, or pytest's plugin loading, will import)."""
    argv = [sys.executable, "-c", f"import {package}; print({package}.__file__)"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout.strip()


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM: the most resident memory a process ever had, in MB (kernel-kept, so no sampling gaps);
    None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


Key = tuple[str, str, str, str]  # (verb, group, resource, subresource)


def apiserver_counts(session: requests.Session, server: str) -> Counter[Key]:
    """kube-apiserver's `apiserver_request_total`, summed by (verb, group, resource, subresource)."""
    text = session.get(f"{server}/metrics", timeout=30).text
    counts: Counter[Key] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            key = (labels["verb"], labels.get("group", ""), labels["resource"], labels.get("subresource", ""))
            counts[key] += int(sample.value)
    return counts


WORK_QUEUE_SAMPLES = {
    # sample name -> field: what a controller-runtime-style operator's /metrics says of its passes
    "controller_runtime_reconcile_total": "reconciles",
    "controller_runtime_reconcile_time_seconds_sum": "reconcile_seconds",
    "workqueue_queue_duration_seconds_sum": "queue_seconds",
    "workqueue_queue_duration_seconds_count": "queued",
}


def work_queue(text: str) -> dict[str, float] | None:
    """From an operator's /metrics (Prometheus text), summed over controllers and results: its passes
    (`reconciles`), the seconds they took together (`reconcile_seconds`: with W workers, at most W x
    the time since it started), the seconds keys waited in the queue together (`queue_seconds`) and how
    many waits that is (`queued`). None when it exposes none of them; ValueError for text that is not
    Prometheus text."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            field = WORK_QUEUE_SAMPLES.get(sample.name)
            if field is not None:
                found[field] = found.get(field, 0.0) + sample.value
    return found or None
