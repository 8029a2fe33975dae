"""One managed process: its own process group, a log file, a readiness probe, and cleanup that cannot leak.

Three layers make sure no component outlives the test run that started it:

1. ``stop()`` signals the whole process group (SIGTERM, then SIGKILL), so helpers a component forks die
   with it. The group is signalled only while its leader is our unreaped child: the kernel keeps the
   leader's pid, and so the group id, from being reused until we reap it; once reaped, the same number
   may name some new process's group, which a late ``killpg`` would kill. So nothing here reaps the
   leader (``poll()``/``wait()``) except ``stop()``, after its last signal; status checks use
   ``waitid(WNOWAIT)``, which looks without reaping.
2. Every running process is in a module registry that ``atexit`` drains with :func:`stop_all`, so an
   owner that forgets ``stop()`` or ends with an exception still cleans up.
3. On Linux, ``die_with_parent`` sets ``PR_SET_PDEATHSIG=SIGKILL`` in the child, which covers what atexit
   cannot: the owner being SIGKILLed or crashing. The kernel sends that signal when the *thread* that
   forked the child ends, not the process, so every spawn goes through one daemon thread that lives as
   long as the interpreter; a ``ManagedProcess`` started from a short-lived worker thread would otherwise
   be killed the moment that thread returned. The signal reaches only the direct child, so components
   should be exec'd directly rather than wrapped in a shell.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path

from envtest.errors import ProcessError, StartTimeout, StopError

__all__ = ["ManagedProcess", "stop_all"]

POLL_INTERVAL = 0.1
"""Seconds between readiness probes, and between checks that a stopping group has emptied."""

KILL_TIMEOUT = 5.0
"""Seconds to wait for the process to be reaped after SIGKILL before stop() reports failure."""

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class ManagedProcess:
    """A child process with its own process group, an append-only log and a readiness probe.

    ``env`` is the child's complete environment, as with ``subprocess.Popen``; ``None`` inherits ours.
    ``ready`` is polled every ``POLL_INTERVAL`` s after spawning; an exception from it means "not yet".
    It should return within a second or so (give HTTP probes a short timeout): a probe that hangs
    holds start() past ``start_timeout``.
    Without a probe the process counts as ready once spawned, even one that exits at once.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[], bool] | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        die_with_parent: bool = True,
    ) -> None:
        if not argv:
            raise ValueError(f"{name}: argv must name a program")
        self.name = name
        self.argv: tuple[str, ...] = tuple(argv)
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.ready = ready
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.die_with_parent = die_with_parent
        # Serializes start/stop transitions; never held while waiting for readiness, so stop_all()
        # from another thread can interrupt a start that hangs.
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None  # set exactly while registered in _running
        self._returncode: int | None = None  # exit status of the last run, kept after reaping

    def __repr__(self) -> str:
        return f"<ManagedProcess {self.name} pid={self.pid} running={self.running}>"

    @property
    def pid(self) -> int | None:
        """Process id (and process group id) of the current run; None when not started or stopped."""
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def running(self) -> bool:
        proc = self._proc
        return proc is not None and _peek_exit(proc) is None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last run (negative: killed by that signal); None while running or unstarted."""
        proc = self._proc
        if proc is not None:
            return _peek_exit(proc)
        return self._returncode

    def start(self) -> None:
        """Spawn the process and wait until ``ready()`` is true; on any failure the process is stopped."""
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the process without waiting for it: several components can then start side by side
        (kube-apiserver retries etcd by itself). Follow with wait_ready()."""
        with self._lock:
            if self._proc is not None:
                if _peek_exit(self._proc) is None:
                    raise ProcessError(f"{self.name} is already running (pid {self._proc.pid})")
                self._reap_locked()  # exited on its own since; clean its group up before reusing
            self._spawn_locked()

    def wait_ready(self, until: Callable[[], bool] | None = None) -> None:
        """Wait until ``ready()`` is true (or ``until()``, an earlier stage of start-up, when given);
        on any failure (timeout, exit, Ctrl-C) the process is stopped."""
        proc = self._proc
        if proc is None:
            raise ProcessError(f"{self.name} was not spawned")
        try:
            self._wait_ready(proc, until or self.ready)
        except BaseException as exc:
            try:
                self.stop()
            except StopError as stop_exc:
                exc.add_note(f"while cleaning up: {stop_exc}")
            raise

    def stop(self) -> None:
        """Stop the process group: SIGTERM, wait ``stop_timeout``, SIGKILL, reap. Safe to call again."""
        with self._lock:
            if self._proc is not None:
                self._reap_locked()

    def restart(self) -> None:
        """Stop, then start again with the same argv, so the same ports and data directories are reused."""
        self.stop()
        self.start()

    def wait_exit(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the process to exit by itself; its exit status, or None if running."""
        proc = self._proc
        if proc is None:
            return self._returncode
        # Not proc.wait(): that would reap the leader, and stop() must still signal its group.
        deadline = time.monotonic() + timeout
        delay = 0.005
        while (code := _peek_exit(proc)) is None and time.monotonic() < deadline:
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, POLL_INTERVAL)
        return code

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log file (all runs), or a note that there is no log yet."""
        return _tail(self.log_path, lines)

    def _spawn_locked(self) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Append, so a restart keeps the previous run's output next to the new one for post-mortems.
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {shlex.join(self.argv)} ---\n".encode())
            log.flush()
            try:
                proc = _spawner.spawn(
                    lambda: subprocess.Popen(
                        self.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=self.env,
                        cwd=self.cwd,
                        # setsid: the child leads a new group we can signal as a whole, and a Ctrl-C
                        # aimed at pytest's terminal group does not kill components before teardown.
                        start_new_session=True,
                        preexec_fn=_pdeathsig_preexec() if self.die_with_parent else None,
                    )
                )
            except OSError as exc:
                raise ProcessError(f"cannot start {self.name} ({shlex.join(self.argv)}): {exc}") from exc
        self._proc = proc
        self._returncode = None
        _register(self)
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes], ready: Callable[[], bool] | None) -> None:
        started = time.monotonic()
        deadline = started + self.start_timeout
        last_error: Exception | None = None
        if ready is None:
            return  # checking poll() here would race a process that exits at once; be deterministic
        while True:
            code = _peek_exit(proc)
            if code is not None:
                if self._proc is not proc:
                    raise ProcessError(f"{self.name} was stopped while starting")
                raise ProcessError(
                    f"{self.name} exited with code {code} before it was ready; "
                    f"last log lines:\n{self.log_tail()}"
                )
            try:
                if ready():
                    return
                last_error = None
            except Exception as exc:  # a refused connection or a 503 is just "not yet"
                last_error = exc
            if time.monotonic() >= deadline:
                probe = f" (last probe error: {last_error!r})" if last_error else ""
                raise StartTimeout(
                    f"{self.name} not ready after {time.monotonic() - started:.0f}s{probe}; "
                    f"last log lines:\n{self.log_tail()}"
                ) from last_error
            # Most components are ready within a few hundred ms: poll fast first, then back off.
            time.sleep(min(POLL_INTERVAL, 0.01 + (time.monotonic() - started) / 20))

    def _reap_locked(self) -> None:
        """SIGTERM the group, wait for all of it, SIGKILL what is left, and only then reap the leader.

        Every signal goes out while the leader is unreaped (a zombie at worst), which pins its pid and
        so the group id to us; after ``proc.wait()`` below returns, this process's group is never
        signalled again. A leader reaped behind our back (someone else's ``os.wait()``) gets no signal.
        """
        proc = self._proc
        assert proc is not None
        try:
            _signal_group(proc, signal.SIGTERM)
            # Wait for the whole group, not just the leader: a helper that outlives its parent would
            # otherwise keep a port or a data directory busy for the next start. The unreaped leader
            # keeps the group's id ours meanwhile.
            deadline = time.monotonic() + self.stop_timeout
            delay = 0.005  # most components exit within milliseconds of SIGTERM; don't pay 100 ms each
            while time.monotonic() < deadline and (_peek_exit(proc) is None or _group_alive(proc)):
                time.sleep(delay)
                delay = min(delay * 2, POLL_INTERVAL)
            # Whatever is still in the group; harmless when only the zombie leader is left.
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(KILL_TIMEOUT)  # the reap: from here on the group id is no longer ours
            except subprocess.TimeoutExpired as exc:
                raise StopError(
                    f"{self.name} (pid {proc.pid}) survived SIGKILL for {KILL_TIMEOUT:.0f}s; "
                    "it is probably stuck in uninterruptible I/O"
                ) from exc
        finally:
            if proc.poll() is not None:
                self._returncode = proc.returncode
                self._proc = None
                _unregister(self)


