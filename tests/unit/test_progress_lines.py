"""Progress lines from xdist workers share one stderr pipe: each must reach it in one write, or two
workers' lines run together (seen in CI: "…starting the control planeenvtest: starting a …")."""

from __future__ import annotations

import io

from envtest.plugin.session import write_line


class _RawRecorder(io.RawIOBase):
    """What the pipe receives: one entry per write(2) the stream makes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
        self.writes.append(bytes(b))
        return len(b)


def test_a_line_reaches_an_unbuffered_stream_in_one_write() -> None:
    # xdist (execnet) starts its workers with `python -u`: stderr unbuffered and written through,
    # each write() of the text stream a write(2) on the pipe.
    raw = _RawRecorder()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[arg-type]
    write_line(stream, "envtest: waiting for another process starting the control plane")
    write_line(stream, "envtest: starting a control plane")
    assert raw.writes == [
        b"envtest: waiting for another process starting the control plane\n",
        b"envtest: starting a control plane\n",
    ]


def test_print_would_have_split_the_line() -> None:
    # Why write_line exists: print() writes the newline separately, a second write(2).
    raw = _RawRecorder()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[arg-type]
    print("envtest: a line", file=stream, flush=True)
    assert raw.writes == [b"envtest: a line", b"\n"]
