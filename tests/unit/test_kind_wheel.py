"""`envtest kind up` from a non-editable install: the harness's wheel carries the default kind config
and everything the kind backend reads (the offline image's recipe data), and the installed package
finds them inside itself — nothing points back at a repository checkout.

The wheel is built from a copy of envtest/ (so no build/ or egg-info lands in the tree, and parallel
builds cannot collide) and installed with --no-deps into a fresh venv whose only other path entry is
this venv's site-packages (for the dependencies: a .pth there adds the directory, not the editable
install's own .pth, so `envtest` can only come from the wheel).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from envtest.binaries.nodespec import NodeImageSpec

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, envtest, envtest.kind, envtest.kindimage
from pathlib import Path
config = envtest.kind.DEFAULT_CONFIG
print(json.dumps({
    "package": str(Path(envtest.__file__).resolve().parent),
    "config": str(config),
    "config_is_file": config.is_file(),
    "tag": envtest.kindimage.offline_tag(),
}))
"""


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=180, **kwargs)  # type: ignore[call-overload]
    assert out.returncode == 0, f"{' '.join(argv)}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out  # type: ignore[no-any-return]


def test_the_wheel_ships_the_kind_config_and_the_installed_package_finds_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "envtest", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    _run([sys.executable, "-m", "build", "--wheel", str(src), "-o", str(tmp_path / "dist")])
    (wheel,) = (tmp_path / "dist").glob("kube_envtest-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "envtest/data/kind-config.yaml" in names
    assert {
        "envtest/binaries/nodeimage/data/capwrap/main.go",
        "envtest/binaries/nodeimage/data/pause/go.mod",
    } <= names

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    )

    seen = json.loads(_run([str(python), "-c", PROBE], cwd=tmp_path).stdout)
    package = Path(seen["package"])
    assert package == site / "envtest"  # the wheel's copy, not the checkout
    assert Path(seen["config"]) == package / "data" / "kind-config.yaml" and seen["config_is_file"]
    assert seen["tag"] == NodeImageSpec().tag()  # the recipe's data is all in the wheel
    tag = _run([str(python), "-m", "envtest.cli", "kind", "image", "tag"], cwd=tmp_path).stdout.strip()
    assert tag == seen["tag"]  # the CLI `envtest kind …` runs from the wheel too
