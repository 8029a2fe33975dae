"""Fail when a deleted kind cluster left anything in docker: its containers or kind's network.

Run after `envtest kind down` (`make kind-down`), which itself checks that the node containers'
volumes went with them (only it knows which they were); lists what it found, exits 1 if anything.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def docker(*args: str) -> list[str]:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="envtest")
    args = parser.parse_args()
    found = {
        "containers": docker(
            "ps",
            "-a",
            "--filter",
            f"label=io.x-k8s.kind.cluster={args.name}",
            "--format",
            "{{.Names}} {{.Status}}",
        ),
        "kind network": docker("network", "ls", "--filter", "name=^kind$", "--format", "{{.Name}}"),
    }
    left = {k: v for k, v in found.items() if v}
    for what, items in left.items():
        print(
            f"kind_leftovers: {what} left after deleting {args.name!r}: {', '.join(items)}", file=sys.stderr
        )
    if not left:
        print(f"kind_leftovers: nothing of kind cluster {args.name!r} left in docker")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
