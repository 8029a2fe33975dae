"""A clean plane per test module, two ways: a private plane each (`private_cluster`) against the
session's plane reset before each module (`envtest_reset = module`), as pytest runs them.

    python benchmarks/bench_reset.py [--rounds 3] [--modules 6]
    python benchmarks/bench_reset.py --rounds 4 --against-src <checkout> --out <file>
    python benchmarks/bench_reset.py --crds ''        # a session without CRDs

A throwaway project holds `--modules` test modules and, as its session's CRDs (`envtest_crds`), a
copy of `--crds` (a folder or a file; default: this repository's api/crd, whose CEL rules
kube-apiserver compiles). Each test makes the same objects under the same names (a namespace, a
Deployment whose pods kwok runs, ConfigMaps), so a plane that was not clean would make it fail with
409. The modes run in turn, rotating their order each round (templates on in all but `fresh`, whatever
the shell's ENVTEST_PLANE_TEMPLATE says):

- `private:all`, `private:minimal`: every test asks for `private_cluster` (its own plane);
- `fresh:all`, `fresh:minimal`: the same without plane templates (`ENVTEST_PLANE_TEMPLATE=0`): what
  each private plane would cost as an ordinary start;
- `reset:all`, `reset:minimal`: every test uses the session's `cluster`, reset before its module.

Recorded per run: pytest's wall time, each test's setup time (the fixture's request to a ready,
clean plane: a private plane's start, or the reset), from pytest's own reports, and the plugin's
line for each reset (what it deleted and wrote back, in how many passes). The session plane's
start in the reset modes is the first test's setup, reported apart. Writes
benchmarks/results/reset.json (or `--out`) with every raw sample.

`--against-src DIR`: each mode runs twice a round, with this harness and with the one in another
checkout (DIR/envtest/src first on PYTHONPATH, so pytest loads that plugin; the bench refuses to run
when either would be imported from elsewhere), which goes first alternating by round (give an even
`--rounds`): what a change bought.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmeta import ROOT, import_origin, run_metadata

from envtest import binaries
from envtest.plane.template import ENV as TEMPLATE_ENV

RESULTS = ROOT / "benchmarks" / "results" / "reset.json"
CRDS = ROOT / "api" / "crd"

TEST = """
import time

def _ready(cluster, path, want):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = cluster.session.get(f"{{cluster.server}}/{{path}}", timeout=10).json()["items"]
        if sum(p.get("status", {{}}).get("phase") == "Running" for p in pods) == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"{{want}} pods not Running")

def test_work({fixture}):
    cluster = {fixture}
    post = lambda path, body: cluster.session.post(f"{{cluster.server}}/{{path}}", json=body, timeout=10)
    assert post("api/v1/namespaces", {{"metadata": {{"name": "work"}}}}).status_code == 201
    for i in range(20):
        cm = {{"metadata": {{"name": f"cm-{{i}}"}}, "data": {{"k": "v"}}}}
        assert post("api/v1/namespaces/work/configmaps", cm).status_code == 201
    if "kube-controller-manager" in cluster.components:
        labels = {{"app": "work"}}
        spec = {{"containers": [{{"name": "c", "image": "x"}}]}}
        deployment = {{
            "metadata": {{"name": "web"}},
            "spec": {{"replicas": 3, "selector": {{"matchLabels": labels}},
                     "template": {{"metadata": {{"labels": labels}}, "spec": spec}}}},
        }}
        assert post("apis/apps/v1/namespaces/work/deployments", deployment).status_code == 201
        _ready(cluster, "api/v1/namespaces/work/pods", 3)
"""

CONFTEST = """
import json, os

def pytest_runtest_logreport(report):
    if report.when == "setup":
        with open(os.environ["BENCH_SETUPS"], "a") as fh:
            record = {"test": report.nodeid, "seconds": report.duration, "outcome": report.outcome}
            fh.write(json.dumps(record) + "\\n")
