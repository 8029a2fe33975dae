"""Every code block of the documentation (docs/, operator/docs/ and the three READMEs), read with Sybil.

Why Sybil (and not pytest-examples or pytest-codeblocks): the pages hold Python, ini, TOML, YAML and
shell, and each needs its own check. Sybil takes a parser per language with an evaluator of our own,
keeps one namespace per page (a later block may use what an earlier one defined), and has a skip
directive that carries a reason. pytest-examples runs and formats Python only; pytest-codeblocks runs
Python and shell but has no hook for checking ini or TOML with pytest's own reader.

What happens to a block, by its info string:

- ```python — run by tests/unit/test_docs_blocks.py, in the page's namespace; it needs no cluster.
- ```ini / ```toml — read by pytest's own ini reader; every `envtest_*` key must be one the plugin
  registers, and no value may hold a `#` (pytest keeps an inline comment as part of the value).
- ```yaml — parsed (every document).
- ```<lang> title="path" — a file of the page's project: tests/e2e/test_docs_projects.py writes them
  out and runs pytest there against a real plane.
- anything else (sh, text, …) — must follow `<!-- skip: next "why it is not run" -->`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[1]
READMES = (ROOT / "README.md", ROOT / "envtest" / "README.md", ROOT / "operator" / "README.md")
TITLED = re.compile(r'^(?P<language>[\w+-]+)\s+title="(?P<title>[^"]+)"$')
CHECKED = ("python", "ini", "toml", "yaml")
SKIP = re.compile(r"<!--\s*skip:\s*(?P<args>.*?)\s*-->")


def pages() -> list[Path]:
    """The three READMEs, the operator's own pages (operator/docs/) and every page of docs/ (where a
    page that only includes another, `--8<-- "operator/docs/…"`, holds no block of its own)."""
    return [
        *READMES,
        *sorted((ROOT / "operator" / "docs").rglob("*.md")),
        *sorted((ROOT / "docs").rglob("*.md")),
    ]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- evaluators ------------------------------------------------------------------------------------


def ini_values(text: str, filename: str) -> dict[str, Any]:
    """The pytest settings ``text`` holds, read as pytest reads ``filename`` (pytest.ini, tox.ini,
    setup.cfg or pyproject.toml); an AssertionError names the problem."""
    from _pytest.config.findpaths import load_config_dict_from_file

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, filename)
        path.write_text(text)
        values = load_config_dict_from_file(path)
    assert values is not None, (
        f"pytest finds no settings in this {filename} (section [pytest] / [tool.pytest.ini_options])"
    )
    # pytest 9 wraps each value with where it came from; the value is what a run sees
    return {key: getattr(value, "value", value) for key, value in values.items()}


def check_envtest_keys(values: dict[str, Any]) -> None:
    from envtest.plugin.settings import ini_keys

    known = set(ini_keys())
    for key, value in values.items():
        if key.startswith("envtest_"):
            assert key in known, f"{key} is no ini key of the plugin (known: {', '.join(sorted(known))})"
        for item in value if isinstance(value, list) else [value]:
            assert "#" not in str(item), f"{key} = {item!r}: pytest keeps an inline comment in the value"


def _ini(example: Example) -> None:
    check_envtest_keys(ini_values(example.parsed, "pytest.ini"))


def _toml(example: Example) -> None:
    check_envtest_keys(ini_values(example.parsed, "pyproject.toml"))


def _yaml(example: Example) -> None:
    list(yaml.safe_load_all(example.parsed))


def _file(example: Example) -> None:
    """A file of the page's project: checked here as far as it can be alone, run by the E2E test."""
    language, title, source = example.parsed
    if language == "python":
        compile(source, title, "exec")
    elif language == "yaml":
        list(yaml.safe_load_all(source))
    elif language == "ini":
        check_envtest_keys(ini_values(source, Path(title).name))
    elif language == "toml":
        check_envtest_keys(ini_values(source, "pyproject.toml"))


def _unmarked(example: Example) -> None:
    language = example.parsed
    raise AssertionError(
        f"a ```{language} block is neither run by the suite nor marked as not runnable: put "
        '<!-- skip: next "the reason" --> before it'
    )


# -- parsers ---------------------------------------------------------------------------------------


class _Blocks:
    """Fenced blocks selected by their info string, each given to one evaluator."""

    def __init__(self, select: Any, evaluator: Any) -> None:
        self.lexer = FencedCodeBlockLexer(language=r".+", mapping={"language": "info", "source": "source"})
        self.select, self.evaluator = select, evaluator

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            info = region.lexemes["info"].strip()
            parsed = self.select(info, str(region.lexemes["source"]))
            if parsed is not None:
                region.parsed, region.evaluator = parsed, self.evaluator
                yield region


def _titled(info: str, source: str) -> tuple[str, str, str] | None:
    match = TITLED.match(info)
    return (match["language"], match["title"], source) if match else None


def _other(info: str, source: str) -> str | None:
    return None if info in CHECKED or TITLED.match(info) else (info or "(no language)")


def sybil() -> Sybil:
    return Sybil(
        parsers=[
            SkipParser(),
            PythonCodeBlockParser(),
            _Blocks(lambda info, src: src if info == "ini" else None, _ini),
            _Blocks(lambda info, src: src if info == "toml" else None, _toml),
            _Blocks(lambda info, src: src if info == "yaml" else None, _yaml),
            _Blocks(_titled, _file),
            _Blocks(_other, _unmarked),
        ],
        path=str(ROOT),
    )


def examples(page: Path) -> Iterator[Example]:
    yield from sybil().parse(page)


def skip_reasons(page: Path) -> list[str]:
    """Every skip directive's argument on the page (a directive without a reason lets a block pass
    unread, so each must give one)."""
    return [m["args"] for m in SKIP.finditer(page.read_text())]


def project_files(page: Path) -> dict[str, str]:
    """The page's titled blocks: relative path → content (a later block of the same path wins)."""
    files: dict[str, str] = {}
    for region in _Blocks(_titled, _file)(sybil().parse(page)):  # type: ignore[arg-type]
        _, title, source = region.parsed
        files[title] = source
    return files