# --- registry: every running process, so the interpreter never exits leaving one behind -----------------

# Holds strong references on purpose, but only while a process runs: a handle dropped by its owner must
# still be stopped at exit, and once stopped it is released and can be garbage-collected as usual.
# A dict rather than a set keeps start order, so stop_all() stops dependants (apiserver) before etcd.
_running: dict[int, ManagedProcess] = {}
_running_lock = threading.Lock()


def _register(proc: ManagedProcess) -> None:
    with _running_lock:
        _running[id(proc)] = proc


def _unregister(proc: ManagedProcess) -> None:
    with _running_lock:
        _running.pop(id(proc), None)


def stop_all() -> None:
    """Stop every ManagedProcess still running in this interpreter, newest first; registered atexit."""
    with _running_lock:
        procs = list(reversed(_running.values()))
    errors: list[str] = []
    for proc in procs:
        try:
            proc.stop()
        except Exception as exc:
            errors.append(f"{proc.name}: {exc}")
    if errors:
        raise StopError("failed to stop: " + "; ".join(errors))


def _forget_inherited() -> None:
    # A forked child (multiprocessing, xdist's fork start) inherits the registry but owns none of those
    # processes; its atexit must not stop its parent's control plane. Locks some other thread held at
    # the moment of the fork would stay held forever in the child, so they are replaced, not reused.
    global _running_lock
    _running.clear()
    _running_lock = threading.Lock()
    _spawner.lock = threading.Lock()


