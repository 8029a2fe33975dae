"""No CI job can hang for the runner's six hours: every job of the project's workflows and of the
workflows the documentation gives readers has a time limit of its own, and every pytest command in the
documented recipes runs under pytest-timeout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.M | re.S)


def _recipes() -> list[tuple[str, dict[str, Any]]]:
    """(page:block, document) of every yaml block of docs/ that is a CI configuration."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for number, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            doc = yaml.safe_load(match[1])
            if isinstance(doc, dict):
                found.append((f"{page.relative_to(ROOT)}:{number}", doc))
    return found


def _github_jobs(doc: dict[str, Any]) -> dict[str, Any]:
    jobs = doc.get("jobs")
    return jobs if isinstance(jobs, dict) and all("runs-on" in j for j in jobs.values()) else {}


def _gitlab_jobs(doc: dict[str, Any]) -> dict[str, Any]:
    return {name: job for name, job in doc.items() if isinstance(job, dict) and "script" in job}


def unbounded_github_jobs(doc: dict[str, Any]) -> list[str]:
    return [
        name
        for name, job in _github_jobs(doc).items()
        if not (isinstance(job.get("timeout-minutes"), int) and job["timeout-minutes"] > 0)
    ]


def test_every_job_of_the_projects_workflows_has_timeout_minutes() -> None:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {p.name for p in workflows} >= {"ci.yml", "release.yml"}
    unbounded = []
    for path in workflows:
        doc = yaml.safe_load(path.read_text())
        assert _github_jobs(doc), f"{path.name}: no jobs read"
        unbounded += [f"{path.name}: {job}" for job in unbounded_github_jobs(doc)]
    assert unbounded == []


def test_every_documented_ci_job_has_a_limit_and_runs_pytest_under_one() -> None:
    github = [(where, doc) for where, doc in _recipes() if _github_jobs(doc)]
    gitlab = [(where, doc) for where, doc in _recipes() if _gitlab_jobs(doc)]
    assert github and gitlab, "the CI recipes are gone from docs/"
    problems = [
        f"{where}: {job} has no timeout-minutes"
        for where, doc in github
        for job in unbounded_github_jobs(doc)
    ]
    problems += [
        f"{where}: {name} has no timeout"
        for where, doc in gitlab
        for name, job in _gitlab_jobs(doc).items()
        if not job.get("timeout")
    ]
    commands = [
        line
        for _, doc in github + gitlab
        for line in re.findall(r"^.*\bpytest\b.*$", yaml.safe_dump(doc, width=1000), flags=re.M)
        if re.search(r"\bpytest( |$)", line)
    ]
    assert commands, "no pytest command found in the recipes"
    problems += [f"pytest without --timeout: {line.strip()}" for line in commands if "--timeout=" not in line]
    assert problems == [], "\n".join(problems)


def test_a_job_without_a_limit_is_found() -> None:
    doc = {"on": "push", "jobs": {"a": {"runs-on": "x", "timeout-minutes": 5}, "b": {"runs-on": "x"}}}
    assert unbounded_github_jobs(doc) == ["b"]
    assert unbounded_github_jobs({"jobs": {"c": {"runs-on": "x", "timeout-minutes": 0}}}) == ["c"]
