"""The run's isolation lock: shared holds coexist, an exclusive one waits for them and keeps new ones
out, and a waiting exclusive hold is let in even while shared ones keep coming (the turnstile)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from envtest.plugin import isolation


def _free(path: Path, mode: int) -> bool:
    """Whether a lock of `mode` on `path` would be granted now (asked without waiting)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _until(condition) -> None:  # type: ignore[no-untyped-def]
    # Waits for a state another thread reaches; pytest-timeout bounds a bug that never reaches it.
    while not condition():
        time.sleep(0.005)


def _in_thread(folder: Path, exclusive: bool, order: list[str], label: str) -> tuple[threading.Thread, list]:
    holds: list[isolation.Hold] = []

    def take() -> None:
        holds.append(isolation.hold(folder, exclusive=exclusive))
        order.append(label)

    thread = threading.Thread(target=take)
    thread.start()
    return thread, holds


def test_shared_holds_coexist_and_keep_an_exclusive_one_out(tmp_path: Path) -> None:
    first = isolation.hold(tmp_path, exclusive=False)
    second = isolation.hold(tmp_path, exclusive=False)
    lock = tmp_path / isolation.LOCK
    assert not _free(lock, fcntl.LOCK_EX) and _free(lock, fcntl.LOCK_SH)
    first.release()
    assert not _free(lock, fcntl.LOCK_EX), "one shared hold left"
    second.release()
    second.release()  # idempotent
    assert _free(lock, fcntl.LOCK_EX)


def test_an_exclusive_hold_waits_for_every_shared_one_and_keeps_new_ones_out(tmp_path: Path) -> None:
    order: list[str] = []
    shared = isolation.hold(tmp_path, exclusive=False)
    writer, writer_holds = _in_thread(tmp_path, True, order, "exclusive")
    _until(lambda: not _free(tmp_path / isolation.TURNSTILE, fcntl.LOCK_EX))  # it waits at the gate
    reader, reader_holds = _in_thread(tmp_path, False, order, "late shared")
    assert order == []
    shared.release()
    writer.join()
    assert order == ["exclusive"], "the late shared hold did not slip past the waiting exclusive one"
    assert not _free(tmp_path / isolation.LOCK, fcntl.LOCK_SH)
    writer_holds[0].release()
    reader.join()
    assert order == ["exclusive", "late shared"]
    reader_holds[0].release()


def test_a_hold_ends_with_the_process_that_held_it(tmp_path: Path) -> None:
    pid = os.fork()
    if pid == 0:  # a worker that takes an exclusive hold and dies without releasing it
        isolation.hold(tmp_path, exclusive=True)
        os._exit(0)
    os.waitpid(pid, 0)
    hold = isolation.hold(tmp_path, exclusive=True)  # would wait forever if the dead one still held it
    assert hold.held and hold.exclusive
    hold.release()
    assert not hold.held
