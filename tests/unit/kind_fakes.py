"""Stand-ins for what the kind backend drives through subprocesses and HTTP — the `kind` and `docker`
binaries and the apiserver of the cluster they would have made — so the backend (and the real
pytest-kind-ng it is built on) runs here without docker. Never a stand-in for pytest_kind itself.

The fake docker answers `info` (a daemon runs, unless FAKE_DOCKER_DOWN is set), `image inspect` from
FAKE_DOCKER_IMAGES (the pinned node image by default), fails every `pull` (no registry) and answers
`exec <node> cat /kind/version` with the cluster's version (`set_clusters(version=…)`, else v1.37.0).

The fake kind keeps its clusters in a JSON file (`{"name": {"running": bool}}`) and appends every
argv it is called with to a log, one JSON list per line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envtest.pins import PINNED

KIND = r"""#!{python}
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_KIND_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
state_file = Path(os.environ["FAKE_KIND_STATE"])
state = json.loads(state_file.read_text()) if state_file.exists() else {{}}


def opt(name):
    for i, a in enumerate(args):
        if a.startswith("--" + name + "="):
            return a.split("=", 1)[1]
        if a == "--" + name:
            return args[i + 1]


def kubeconfig(name):
    server = os.environ.get("FAKE_KIND_SERVER", "https://127.0.0.1:6443")
    ctx = "kind-" + name
    return json.dumps({{
        "apiVersion": "v1", "kind": "Config", "current-context": ctx,
        "clusters": [{{"name": ctx, "cluster": {{"server": server}}}}],
        "users": [{{"name": ctx, "user": {{"token": "fake"}}}}],
        "contexts": [{{"name": ctx, "context": {{"cluster": ctx, "user": ctx}}}}],
    }})


cmd = args[:2]
if cmd == ["get", "clusters"]:
    print("\n".join(state))
elif cmd == ["get", "nodes"]:
    if opt("name") in state:
        print(opt("name") + "-control-plane")
elif cmd == ["get", "kubeconfig"]:
    if opt("name") not in state:
        sys.exit("ERROR: could not locate any control plane nodes")
    print(kubeconfig(opt("name")))
elif cmd == ["create", "cluster"]:
    if opt("name") in state:
        sys.exit("ERROR: node(s) already exist for a cluster with the name " + opt("name"))
    state[opt("name")] = {{"running": True}}
    Path(opt("kubeconfig")).write_text(kubeconfig(opt("name")))
elif cmd == ["delete", "cluster"]:
    state.pop(opt("name"), None)
else:
    sys.exit("fake kind: unexpected " + " ".join(args))
state_file.write_text(json.dumps(state))
"""

DOCKER = r"""#!{python}
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
if args[:1] == ["info"]:  # a daemon that answers, unless FAKE_DOCKER_DOWN is set
    if os.environ.get("FAKE_DOCKER_DOWN"):
        sys.exit("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
    print("28.0.0")
    sys.exit(0)
if args[:2] == ["image", "inspect"]:  # the node images docker "has": FAKE_DOCKER_IMAGES
    sys.exit(0 if args[-1] in os.environ.get("FAKE_DOCKER_IMAGES", "").split(",") else 1)
if args[:1] == ["pull"]:  # no registry here
    sys.exit("Error response from daemon: dial tcp: lookup registry-1.docker.io: no such host")
state = json.loads(Path(os.environ["FAKE_KIND_STATE"]).read_text())
if args[:1] == ["exec"] and args[2:] == ["cat", "/kind/version"]:
    for name, info in state.items():
        if args[1] == name + "-control-plane" and info["running"]:
            print(info.get("version", "v1.37.0"))
            sys.exit(0)
    sys.exit("Error response from daemon: container " + args[1] + " is not running")
container = sys.argv[-1]
if os.environ.get("FAKE_DOCKER_INSPECT_ERROR"):  # a daemon that cannot answer now
    sys.exit(os.environ["FAKE_DOCKER_INSPECT_ERROR"])
for name, info in state.items():
    if container == name + "-control-plane":
        print("true" if info["running"] else "false")
        sys.exit(0)
sys.exit("Error: No such object: " + container)
"""


class FakeKind:
    """A directory with `kind` and `docker` on PATH (set by `install`), their state and argv log."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.state_file = root / "state.json"
        self.log_file = root / "argv.log"
        self.log_file.touch()
        for name, text in (("kind", KIND), ("docker", DOCKER)):
            path = self.bin / name
            path.write_text(text.format(python=sys.executable))
            path.chmod(0o755)
        self.kind = self.bin / "kind"

    def install(self, monkeypatch: pytest.MonkeyPatch, server: str | None = None) -> FakeKind:
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        # Cluster kubeconfigs live under the cache: a fake cluster named like a real one (`envtest`)
        # must never replace the real one's file (pytester's HOME alone misses a set XDG_CACHE_HOME).
        monkeypatch.setenv("XDG_CACHE_HOME", str(self.bin.parent / "cache"))
        monkeypatch.setenv("FAKE_KIND_STATE", str(self.state_file))
        monkeypatch.setenv("FAKE_KIND_LOG", str(self.log_file))
        monkeypatch.setenv("FAKE_DOCKER_IMAGES", PINNED.kind_node_image)  # as after `docker pull`
        if server:
            monkeypatch.setenv("FAKE_KIND_SERVER", server)
        return self

    def set_clusters(self, version: str | None = None, **running: bool) -> None:
        """Clusters by name, running or stale; `version`: what their nodes' /kind/version says."""
        extra = {"version": version} if version else {}
        self.state_file.write_text(json.dumps({n: {"running": r, **extra} for n, r in running.items()}))

    def clusters(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log_file.read_text().splitlines()]

    def commands(self) -> list[str]:
        """`create cluster`, `delete cluster`, … in the order kind was called."""
        return [" ".join(argv[:2]) for argv in self.calls()]


READY_OBJECTS: dict[str, Any] = {
    "/version": {"gitVersion": "v1.37.0"},
    "/api/v1/nodes": {
        "items": [
            {
                "metadata": {"name": "envtest-control-plane"},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
        ]
    },
    "/apis/apps/v1/namespaces/kube-system/deployments/coredns": {
        "metadata": {"name": "coredns"},
        "status": {"conditions": [{"type": "Available", "status": "True"}]},
    },
    "/apis/storage.k8s.io/v1/storageclasses": {
        "items": [
            {
                "metadata": {
                    "name": "standard",
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                }
            }
        ]
    },
    "/api/v1/namespaces/default/serviceaccounts/default": {"metadata": {"name": "default"}},
}


@contextmanager
def ready_apiserver() -> Iterator[str]:
    """An HTTP endpoint answering the GETs a ready kind cluster answers (readiness, /version), 404
    for any other GET, and accepting every write. Yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = READY_OBJECTS.get(self.path.split("?")[0])
            data = json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _accept_write(self) -> None:
            # A persistent cluster gets the run's record (envtest.runs): writes succeed, echoed back.
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
            self.send_response(201 if self.command == "POST" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_PUT = do_PATCH = do_DELETE = _accept_write

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
