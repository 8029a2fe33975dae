"""Stopping a ManagedProcess never signals a process group that may no longer be ours.

A group id is the leader's pid, and the kernel hands that number out again once the leader has been
reaped and the group is empty: a ``killpg`` sent after the reap can hit the group of a component
started since. So every group signal must go out while the leader is still our unreaped child
(running, or a zombie), which ``waitid(WNOWAIT)`` tells without reaping. Each test records, for
every ``killpg``, whether that held at that moment.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envtest.plane import process
from envtest.plane.process import ManagedProcess, stop_all

LINUX = sys.platform.startswith("linux")
WAIT = 30.0
"""Seconds a test waits for a condition it needs (a line in a log); ample, and never asserted on."""


@dataclass(frozen=True)
class Sent:
    pgid: int
    sig: int
    leader_unreaped: bool


@pytest.fixture
def killpg_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Sent]]:
    """Every os.killpg the harness sends (signal 0 included), with the leader's state at that moment."""
    real = os.killpg
    calls: list[Sent] = []

    def recording(pgid: int, sig: int) -> None:
        calls.append(Sent(pgid, sig, _unreaped_child(pgid)))
        real(pgid, sig)

    monkeypatch.setattr(os, "killpg", recording)
    yield calls
    left = [p.name for p in process._running.values()]
    monkeypatch.undo()
    stop_all()
    assert not left, f"test left processes running: {left}"


def _unreaped_child(pid: int) -> bool:
    """Whether pid is still our child (running or a zombie); its number cannot be reused until reaped."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def wait_for_line(log: Path, prefix: str) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith(prefix):
                    return line[len(prefix) :]
        time.sleep(0.01)
    raise AssertionError(f"no line starting {prefix!r} in {log}")


def exited(proc: ManagedProcess) -> None:
    """Wait until the process has exited by itself (wait_exit must not reap: stop() still signals)."""
    assert proc.wait_exit(WAIT) is not None, f"{proc.name} did not exit"


def gone(pid: int) -> bool:
    """True once pid has exited; a zombie waiting for a reaper we do not control counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    if LINUX:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        return state == "Z"
    return False


def wait_gone(pid: int) -> bool:
    """SIGKILL is delivered at once, but the member exits when next scheduled: wait for that."""
    deadline = time.monotonic() + WAIT
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return gone(pid)


def assert_only_while_ours(calls: list[Sent], pgid: int) -> None:
    assert calls, "stop() sent no signal at all; the test proves nothing"
    late = [c for c in calls if not c.leader_unreaped]
    assert not late, f"signalled group {pgid} after its leader was reaped: {late}"
    assert {c.pgid for c in calls} == {pgid}


def test_a_leader_that_exits_on_sigterm_is_reaped_only_after_the_last_group_signal(
    tmp_path: Path, killpg_calls: list[Sent]
) -> None:
    proc = ManagedProcess("svc", ["sleep", "300"], log_path=tmp_path / "svc.log")
    proc.start()
    pgid = proc.pid
    assert pgid is not None
    proc.stop()
    assert_only_while_ours(killpg_calls, pgid)
    assert proc.returncode == -signal.SIGTERM
    assert not _unreaped_child(pgid), "stop() left the leader unreaped"


def test_status_checks_do_not_reap_a_leader_that_exited_by_itself(
    tmp_path: Path, killpg_calls: list[Sent]
) -> None:
    binary = script(tmp_path, "quick", "exit 7\n")
    proc = ManagedProcess("quick", [str(binary)], log_path=tmp_path / "q.log")
    proc.start()
    pgid = proc.pid
    assert pgid is not None
    exited(proc)
    # Each of these used to reap (Popen.poll/wait), leaving stop() to signal a group id now free.
    assert not proc.running
    assert proc.returncode == 7
    assert proc.wait_exit(0) == 7
    assert _unreaped_child(pgid), "a status check reaped the leader before stop()"
    proc.stop()
    assert_only_while_ours(killpg_calls, pgid)
    assert proc.returncode == 7


def test_respawn_after_an_exit_cleans_the_old_group_while_it_is_still_ours(
    tmp_path: Path, killpg_calls: list[Sent]
) -> None:
    binary = script(tmp_path, "flaky", 'echo "run $$"\nexit 3\n')
    proc = ManagedProcess("flaky", [str(binary)], log_path=tmp_path / "f.log")
    proc.start()
    first = proc.pid
    assert first is not None
    exited(proc)
    proc.spawn()  # reaps the first run's group before the second starts
    assert_only_while_ours(killpg_calls, first)
    exited(proc)
    proc.stop()


@pytest.mark.skipif(not LINUX, reason="group members are seen through /proc")
def test_a_member_that_outlives_its_leader_is_killed_before_the_leader_is_reaped(
    tmp_path: Path, killpg_calls: list[Sent]
) -> None:
    # The member ignores SIGTERM (an ignored disposition survives exec); the leader dies of it. Only the
    # unreaped leader keeps the group id ours, so the SIGKILL for the member must come before the reap.
    binary = script(
        tmp_path,
        "parent",
        """
        sh -c 'trap "" TERM; echo "member $$"; exec sleep 300' &
        wait
        """,
    )
    log = tmp_path / "parent.log"
    proc = ManagedProcess("parent", [str(binary)], log_path=log, stop_timeout=0.2)
    proc.start()
    pgid = proc.pid
    assert pgid is not None
    member = int(wait_for_line(log, "member "))
    proc.stop()
    assert_only_while_ours(killpg_calls, pgid)
    assert any(c.sig == signal.SIGKILL for c in killpg_calls), "the member was never SIGKILLed"
    assert wait_gone(member), f"member {member} survived stop()"
    assert proc.returncode == -signal.SIGTERM


def test_a_leader_that_ignores_sigterm_is_killed_while_still_ours(
    tmp_path: Path, killpg_calls: list[Sent]
) -> None:
    binary = script(tmp_path, "stubborn", "trap '' TERM\necho trapped\nexec sleep 300\n")
    log = tmp_path / "s.log"
    proc = ManagedProcess("stubborn", [str(binary)], log_path=log, stop_timeout=0.2)
    proc.start()
    pgid = proc.pid
    assert pgid is not None
    wait_for_line(log, "trapped")
    proc.stop()
    assert_only_while_ours(killpg_calls, pgid)
    assert proc.returncode == -signal.SIGKILL


def test_a_leader_reaped_behind_our_back_is_never_signalled(tmp_path: Path, killpg_calls: list[Sent]) -> None:
    binary = script(tmp_path, "quick", "exit 5\n")
    proc = ManagedProcess("quick", [str(binary)], log_path=tmp_path / "q.log")
    proc.start()
    pid = proc.pid
    assert pid is not None
    # Someone else's os.waitpid (a library reaping its own children carelessly) takes our leader:
    # from now on the number may be anyone's, so stop() must send nothing and still finish.
    assert os.waitpid(pid, 0)[0] == pid
    proc.stop()
    assert killpg_calls == []
    assert not proc.running and proc.pid is None
