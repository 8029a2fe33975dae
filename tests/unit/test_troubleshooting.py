"""docs/troubleshooting.md has a section for every error and warning class the harness defines, and
quotes every message the harness raises with them."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import envtest
from envtest.errors import EnvtestError, EnvtestWarning

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
SOURCE = ROOT / "envtest" / "src" / "envtest"
WINDOW = 4
"""Consecutive words of a message's fixed text that the page must hold for the message to count as quoted."""

NOT_OURS = frozenset({"KeyError", "TypeError", "AttributeError", "RuntimeError", "AssertionError", "_Stop"})
"""Raised where Python's own protocol asks for them (a mapping's missing key, the wait loop's internal
stop), caught inside the harness: never what it tells a user. A ValueError is a bad argument to the
library (a fault Rule, a wait's timeout), so its messages are on the page too."""


def _classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(envtest.__path__, "envtest."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            ours = inspect.isclass(obj) and issubclass(obj, (EnvtestError, EnvtestWarning))
            if ours and obj.__module__ == info.name:
                found[name] = obj
    return found


def test_every_error_class_of_the_harness_has_a_section() -> None:
    headings = set(re.findall(r"^### (\w+)$", PAGE.read_text(), flags=re.M))
    classes = set(_classes())
    assert {"ConfigError", "InstallError", "FinalizerStuck", "HostError"} <= classes, classes
    assert sorted(classes - headings) == []


# -- every message ----------------------------------------------------------------------------------


def _fixed_text(node: ast.expr) -> list[str] | None:
    """The literal pieces of a message expression (an f-string's text between its values, a sum's
    literal terms, the message handed to a helper that decorates it); None when nothing of the message
    is written here (a variable, a join of parts made elsewhere)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        pieces, current = [], ""
        for value in node.values:
            if isinstance(value, ast.Constant):
                current += str(value.value)
            else:
                pieces.append(current)
                current = ""
        pieces.append(current)
        # `f"after {t:.0f}s"`: the unit belongs to the value, which the page writes as `Ns` or `…s`.
        return [pieces[0], *(re.sub(r"^s\b", "", p) for p in pieces[1:])]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        # A term written elsewhere is a value between literal pieces, as in an f-string.
        left, right = _fixed_text(node.left) or ["", ""], _fixed_text(node.right) or ["", ""]
        return [*left[:-1], left[-1] + right[0], *right[1:]]
    if isinstance(node, ast.Call) and node.args:
        return _fixed_text(node.args[0])  # self._failure(f"exited {rc}: …"): the helper adds its prefix
    return None


def _words(text: str) -> list[str]:
    """The words alone: quoting, punctuation and line breaks differ between a message and its quote;
    the page's placeholders (`…`, `N`, `Ns`, `…s`) stand for values, which are no words either."""
    text = re.sub(r"(…|\bN)s\b|\bN\b", " ", text)
    return re.findall(r"[A-Za-z0-9_]+", text.lower())


def raised_messages(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, class, the words of its fixed text) of each `raise SomeError("…")` whose message is
    written there. The values are left out: the page writes `…` for them, which is no word either."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        name = ast.unparse(node.exc.func).split(".")[-1]
        pieces = _fixed_text(node.exc.args[0])
        words = _words(" ".join(pieces or []))
        # A message of one fixed word (`f"{url}: HTTP {code}"`) is all values: nothing to look up.
        if name not in NOT_OURS and len(words) >= 2:
            found.append((node.lineno, name, words))
    return found


def quoted(words: list[str], page: str) -> bool:
    """Whether WINDOW consecutive words of the message (all of them, if fewer) are on the page."""
    text = f" {' '.join(_words(page))} "
    size = min(WINDOW, len(words))
    return any(f" {' '.join(words[i : i + size])} " in text for i in range(len(words) - size + 1))


def test_every_message_the_harness_raises_is_quoted_on_the_page() -> None:
    page = PAGE.read_text()
    missing = []
    for path in sorted(SOURCE.rglob("*.py")):
        for line, name, words in raised_messages(ast.parse(path.read_text())):
            if not quoted(words, page):
                missing.append(f"{path.relative_to(ROOT)}:{line}: {name}: {' '.join(words)}")
    assert missing == [], "not on docs/troubleshooting.md:\n" + "\n".join(missing)


def test_the_message_check_finds_a_message_missing_from_the_page() -> None:
    tree = ast.parse(
        "def f(x):\n"
        "    if x:\n"
        "        raise ConfigError(f'{x}: the widget factory is not callable')\n"
        "    raise KeyError(f'{x}: a mapping protocol, not a message for users')\n"
    )
    ((line, name, words),) = raised_messages(tree)
    assert (line, name, words) == (3, "ConfigError", ["the", "widget", "factory", "is", "not", "callable"])
    assert not quoted(words, "| `…: the widget` | … factory |")
    assert quoted(words, "| `…: the widget factory is not callable` | … |")
    assert quoted(words, "`…: the widget\nFactory is` |")  # a line break or a capital inside the quote
    assert raised_messages(ast.parse("raise InstallError(f'{url}: HTTP {code}')")) == []