atexit.register(stop_all)
os.register_at_fork(after_in_child=_forget_inherited)


# --- spawning ------------------------------------------------------------------------------------------


class _Spawner:
    """Runs every Popen on one daemon thread, the only thread PR_SET_PDEATHSIG can safely be tied to."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()

    def spawn(self, popen: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        done: Future[subprocess.Popen[bytes]] = Future()
        with self.lock:
            # After a fork the thread object reports dead, and the child gets a spawner of its own.
            if self._thread is None or not self._thread.is_alive():
                self._requests = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), name="envtest-spawner", daemon=True
                )
                self._thread.start()
            self._requests.put((popen, done))
        return done.result()

    @staticmethod
    def _serve(requests: queue.SimpleQueue[_Request]) -> None:
        while True:
            popen, done = requests.get()
            try:
                done.set_result(popen())
            except BaseException as exc:  # the thread must outlive any one failed spawn
                done.set_exception(exc)


_Request = tuple[Callable[[], "subprocess.Popen[bytes]"], "Future[subprocess.Popen[bytes]]"]
_spawner = _Spawner()


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


# Resolved once in the parent: after fork only this thread exists, and loading a library there could
# deadlock on a loader lock some other thread held at the moment of the fork.
_prctl = _load_prctl()


def _pdeathsig_preexec() -> Callable[[], None] | None:
    prctl = _prctl
    if prctl is None:
        return None
    owner = os.getpid()
    option, sig = ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL)

    def preexec() -> None:
        prctl(option, sig)
        # If the owner died between fork and prctl, the signal will never come: we were already
        # reparented, so leave now instead of running as an orphan forever.
        if os.getppid() != owner:
            os._exit(1)

    return preexec


def _peek_exit(proc: subprocess.Popen[bytes]) -> int | None:
    """The leader's exit status (negative: the signal that killed it), None while it runs; never reaps.

    ``Popen.poll()`` would reap, after which the group id may be reused; ``waitid(WNOWAIT)`` reports
    the exit and leaves the zombie (and so the pid) to ``stop()``.
    """
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return proc.poll()  # reaped behind our back (another os.wait()); Popen records it as such
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return -info.si_status
    return info.si_status


def _leader_unreaped(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` is still our child, running or a zombie: then its pid, and the group id it
    leads, cannot have been handed to another process."""
    if proc.returncode is not None:
        return False
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    if not _leader_unreaped(proc):
        return  # the group id may already name someone else's group
    with contextlib.suppress(ProcessLookupError):  # the group is already empty
        os.killpg(proc.pid, sig)


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the group still has a live member (the leader's zombie does not count)."""
    if not _leader_unreaped(proc):
        return False  # nothing of it that we may look for by its id any more
    pgid = proc.pid
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member changed uid (setuid helper); it exists, we just may not signal it
    # kill() succeeds on zombies too (our unreaped leader is one once it exits), and an orphaned
    # zombie lingers until its new parent reaps it, which in containers whose init does not reap
    # promptly can take seconds; only live members count. Without /proc the leader is all we see.
    if sys.platform.startswith("linux"):
        return _live_member(pgid)
    return _peek_exit(proc) is None


def _live_member(pgid: int) -> bool:
    with os.scandir("/proc") as entries:  # closed on the early return too
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()  # comm may contain spaces and parens
            except OSError:
                continue  # exited while we looked
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


def _tail(path: Path, lines: int) -> str:
    # Read backwards in blocks: apiserver logs at high verbosity reach hundreds of megabytes.
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            pos, data = end, b""
            while pos > 0 and data.count(b"\n") <= lines:
                step = min(64 * 1024, pos)
                pos -= step
                fh.seek(pos)
                data = fh.read(step) + data
    except FileNotFoundError:
        return f"(no log file at {path})"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""