"""


def write_project(root: Path, modules: int, crds: Path | None) -> None:
    ini = "[pytest]\nenvtest_job_pods = hold\n"
    if crds is not None:
        if crds.is_dir():
            shutil.copytree(crds, root / "crds")
        else:
            (root / "crds").mkdir()
            shutil.copy2(crds, root / "crds")
        ini += "envtest_crds = crds\n"
    (root / "pytest.ini").write_text(ini)
    (root / "conftest.py").write_text(CONFTEST)
    for i in range(modules):
        for fixture in ("private_cluster", "cluster"):
            folder = root / fixture
            folder.mkdir(exist_ok=True)
            (folder / f"test_m{i:02d}.py").write_text(TEST.format(fixture=fixture))


MODES = ("private:all", "fresh:all", "reset:all", "private:minimal", "fresh:minimal", "reset:minimal")


def run(root: Path, mode: str, env: dict[str, str]) -> dict[str, object]:
    kind, components = mode.split(":")
    setups = root / f"setups-{kind}-{components}.jsonl"
    setups.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--envtest-components={components}",
        str(root / ("cluster" if kind == "reset" else "private_cluster")),
    ]
    # Templates on for every mode but `fresh`, whatever the caller's shell says.
    env = {**env, "BENCH_SETUPS": str(setups), TEMPLATE_ENV: "0" if kind == "fresh" else "1"}
    if kind == "reset":
        argv.append("--envtest-reset=module")
    began = time.monotonic()
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    wall = time.monotonic() - began
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    records = [json.loads(line) for line in setups.read_text().splitlines()] if setups.exists() else []
    seconds = [round(r["seconds"], 4) for r in records]
    sample: dict[str, object] = {"mode": mode, "wall_seconds": round(wall, 3), "exit": proc.returncode}
    sample["summary"] = tail
    if proc.returncode != 0:
        sample["output_tail"] = (proc.stdout + proc.stderr)[-3000:]
    # The plugin's own line for each reset: what it deleted and wrote back, in how many passes.
    sample["resets"] = re.findall(r"plane reset before \S+: (.*)", proc.stdout)
    if kind == "reset":  # the first setup starts the session's plane; the rest are resets
        sample["session_start_seconds"], sample["setup_seconds"] = (
            (seconds[0], seconds[1:]) if seconds else (None, [])
        )
    else:
        sample["setup_seconds"] = seconds
    return sample


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modules", type=int, default=6)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--against-src", type=Path, metavar="DIR", help="also run the harness from DIR")
    parser.add_argument(
        "--crds",
        default=str(CRDS),
        metavar="PATH",
        help="the session's CRDs, a folder or a file ('' for none; default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    crds = Path(args.crds).resolve() if args.crds else None
    if crds is not None and not crds.exists():
        parser.error(f"--crds: {args.crds} does not exist")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(modes) - set(MODES):
        parser.error(f"--modes: unknown {sorted(unknown)}; valid: {', '.join(MODES)}")
    envs = {"this": dict(os.environ)}
    origins = {"this": import_origin("envtest", envs["this"])}
    here = (ROOT / "envtest" / "src").resolve()
    if here not in Path(origins["this"]).resolve().parents:
        raise SystemExit(f"envtest would be imported from {origins['this']}, not this checkout's {here}")
    if args.against_src:
        src = (args.against_src / "envtest" / "src").resolve()
        envs["base"] = {**os.environ, "PYTHONPATH": str(src)}
        origins["base"] = import_origin("envtest", envs["base"])
        if src not in Path(origins["base"]).resolve().parents:
            raise SystemExit(f"--against-src: envtest would be imported from {origins['base']}, not {src}")
    binaries.resolve_all(["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"])
    meta = run_metadata()
    samples: list[dict[str, object]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-reset-") as tmp:
        root = Path(tmp)
        write_project(root, args.modules, crds)
        for r in range(args.rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            # Which harness goes first alternates by round, for every mode alike (an even --rounds
            # gives each the first place as often); the modes' own order rotates besides.
            impls = list(envs) if r % 2 == 0 else list(reversed(envs))
            for mode in order:
                for impl in impls:
                    sample = run(root, mode, envs[impl])
                    sample["round"], sample["impl"] = r + 1, impl
                    samples.append(sample)
                    failed |= sample["exit"] != 0
                    print(json.dumps(sample), file=sys.stderr, flush=True)
    summary = {impl: summarize([s for s in samples if s["impl"] == impl], modes) for impl in envs}
    result = {
        **meta,
        "kubernetes": binaries.k8s_version(),
        "rounds": args.rounds,
        "modules": args.modules,
        "crds": None if crds is None else str(crds.relative_to(ROOT) if crds.is_relative_to(ROOT) else crds),
        TEMPLATE_ENV: {"fresh": "0", "private, reset": "1"},
        "envtest_imported_from": origins,
        "summary": summary["this"],
        **({"summary_base": summary["base"]} if "base" in summary else {}),
        "samples": samples,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 1 if failed else 0


def summarize(samples: list[dict[str, object]], modes: list[str]) -> dict[str, dict[str, float | None]]:
    """Per mode, over the passing runs: the median setup, wall time and session start."""
    summary: dict[str, dict[str, float | None]] = {}
    for mode in modes:
        ok = [s for s in samples if s["mode"] == mode and s["exit"] == 0]
        setups = [x for s in ok for x in s["setup_seconds"]]  # type: ignore[attr-defined]
        starts = [s["session_start_seconds"] for s in ok if s.get("session_start_seconds") is not None]
        summary[mode] = {
            "setup_seconds_median": round(statistics.median(setups), 3) if setups else None,
            "wall_seconds_median": round(statistics.median(s["wall_seconds"] for s in ok), 3) if ok else None,  # type: ignore[misc]
            "session_start_seconds_median": round(statistics.median(starts), 3) if starts else None,  # type: ignore[arg-type]
        }
    return summary


if __name__ == "__main__":
    sys.exit(main())
