"""Every code block of docs/ and the three READMEs: run, parsed, or marked as not runnable with a
reason (tests/docblocks.py says which, and why Sybil reads them). Titled blocks are files of a page's
project; tests/e2e/test_docs_projects.py runs those against a real plane."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import SkipTest

import docblocks
import pytest

PAGES = docblocks.pages()


@pytest.mark.parametrize("page", PAGES, ids=docblocks.page_id)
def test_each_block_runs_or_says_why_not(page: Path) -> None:
    for reason in docblocks.skip_reasons(page):
        assert re.fullmatch(r'next\s+"[^"]{10,}"', reason), (
            f'{docblocks.page_id(page)}: <!-- skip: {reason} --> must be `next "<why it is not run>"`'
        )
    for example in docblocks.examples(page):
        try:
            example.evaluate()
        except SkipTest:
            continue  # marked, with its reason


def test_an_ini_value_with_an_inline_comment_is_refused(tmp_path: Path) -> None:
    values = docblocks.ini_values("[pytest]\nenvtest_crds = config/crd   # the CRDs\n", "pytest.ini")
    assert values["envtest_crds"] == "config/crd   # the CRDs"  # what pytest really reads
    with pytest.raises(AssertionError, match="inline comment"):
        docblocks.check_envtest_keys(values)
    with pytest.raises(AssertionError, match="envtest_crd is no ini key"):
        docblocks.check_envtest_keys({"envtest_crd": "x"})


def test_an_unmarked_shell_block_fails_and_a_marked_one_is_skipped(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('```sh\nmake test\n```\n\n<!-- skip: next "needs docker" -->\n```sh\nmake kind-up\n```\n')
    first, skip, second = list(docblocks.examples(page))
    with pytest.raises(Exception, match="neither run by the suite nor marked"):
        first.evaluate()
    skip.evaluate()
    with pytest.raises(SkipTest, match="needs docker"):
        second.evaluate()


def test_every_page_is_read_and_the_projects_are_found() -> None:
    ids = {docblocks.page_id(p) for p in PAGES}
    assert {"README.md", "envtest/README.md", "operator/README.md", "docs/configuration.md"} <= ids
    assert {"operator/docs/failover.md", "operator/docs/operations.md"} <= ids  # the operator's own pages
    assert set(docblocks.project_files(docblocks.ROOT / "docs/getting-started/kopf.md")) >= {
        "pytest.ini",
        "widgets/handlers.py",
        "test_widgets.py",
    }
