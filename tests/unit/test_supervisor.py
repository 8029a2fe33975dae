"""The supervisor liveness protocol: a state file counts only while its supervisor holds the lock,
and nothing that does not hold it is ever signalled (a hard kill, then pid reuse)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from supervisor_fakes import bystander, lock_holder, reap, write_state

from envtest.errors import UsageProblem
from envtest.plane import supervisor


def test_state_with_a_live_unrelated_pid_and_no_lock_holder_reads_as_stale(tmp_path: Path) -> None:
    other = bystander()
    try:
        write_state(tmp_path, other.pid)
        (tmp_path / supervisor.LOCK_FILE).touch()  # left by a supervisor that was SIGKILLed
        assert supervisor.read_state(tmp_path) is None
    finally:
        reap(other)


def test_state_reads_live_while_its_supervisor_holds_the_lock_and_stale_once_it_dies(tmp_path: Path) -> None:
    holder = lock_holder(tmp_path)
    try:
        write_state(tmp_path, holder.pid)
        state = supervisor.read_state(tmp_path)
        assert state is not None and state.pid == holder.pid
    finally:
        reap(holder)
    assert supervisor.read_state(tmp_path) is None


def test_reading_the_state_does_not_take_the_lock_from_its_supervisor(tmp_path: Path) -> None:
    holder = lock_holder(tmp_path)
    try:
        write_state(tmp_path, holder.pid)
        for _ in range(3):
            assert supervisor.read_state(tmp_path) is not None
        assert supervisor.lock_held(tmp_path)
    finally:
        reap(holder)


def test_stop_never_signals_a_live_pid_when_nobody_holds_the_lock(tmp_path: Path) -> None:
    other = bystander()
    try:
        write_state(tmp_path, other.pid)
        assert supervisor.stop(tmp_path, timeout=1) is False
        assert other.poll() is None, "an unrelated process was signalled"
    finally:
        reap(other)


def test_stop_never_signals_a_reused_pid_even_while_a_new_supervisor_holds_the_lock(tmp_path: Path) -> None:
    # The recorded supervisor died; its pid now belongs to `other`, and a new supervisor holds the
    # lock but has not written its own state yet. The recorded start time tells the two apart.
    holder, other = lock_holder(tmp_path), bystander()
    try:
        start = supervisor.pid_start_time(other.pid)
        assert start is not None
        write_state(tmp_path, other.pid, pid_start=start - 1)
        assert supervisor.read_state(tmp_path) is None
        assert supervisor.stop(tmp_path, timeout=1) is False
        assert other.poll() is None and holder.poll() is None
    finally:
        reap(holder, other)


def test_stop_terminates_the_lock_holder_and_returns_once_the_lock_is_free(tmp_path: Path) -> None:
    holder = lock_holder(tmp_path)
    try:
        write_state(tmp_path, holder.pid)
        assert supervisor.stop(tmp_path, timeout=10) is True
        assert holder.wait(timeout=5) == -signal.SIGTERM
        assert not supervisor.lock_held(tmp_path)
    finally:
        reap(holder)


def test_a_second_supervisor_for_the_same_folder_is_refused(tmp_path: Path) -> None:
    holder = lock_holder(tmp_path)
    try:
        with pytest.raises(supervisor.AlreadySupervised, match=r"supervisor\.lock"):
            supervisor.hold_lock(tmp_path, timeout=0.05)
    finally:
        reap(holder)
    supervisor.hold_lock(tmp_path, timeout=0.05).close()  # free again once the holder is gone


def test_pid_start_time_is_known_for_live_processes_only() -> None:
    assert isinstance(supervisor.pid_start_time(os.getpid()), int)
    assert supervisor.pid_start_time(2**22 + 1) is None  # above pid_max: never a process


def test_reusing_a_plane_with_other_settings_names_each_and_the_down_command(tmp_path: Path) -> None:
    state = write_state(tmp_path / "kept", os.getpid(), job_pods="complete")
    with pytest.raises(UsageProblem) as info:
        supervisor.check_reusable(
            state, version="1.36.0", components=["etcd", "kube-apiserver", "kwok"], job_pods="hold"
        )
    message = str(info.value)
    for part in ("k8s version: running 1.37.2, asked for 1.36.0", "components:", "job_pods:"):
        assert part in message
    assert "-m envtest.cli down --name kept" in message
    supervisor.check_reusable(
        state, version="1.37.2", components=["kube-apiserver", "etcd"], job_pods="complete"
    )


def test_plane_dirs_skip_the_lock_files_kept_planes_leave_beside_them(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / ".kept.lock").touch()
    (tmp_path / "stray-file").touch()
    assert supervisor.plane_dirs(tmp_path) == [tmp_path / "kept"]
    assert supervisor.plane_dirs(tmp_path / "missing") == []


KWOK_PLANE = ["etcd", "kube-apiserver", "kwok"]


def test_reusing_a_plane_with_other_pod_exec_or_streams_names_the_setting(tmp_path: Path) -> None:
    state = write_state(tmp_path / "kept", os.getpid(), components=KWOK_PLANE, pod_exec=True)
    with pytest.raises(UsageProblem, match="pod_exec: running on, asked for off"):
        supervisor.check_reusable(state, version="1.37.2", components=KWOK_PLANE, job_pods="complete")
    with pytest.raises(UsageProblem, match="pod_streams: running on, asked for off"):
        supervisor.check_reusable(
            state, version="1.37.2", components=KWOK_PLANE, job_pods="complete", pod_streams=False
        )
    supervisor.check_reusable(
        state, version="1.37.2", components=KWOK_PLANE, job_pods="complete", pod_exec=True
    )


def test_pod_exec_and_streams_compare_by_what_the_plane_serves(tmp_path: Path) -> None:
    """Without streams there is no exec, and without kwok neither: asking for them off changes nothing."""
    no_streams = write_state(tmp_path / "a", os.getpid(), components=KWOK_PLANE, pod_streams=False)
    assert (
        supervisor.differences(
            no_streams,
            version="1.37.2",
            components=KWOK_PLANE,
            job_pods="complete",
            pod_streams=False,
            pod_exec=False,
        )
        == []
    )
    assert supervisor.differences(
        no_streams, version="1.37.2", components=KWOK_PLANE, job_pods="complete"
    ) == ["pod_streams: running off, asked for on"]
    minimal = write_state(tmp_path / "b", os.getpid(), pod_streams=False, pod_exec=False)
    assert (
        supervisor.differences(minimal, version="1.37.2", components=minimal.components, job_pods="complete")
        == []
    )


@pytest.mark.parametrize(("streams", "exec_"), [(True, True), (True, False), (False, True), (False, False)])
def test_the_supervisor_reads_back_the_pod_settings_launch_writes(
    tmp_path: Path, streams: bool, exec_: bool
) -> None:
    from envtest.plane import supervise

    argv = supervisor.supervise_argv(
        tmp_path, name="p", components=KWOK_PLANE, pod_streams=streams, pod_exec=exec_
    )
    assert argv[1:3] == ["-m", "envtest.plane.supervise"]
    args = supervise.build_parser().parse_args(argv[3:])
    assert (args.pod_streams, args.pod_exec) == (streams, exec_)
