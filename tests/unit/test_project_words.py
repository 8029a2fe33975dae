"""The project speaks of itself only: no tracked file (docs, docstrings, comments, data) refers to the
issue tracker by number, to the environment it was developed in, or to files that are not in it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "an issue number": re.compile(r"\bissues?\s*#?\s*[1-9][0-9]?\b", re.I),
    "a mission": re.compile(r"\bmissions?\b", re.I),
    "a design document not in the repository": re.compile(r"\bDESIGN\.md\b"),
    "a style guide not in the repository": re.compile(r"\bSTYLE\.md\b"),
    "the development environment": re.compile(r"\bsandbox(?:es|ed)?\b", re.I),
}
# Kubernetes' own meaning: a pod's sandbox (the pause container, the exec directory of a fake pod),
# and code names built on it. The development environment is never one of these.
POD_SANDBOX = re.compile(
    r"(pod'?s?|per-pod|exec|fake pods'|containerd's)\s+sandbox(es)?|sandbox\s+image|"
    r"[`\"'/._(*]sandbox|sandbox[`\"'/._(*]|sandbox(Exec|LogsFile)|sandboxes and port targets",
    re.I,
)
SELF = Path(__file__).relative_to(ROOT)


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [Path(p) for p in out.split("\0") if p and Path(p) != SELF]


def _hits(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(line):
                if what == "the development environment" and _pod_sandbox(line, match):
                    continue
                found.append(f"{number}: {what}: {line.strip()[:120]}")
    return found


def _pod_sandbox(line: str, match: re.Match[str]) -> bool:
    start, end = match.span()
    window = line[max(0, start - 16) : end + 24]
    return POD_SANDBOX.search(window) is not None


def test_no_tracked_file_names_an_issue_the_environment_or_missing_files() -> None:
    problems = []
    for rel in _tracked():
        path = ROOT / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # a binary file holds no prose
        problems += [f"{rel}:{hit}" for hit in _hits(text)]
    assert problems == [], "\n".join(problems)


def test_the_check_catches_each_kind_and_spares_a_pod_sandbox() -> None:
    assert _hits("as issue 19 asks") and _hits("see Issue #7") and _hits("the mission says")
    assert _hits("not in DESIGN.md") and _hits("read STYLE.md") and _hits("on this sandbox docker fails")
    assert _hits("no default route in sandboxes")
    assert not _hits("exec runs in the pod's sandbox directory (`sandbox/`)")
    assert not _hits("containerd's sandbox image; fake_pods.sandbox(pod)")
    assert not _hits("kubernetes/kubernetes#67250 and 19 issues of kind")


# A path in a document that starts at one of the repository's folders (or at a package, for a module)
# names a file of this repository; paths of a reader's own project (`config/rbac/role.yaml`,
# `myop/testing.py`) start elsewhere and are not checked.
PATH = re.compile(
    r"(?<![\w/.~$<{-])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\.(?:py|md|ya?ml|toml|json|txt|sh))\b"
)
PACKAGES = ("plugin", "plane", "binaries", "webhooks", "faults", "adapters", "mysql_operator")


def _top_folders(tracked: list[Path]) -> set[str]:
    return {p.parts[0] for p in tracked if len(p.parts) > 1}


def missing_paths(text: str, where: Path, tracked: set[str], tops: set[str]) -> list[str]:
    """The repository paths ``text`` (a document at ``where``) names that no tracked file has."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            ref = match[1]
            first = ref.split("/", 1)[0]
            ours = first in tops or (first in PACKAGES and ref.endswith(".py"))
            relative = (where.parent / ref).as_posix()
            exists = ref in tracked or relative in tracked or any(t.endswith(f"/{ref}") for t in tracked)
            if ours and not exists:
                found.append(f"{number}: {ref}")
    return found


def test_every_repository_path_a_document_names_exists() -> None:
    files = _tracked()
    tracked = {p.as_posix() for p in files} | {SELF.as_posix()}  # this file is left out of _tracked()
    tops = _top_folders(files)
    problems = []
    for rel in files:
        if rel.suffix == ".md":
            problems += [
                f"{rel}:{hit}" for hit in missing_paths((ROOT / rel).read_text(), rel, tracked, tops)
            ]
    assert problems == [], "\n".join(problems)


def test_the_path_check_spares_a_readers_project_and_catches_a_gone_module() -> None:
    tracked = {"envtest/src/envtest/plugin/cleanup.py", "docs/ci.md", "hack/run.py"}
    tops = {"envtest", "docs", "hack"}
    doc = Path("docs/page.md")
    assert missing_paths("see `hack/run.py` and `plugin/cleanup.py`", doc, tracked, tops) == []
    assert missing_paths("your `config/rbac/role.yaml`, `myop/testing.py`", doc, tracked, tops) == []
    assert missing_paths("[ci](ci.md), `hack/gone.py`", doc, tracked, tops) == ["1: hack/gone.py"]
    assert missing_paths("removed: `plugin/ahead.py`", doc, tracked, tops) == ["1: plugin/ahead.py"]
