"""Relay one kwok port-forward stream (stdin/stdout) to the target a test registered for the pod port.

Run by kwok, once per connection: ``python -I forward.py <pods root>/<ns>/<pod>/ports/<port>``. The
file holds ``host:port``. Standard library only and no envtest import, so it starts in milliseconds.
An unregistered port exits 1 with a message that kwok hands back to the client.
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump_in(sock: socket.socket) -> None:
    while data := os.read(0, 65536):
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: forward.py <target file>", file=sys.stderr)
        return 2
    target_file = argv[1]
    try:
        with open(target_file) as f:
            host, _, port = f.read().strip().rpartition(":")
    except FileNotFoundError:
        parts = target_file.rstrip("/").split("/")
        ns, pod, number = parts[-4], parts[-3], parts[-1]
        print(
            f"no port-forward target registered for port {number} of pod {ns}/{pod} "
            f"(envtest: fake_pods.serve_port / register_port; expected {target_file})",
            file=sys.stderr,
        )
        return 1
    if not host or not port.isdigit():
        print(f"port-forward target file {target_file}: want HOST:PORT, not {host}:{port!r}", file=sys.stderr)
        return 1
    try:
        sock = socket.create_connection((host, int(port)))
    except OSError as exc:
        print(f"port-forward target {host}:{port} ({target_file}): {exc}", file=sys.stderr)
        return 1
    threading.Thread(target=_pump_in, args=(sock,), daemon=True).start()
    out = sys.stdout.buffer
    while data := sock.recv(65536):
        out.write(data)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
