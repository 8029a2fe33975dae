from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envtest.errors import ProcessError, StartTimeout
from envtest.plane import process
from envtest.plane.process import ManagedProcess, stop_all

REPO = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
PATIENCE = 30.0
"""Seconds a wait for something that must happen gives up after. Only a failing test waits that long,
so it can be generous: a loaded machine makes these waits longer, never the test wrong."""


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    yield
    left = [p.name for p in process._running.values()]
    stop_all()
    assert not left, f"test left processes running: {left}"


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def gone(pid: int) -> bool:
    """True once pid has exited; a zombie waiting for a reaper we do not control counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    if LINUX:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


def wait_gone(pid: int, timeout: float = PATIENCE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return gone(pid)


def pid_from_log(log: Path, marker: str = "pid ") -> int:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith(marker):
                return int(line[len(marker) :])
        time.sleep(0.02)
    raise AssertionError(f"no {marker!r} line in {log}")


def wait_for_text(log: Path, needle: str, count: int = 1) -> str:
    deadline = time.monotonic() + PATIENCE
    text = ""
    while time.monotonic() < deadline:
        text = log.read_text()
        if text.count(needle) >= count:
            return text
        time.sleep(0.02)
    raise AssertionError(f"{needle!r} not {count}x in {log}:\n{text}")


def test_start_waits_for_ready_probe_and_tolerates_probe_errors(tmp_path: Path) -> None:
    # The process gets ready only once the first probe has failed: however slow the machine, start()
    # must have gone on probing through a FileNotFoundError.
    marker, go = tmp_path / "ready", tmp_path / "go"
    binary = script(
        tmp_path, "fake", f"while [ ! -e {go} ]; do sleep 0.01; done; echo up > {marker}; exec sleep 300\n"
    )
    probes: list[str] = []

    def ready() -> bool:
        try:
            up = marker.read_text().strip() == "up"  # FileNotFoundError until then: "not yet"
        except FileNotFoundError:
            probes.append("not yet")
            raise
        finally:
            go.touch()
        probes.append("ready" if up else "empty")
        return up

    proc = ManagedProcess(
        "fake", [str(binary)], log_path=tmp_path / "fake.log", ready=ready, start_timeout=PATIENCE
    )
    proc.start()
    assert proc.running and proc.pid is not None and proc.returncode is None
    assert probes[0] == "not yet" and probes[-1] == "ready"
    proc.stop()
    assert not proc.running and proc.pid is None
    assert proc.returncode == -signal.SIGTERM


def test_early_exit_raises_process_error_with_exit_code_and_log_tail(tmp_path: Path) -> None:
    binary = script(tmp_path, "bad", "echo 'error: unknown flag --bogus' >&2\nexit 3\n")
    proc = ManagedProcess("bad", [str(binary), "--bogus"], log_path=tmp_path / "bad.log", ready=lambda: False)
    with pytest.raises(ProcessError, match="code 3") as info:
        proc.start()
    assert not isinstance(info.value, StartTimeout)
    assert "unknown flag --bogus" in str(info.value)
    assert proc.returncode == 3 and not proc.running


def test_missing_binary_raises_process_error(tmp_path: Path) -> None:
    proc = ManagedProcess("ghost", [str(tmp_path / "nope")], log_path=tmp_path / "ghost.log")
    with pytest.raises(ProcessError, match="cannot start ghost"):
        proc.start()


def test_not_ready_in_time_raises_start_timeout_and_stops_the_process(tmp_path: Path) -> None:
    binary = script(tmp_path, "slow", "echo pid $$\necho still booting\nexec sleep 300\n")
    log = tmp_path / "slow.log"

    def ready() -> bool:
        wait_for_text(log, "still booting")  # so the error's log tail has it, on a slow machine too
        raise ConnectionRefusedError("nothing listening")

    proc = ManagedProcess("slow", [str(binary)], log_path=log, ready=ready, start_timeout=0.4)
    with pytest.raises(StartTimeout, match=r"slow not ready after \d+s") as info:
        proc.start()
    assert "still booting" in str(info.value)
    assert "ConnectionRefusedError" in str(info.value)
    assert not proc.running
    assert gone(pid_from_log(log)), "start() returned with the process still there"


def test_stop_kills_a_process_that_ignores_sigterm_after_stop_timeout(tmp_path: Path) -> None:
    # The ignored disposition survives exec, so the sleep ignores SIGTERM as well.
    log = tmp_path / "s.log"
    binary = script(tmp_path, "stubborn", "trap '' TERM\necho trapped\nexec sleep 300\n")
    proc = ManagedProcess("stubborn", [str(binary)], log_path=log, stop_timeout=0.3)
    proc.start()
    wait_for_text(log, "trapped")  # signalled before its trap, it would die of SIGTERM
    began = time.monotonic()
    proc.stop()
    # SIGKILL ended it, and not before the grace: a lower bound, which load can only lengthen.
    assert proc.returncode == -signal.SIGKILL
    assert time.monotonic() - began >= 0.3


def test_stop_kills_grandchildren_through_the_process_group(tmp_path: Path) -> None:
    binary = script(tmp_path, "parent", "sleep 300 &\necho pid $!\nwait\n")
    log = tmp_path / "parent.log"
    proc = ManagedProcess("parent", [str(binary)], log_path=log)
    proc.start()
    grandchild = pid_from_log(log)
    assert not gone(grandchild)
    proc.stop()
    assert wait_gone(grandchild)


def test_stop_is_idempotent_and_safe_before_start(tmp_path: Path) -> None:
    proc = ManagedProcess("idle", ["sleep", "300"], log_path=tmp_path / "idle.log")
    proc.stop()
    proc.start()
    proc.stop()
    proc.stop()
    assert proc.returncode == -signal.SIGTERM


def test_restart_keeps_argv_and_appends_to_the_log(tmp_path: Path) -> None:
    binary = script(tmp_path, "svc", 'echo "run $*"\nexec sleep 300\n')
    log = tmp_path / "svc.log"
    proc = ManagedProcess("svc", [str(binary), "--port=1234"], log_path=log)
    proc.start()
    first = proc.pid
    wait_for_text(log, "run --port=1234")
    proc.restart()
    assert proc.running and proc.pid != first
    assert proc.argv == (str(binary), "--port=1234")
    text = wait_for_text(log, "run --port=1234", count=2)
    assert text.count(f"--- start {binary} --port=1234 ---") == 2
    assert text.count("run --port=1234") == 2
    proc.stop()


def test_wait_exit_and_log_tail(tmp_path: Path) -> None:
    binary = script(tmp_path, "quick", "for i in 1 2 3 4 5; do echo line $i; done\nexit 7\n")
    proc = ManagedProcess("quick", [str(binary)], log_path=tmp_path / "q.log")
    proc.start()
    assert proc.wait_exit(PATIENCE) == 7
    assert proc.returncode == 7
    assert proc.log_tail(2) == "line 4\nline 5"
    proc.stop()  # reaps the (empty) group and unregisters
    assert proc.returncode == 7


def test_log_tail_without_log_file(tmp_path: Path) -> None:
    proc = ManagedProcess("never", ["true"], log_path=tmp_path / "none.log")
    assert "no log file" in proc.log_tail()


def test_start_from_a_short_lived_thread_survives_the_thread(tmp_path: Path) -> None:
    # PDEATHSIG is tied to the forking thread: were start() to fork here, the child would die with it.
    proc = ManagedProcess("threaded", ["sleep", "300"], log_path=tmp_path / "t.log")
    worker = threading.Thread(target=proc.start)
    worker.start()
    worker.join()
    if LINUX:
        # The kernel sends the death signal while the thread exits, before its /proc entry goes: once
        # that is gone, a SIGKILL meant for the child is queued (or has done its work) already.
        task = Path(f"/proc/self/task/{worker.native_id}")
        deadline = time.monotonic() + PATIENCE
        while task.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not task.exists(), "the worker thread never finished exiting"
        assert proc.pid is not None and not sigkill_pending(proc.pid)
    assert proc.running
    proc.stop()


def sigkill_pending(pid: int) -> bool:
    """Whether SIGKILL is queued for `pid` (shared or per-thread) and the process is not dead yet."""
    bit = 1 << (signal.SIGKILL - 1)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        field, _, value = line.partition(":")
        if field in ("SigPnd", "ShdPnd") and int(value.strip(), 16) & bit:
            return True
    return False


def test_stop_all_stops_every_running_process(tmp_path: Path) -> None:
    procs = [ManagedProcess(f"p{i}", ["sleep", "300"], log_path=tmp_path / f"p{i}.log") for i in range(3)]
    for proc in procs:
        proc.start()
    stop_all()
    assert not any(proc.running for proc in procs)
    assert not process._running


def _helper(tmp_path: Path, tail: str, *, die_with_parent: bool = True) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from envtest.plane.process import ManagedProcess
        proc = ManagedProcess("sleeper", ["sleep", "300"], log_path=Path({str(tmp_path / "h.log")!r}),
                               die_with_parent={die_with_parent!r})
        proc.start()
        print(proc.pid, flush=True)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen([sys.executable, "-c", code + tail], stdout=subprocess.PIPE, text=True, env=env)


@pytest.mark.skipif(not LINUX, reason="PR_SET_PDEATHSIG is Linux-only")
def test_child_dies_when_its_owner_is_sigkilled(tmp_path: Path) -> None:
    helper = _helper(tmp_path, "time.sleep(300)\n")
    child = 0
    try:
        assert helper.stdout is not None
        with helper.stdout:
            assert select.select([helper.stdout], [], [], PATIENCE)[0], "the helper printed no child pid"
            child = int(helper.stdout.readline())
        assert not gone(child)
        helper.send_signal(signal.SIGKILL)
        helper.wait(PATIENCE)
        assert wait_gone(child)
    finally:
        helper.kill()
        helper.wait()
        _kill_if_alive(child)


def test_child_is_stopped_when_its_owner_exits_without_stopping(tmp_path: Path) -> None:
    # Without PDEATHSIG, so that only the atexit hook can be what stops the child.
    helper = _helper(tmp_path, "", die_with_parent=False)
    out, _ = helper.communicate(timeout=PATIENCE)
    assert helper.returncode == 0
    child = int(out)
    try:
        assert wait_gone(child)
    finally:
        _kill_if_alive(child)


def _kill_if_alive(pid: int) -> None:
    # Only on failure: a regression must not leave a `sleep 300` behind on the developer's machine.
    if pid and not gone(pid):
        os.kill(pid, signal.SIGKILL)
