"""Peak memory of the operator's process under hostile webhook bodies: the memory budget on against off.

    python benchmarks/bench_webhook_memory.py [--rounds 2]
    # → benchmarks/results/webhook_memory.json

One local plane (etcd, kube-apiserver, the CRD). Each sample is a fresh `python -m mysql_operator run
--cert-dir …` process, the command the Deployment runs (manager, informers, leader election off, the
webhook server), flooded once, then stopped; its peak resident set is the kernel's high-water mark
(`VmHWM` in /proc/PID/status), read after the flood, so no spike between two polls is missed.

Floods (each connection sends one request, all at once, and its HTTP status is counted):

- `admission-max`: 8 connections, each a 7 MiB AdmissionReview (the admission cap) whose object holds
  `[{},{},…]` — the JSON that expands most when parsed (~25x);
- `fit`: 64 connections (the connection limit), each the largest such body the budget would parse
  (its parse cost fills the default budget's pool for parses): every one is accepted alone, so only
  the budget keeps them from all being parsed at once;
- `conversion-max`: 64 connections, each a 32 MiB ConversionReview of `{}` objects (the conversion
  cap): budget on only — off, it would parse 64 bodies of ~800 MiB each, more memory than this machine has.

Modes: `on` is the default budget (`--webhook-memory-budget 96`), `off` a budget no body reaches
(1 TiB), i.e. the server before the budget. Runs alternate on/off (ABBA per round). The Deployment's
memory limit is 256 MiB: the verdict is whether `on`'s worst peak stays under it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmeta import ROOT, run_metadata

from envtest import ControlPlane
from envtest.webhooks import serving_certs
from mysql_operator.runtime.budget import RequestMemory, request_cost
from mysql_operator.runtime.webhook import MiB, ServerOptions

RESULT = ROOT / "benchmarks" / "results" / "webhook_memory.json"
LIMIT = 256 * MiB
"""The operator container's memory limit (operator/config/manager.yaml)."""
BUDGETS = {"on": ServerOptions.memory_budget // MiB, "off": 1024 * 1024}
VALIDATE = "/validate-db-example-com-v1-mysqlcluster"


def admission_body(size: int) -> bytes:
    """An AdmissionReview of about `size` bytes whose object is mostly `[{},{},…]`."""
    head = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
    head += b'"operation":"CREATE","object":{"apiVersion":"db.example.com/v1","kind":"MySQLCluster",'
    head += b'"metadata":{"name":"x","namespace":"default"},"spec":{"pad":['
    tail = b"]}}}}"
    n = max(1, (size - len(head) - len(tail) + 1) // 3)
    return head + b",".join([b"{}"] * n) + tail


def conversion_body(size: int) -> bytes:
    head = b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u",'
    head += b'"desiredAPIVersion":"db.example.com/v1","objects":['
    tail = b"]}}"
    n = max(1, (size - len(head) - len(tail) + 1) // 3)
    return head + b",".join([b"{}"] * n) + tail


def largest_fitting(budget: int) -> bytes:
    """The largest `admission_body` the server would parse under `budget`: its parse cost beyond its
    bytes fits the pool for parses (bisection on its size)."""
    parses = RequestMemory(budget).parses.total
    lo, hi = 1024, 7 * MiB
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        body = admission_body(mid)
        lo, hi = (mid, hi) if request_cost(body) - len(body) <= parses else (lo, mid)
    return admission_body(lo)


def post(port: int, ca: ssl.SSLContext, path: str, body: bytes) -> str:
    """One request on its own connection: the HTTP status, or `cut` when the connection failed."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=120) as raw,
            ca.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            # Refused before its body was read (413 on the length): the send fails, the reply is in.
            with contextlib.suppress(OSError):
                tls.sendall(head.encode() + body)
            reply = b""
            while chunk := tls.recv(65536):
                reply += chunk
            return reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/") else "cut"
    except OSError:
        return "cut"


def flood(port: int, ca: ssl.SSLContext, path: str, body: bytes, connections: int) -> dict[str, int]:
    codes: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        code = post(port, ca, path, body)
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {code: codes.count(code) for code in sorted(set(codes))}


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(
    plane: ControlPlane, certs: Path, ca: ssl.SSLContext, mode: str, flood_name: str
) -> dict[str, Any]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "mysql_operator", "run", "--kubeconfig", str(plane.kubeconfig),
        "--cert-dir", str(certs), "--webhook-bind-address", "127.0.0.1", "--webhook-port", str(port),
        "--metrics-port", str(free_port()), "--health-port", str(free_port()),
        "--webhook-memory-budget", str(BUDGETS[mode]), "--log-level", "warning",
    ]  # fmt: skip
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 120
            while post(port, ca, "/healthz-not-served", b"{}") == "cut":  # 404 once the server answers
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    stderr.seek(0)
                    raise RuntimeError(f"operator did not serve: {stderr.read().decode()[-2000:]}")
                time.sleep(0.2)
            idle, started = vm_kib(proc.pid, "VmRSS"), vm_kib(proc.pid, "VmHWM")
            if flood_name == "admission-max":
                codes = flood(port, ca, VALIDATE, admission_body(7 * MiB), 8)
            elif flood_name == "fit":
                codes = flood(port, ca, VALIDATE, largest_fitting(BUDGETS["on"] * MiB), 64)
            else:
                codes = flood(port, ca, "/convert", conversion_body(32 * MiB), 64)
            alive = proc.poll() is None
            peak = vm_kib(proc.pid, "VmHWM") if alive else None  # killed (OOM): no peak to read
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"mode": mode, "flood": flood_name, "idle_rss_mib": idle / 1024,
            "startup_peak_rss_mib": started / 1024, "peak_rss_mib": None if peak is None else peak / 1024,
            "codes": codes, "alive_after": alive}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    samples: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        ControlPlane("minimal", crds=[ROOT / "api" / "crd"], progress=lambda _m: None) as plane,
    ):
        certs = serving_certs(Path(tmp), ("127.0.0.1",))  # tls.crt, tls.key: what --cert-dir reads
        ca = ssl.create_default_context(cadata=certs.ca_pem.decode())
        for r in range(args.rounds):
            for flood_name in ("admission-max", "fit", "conversion-max"):
                modes = (
                    ["on"]
                    if flood_name == "conversion-max"
                    else (["on", "off"] if r % 2 == 0 else ["off", "on"])
                )
                for mode in modes:
                    s = sample(plane, Path(tmp), ca, mode, flood_name)
                    print(json.dumps(s), flush=True)
                    samples.append(s)
    summary: dict[str, Any] = {}
    for s in samples:
        key = f"{s['flood']}/{s['mode']}"
        if s["peak_rss_mib"] is not None:
            summary.setdefault(key, []).append(s["peak_rss_mib"])
    medians = {k: round(statistics.median(v), 1) for k, v in summary.items()}
    worst_on = max(s["peak_rss_mib"] or float("inf") for s in samples if s["mode"] == "on")
    verdict = (
        f"budget on: worst peak {worst_on:.0f} MiB, "
        f"{'under' if worst_on * MiB < LIMIT else 'OVER'} the 256 MiB limit"
    )
    print(verdict)
    RESULT.write_text(
        json.dumps(
            {
                "meta": run_metadata(),
                "command": " ".join(["python", *sys.argv]),
                "samples": samples,
                "median_peak_rss_mib": medians,
                "verdict": verdict,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
