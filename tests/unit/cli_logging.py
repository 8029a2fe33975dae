"""The root logger around a test that runs the operator's command line in this process.

`cli.logs.configure` points the root logger at the stderr of the moment: in a test, that is the test's
captured stderr, which pytest closes after the test. Left in place, the handler makes every later
test's log records fail to write ("--- Logging error ---" on the terminal).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mysql_operator.cli import logs


def cli_handlers() -> list[logging.Handler]:
    """The root logger's handlers that the operator's command line put there."""
    formats = (logs.KeyValueFormatter, logs.JsonFormatter)
    return [h for h in logging.getLogger().handlers if isinstance(h.formatter, formats)]


@contextmanager
def restored() -> Iterator[None]:
    """Remove what the command line added to the root logger, and put back the levels it set."""
    root, urllib3 = logging.getLogger(), logging.getLogger("urllib3")
    levels = root.level, urllib3.level
    try:
        yield
    finally:
        for handler in cli_handlers():
            root.removeHandler(handler)
            handler.close()
        root.setLevel(levels[0])
        urllib3.setLevel(levels[1])
