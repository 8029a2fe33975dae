from __future__ import annotations

import multiprocessing
import os
import socket
import stat
import time
from pathlib import Path

import pytest

from envtest.plane import ports
from envtest.plane.ports import free_port


@pytest.fixture
def claim_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # A private claim directory: the real one is shared with any other test run of this user.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "envtest" / "ports"


def _grab(n: int) -> list[int]:
    return [free_port() for _ in range(n)]


def test_concurrent_processes_never_get_the_same_port(claim_dir: Path) -> None:
    # fork keeps the monkeypatched claim directory in the children.
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_grab, [50, 50])
    everything = [port for batch in results for port in batch]
    assert len(everything) == 100
    assert len(set(everything)) == 100


def test_port_is_bindable_and_claimed(claim_dir: Path) -> None:
    port = free_port()
    claim = claim_dir / str(port)
    assert claim.read_text().strip() == str(os.getpid())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    # The user's own: nobody else can fill it, or swap a claim for a link.
    assert stat.S_IMODE(claim_dir.stat().st_mode) == 0o700


def test_fresh_claim_is_skipped_and_stale_claim_is_reclaimed(
    claim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = iter([40001, 40001, 40002])
    monkeypatch.setattr(ports, "_kernel_port", lambda host: next(offered))
    assert free_port() == 40001
    assert free_port() == 40002  # 40001 is freshly claimed: the kernel's offer is refused

    stale = time.time() - ports.CLAIM_TTL - 1
    os.utime(claim_dir / "40001", (stale, stale))
    monkeypatch.setattr(ports, "_kernel_port", lambda host: 40001)
    assert free_port() == 40001
    # Claimed afresh: its time moved from the stale one to now (a second of slack for coarse file times).
    assert (claim_dir / "40001").stat().st_mtime > stale + ports.CLAIM_TTL


def test_gives_up_with_a_clear_error_when_every_offer_is_claimed(
    claim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "_kernel_port", lambda host: 40003)
    free_port()
    with pytest.raises(ports.EnvtestError, match=r"no free port on 127\.0\.0\.1"):
        free_port()


def test_ipv6_host(claim_dir: Path) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        port = free_port("::1")
    except OSError as exc:
        pytest.skip(f"::1 unavailable: {exc}")
    assert 0 < port < 65536
