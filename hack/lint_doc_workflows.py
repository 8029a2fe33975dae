"""actionlint on the GitHub Actions workflows the documentation shows (`make lint`).

    python hack/lint_doc_workflows.py .venv/bin/actionlint

Every ```yaml block of docs/ that is a workflow (it has `on:` and `jobs:` with `runs-on:`) is written
into a scratch repository's .github/workflows/ and linted there, as a reader's copy would be.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.M | re.S)


def workflows() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for number, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            doc = yaml.safe_load(match[1])
            jobs = doc.get("jobs") if isinstance(doc, dict) else None
            # PyYAML reads the key `on` as True (YAML 1.1)
            is_workflow = isinstance(jobs, dict) and (True in doc or "on" in doc)
            if is_workflow and all(isinstance(j, dict) and "runs-on" in j for j in jobs.values()):
                name = page.relative_to(ROOT).as_posix().replace("/", "-")
                found.append((f"{name}-{number}.yml", match[1]))
    return found


def main(argv: list[str]) -> int:
    (actionlint,) = argv
    found = workflows()
    if not found:
        print("lint_doc_workflows: no workflow in docs/ (the pattern is wrong?)")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp, ".github", "workflows")
        where.mkdir(parents=True)
        for name, text in found:
            (where / name).write_text(text)
        subprocess.run(["git", "init", "-q", tmp], check=True, timeout=60)
        done = subprocess.run([str(Path(actionlint).resolve())], cwd=tmp, timeout=120)
    print(f"lint_doc_workflows: {len(found)} workflow(s) from docs/ linted")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
