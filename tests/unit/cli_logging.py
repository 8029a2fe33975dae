"""The root logger around a test that runs the operator's command line in this process.

`cli.logs.configure` replaces the root logger's handlers with one that writes to the stderr of the
moment, and sets the root level to INFO. In a test, that stderr is pytest's capture: closed after a test
that uses `capsys` (every later record then fails to write: "--- Logging error ---"), and otherwise
shared, so later tests' records would land in their output. It would also drop pytest's own handlers
(`--log-file`, live logs) for the rest of the run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from mysql_operator.cli import logs


def cli_handlers() -> list[logging.Handler]:
    """The root logger's handlers that the operator's command line put there."""
    cli_formatters = (logs.KeyValueFormatter, logs.JsonFormatter)
    return [h for h in logging.getLogger().handlers if isinstance(h.formatter, cli_formatters)]


@contextmanager
def restored() -> Iterator[None]:
    """While inside: `logs.configure` keeps the root logger's other handlers (pytest's). Afterwards:
    what it added is removed, and the levels it set are put back."""
    root, urllib3 = logging.getLogger(), logging.getLogger("urllib3")
    root_level, urllib3_level = root.level, urllib3.level
    configure = logs.configure

    def keeping_others(level: str = "info", fmt: str = "kv") -> None:
        others = [h for h in root.handlers if h not in cli_handlers()]
        configure(level, fmt)
        root.handlers[:0] = others

    try:
        with mock.patch.object(logs, "configure", keeping_others):
            yield
    finally:
        for handler in cli_handlers():
            root.removeHandler(handler)
            handler.close()
        root.setLevel(root_level)
        urllib3.setLevel(urllib3_level)
