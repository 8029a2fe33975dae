"""The lines of a watch response, each as soon as it has arrived, without requests' `iter_lines`.

A watch answers with one JSON event per line. requests' `iter_lines` reads 512 bytes at a time and
joins the pieces of a line by concatenating them again for each piece, so a pod's 6 KiB event costs a
dozen reads and copies that grow with the line: 11 % of the operator's samples holding the GIL at 300
clusters (benchmarks/results/profile_reference_300.txt, py-spy --gil). Here a read takes whatever has
arrived, up to `READ_BYTES`:

* a chunked response (what kube-apiserver sends for a watch: one event per chunk, flushed) is read a
  chunk at a time, as urllib3's `read_chunked` hands them over;
* any other (a proxy that buffers and drops the chunking) is read with `read1`, which returns what the
  socket has rather than waiting for `READ_BYTES` to fill: an event never waits for the next one.
"""

from __future__ import annotations

from collections.abc import Iterator

import requests

READ_BYTES = 1 << 16


def _pieces(response: requests.Response) -> Iterator[bytes]:
    raw = response.raw
    if raw.chunked and raw.supports_chunked_reads():
        yield from raw.read_chunked(READ_BYTES, decode_content=True)
        return
    while piece := raw.read1(READ_BYTES, decode_content=True):
        yield piece


def watch_lines(response: requests.Response) -> Iterator[bytes]:
    """Each non-empty line of `response`'s body (no line end), in order; a last line without its line
    end is given when the body ends."""
    pending = b""
    for piece in _pieces(response):
        if pending:
            piece = pending + piece
        *lines, pending = piece.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if pending.strip():
        yield pending
