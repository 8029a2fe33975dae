"""Each MySQLCluster implementation of the scale benchmark as its own process: start, ready, memory, stop.

    reference  python -m mysql_operator run            (operator/mysql_operator)
    base       the same, from another checkout's operator/ (`operator_src`, first on PYTHONPATH)
    kopf       python -m kopf run -m kopfmysql.handlers (benchmarks/peers/kopfmysql)
    go         gomysql                                   (benchmarks/peers/gomysql, controller-runtime)

All three are scoped to one namespace, get the plane's admin kubeconfig, run the same number of
concurrent reconciles, and are ready when their health endpoint answers 200 (for the reference and
the Go peer that means every informer has synced; kopf's liveness endpoint answers once its root tasks
run). The reference (and base) and the Go peer serve /metrics on a port of their own, read once when a
sample ends (`Operator.work_queue`: how many passes, how long they took; controller-runtime's metrics of
the same names); kopf serves none.

The reference logs at warning level; `BENCH_LOG_LEVEL=info` in the environment makes it say each child it
creates and each pod it labels, in the log directory the benchmark prints (to see where a run's time goes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import requests
from benchmeta import import_origin, peak_rss_mb, work_queue

from envtest import binaries
from envtest.plane.ports import free_port

PEERS = Path(__file__).resolve().parent
IMPLEMENTATIONS = ("reference", "base", "kopf", "go")


def build_go(name: str) -> Path:
    """`go build` of benchmarks/peers/<name> into the binaries cache, as bench_start.py builds its peer:
    modules from the Go module proxy, the local toolchain only, a static binary."""
    out = binaries.cache_root().parent / "peers" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    print(f"building benchmarks/peers/{name} (go build)", file=sys.stderr, flush=True)
    subprocess.run(["go", "build", "-o", str(out), "."], cwd=PEERS / name, env=env, check=True)
    return out


@dataclass
class Operator:
    """One running implementation; `stop()` always leaves no process behind."""

    name: str
    proc: subprocess.Popen[bytes]
    ready_url: str
    log: Path
    metrics_url: str | None = None

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds from now until the health endpoint answers 200; raises with the log tail."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if requests.get(self.ready_url, timeout=2).status_code == 200:
                    return time.monotonic() - began
            except requests.RequestException:
                pass  # not listening yet
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")

    def peak_rss_mb(self) -> float | None:
        """The most resident memory the process ever had (benchmeta.peak_rss_mb)."""
        return peak_rss_mb(self.proc.pid)

    def cpu_seconds(self) -> float | None:
        """User + system CPU the process has used so far (None once it is gone)."""
        try:
            times = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return None
        return times.user + times.system

    def alive(self) -> bool:
        return self.proc.poll() is None

    def work_queue(self) -> dict[str, float] | None:
        """What its /metrics says of its passes so far (benchmeta.work_queue); None without metrics."""
        if self.metrics_url is None or self.proc.poll() is not None:
            return None
        try:
            response = requests.get(self.metrics_url, timeout=10)
            response.raise_for_status()
            return work_queue(response.text)
        except (requests.RequestException, ValueError):  # no answer, or not Prometheus text
            return None

    def stop(self, grace: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def operator_origin(operator_src: Path) -> str:
    """Where `python -m mysql_operator` is imported from with `operator_src` first on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": _prepend(str(operator_src), os.environ.get("PYTHONPATH"))}
    return import_origin("mysql_operator", env)


def _prepend(entry: str, path: str | None) -> str:
    return os.pathsep.join(filter(None, [entry, path]))


def start(
    name: str,
    *,
    kubeconfig: Path,
    namespace: str,
    workers: int,
    log_dir: Path,
    go_binary: Path | None,
    operator_src: Path | None = None,
) -> Operator:
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    if name == "base":
        if operator_src is None:
            raise ValueError("the base implementation needs another checkout's operator/ (operator_src)")
        env["PYTHONPATH"] = _prepend(str(operator_src), env.get("PYTHONPATH"))
    if name in ("reference", "base"):
        argv = [sys.executable, "-m", "mysql_operator", "run", "--kubeconfig", str(kubeconfig)]
        argv += ["--namespace", namespace, "--workers", str(workers), "--metrics-port", str(metrics_port)]
        argv += ["--health-port", str(port), "--log-level", os.environ.get("BENCH_LOG_LEVEL", "warning")]
        url = f"http://127.0.0.1:{port}/readyz"
    elif name == "kopf":
        argv = [sys.executable, "-m", "kopf", "run", "--standalone", "--quiet", "--namespace", namespace]
        argv += ["--liveness", f"http://127.0.0.1:{port}/healthz", "-m", "kopfmysql.handlers"]
        env["PYTHONPATH"] = _prepend(str(PEERS), env.get("PYTHONPATH"))
        env["KOPF_MYSQL_WORKERS"] = str(workers)
        url = f"http://127.0.0.1:{port}/healthz"
    elif name == "go":
        if go_binary is None:
            raise ValueError("the go peer needs its binary (build_go)")
        argv = [str(go_binary), "--kubeconfig", str(kubeconfig), "--namespace", namespace]
        argv += ["--workers", str(workers), "--health-addr", f"127.0.0.1:{port}"]
        argv += ["--metrics-addr", f"127.0.0.1:{metrics_port}"]
        url = f"http://127.0.0.1:{port}/readyz"
    else:
        raise ValueError(f"unknown implementation {name!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    metrics_url = None if name == "kopf" else f"http://127.0.0.1:{metrics_port}/metrics"  # kopf has none
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}-{namespace}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Operator(name, proc, url, log, metrics_url)
