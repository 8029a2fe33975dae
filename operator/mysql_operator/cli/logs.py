"""Structured logs: one line per record, `key=value` (logfmt) or JSON.

Fields passed with `extra={...}` become keys of the line, so call sites write
(Keys must not be LogRecord attributes such as `name`, `msg` or `module`: logging raises on those.)
`log.info("created", extra={"kind": "StatefulSet", "object": name})` and grep/jq can filter on them.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    fields.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
    if record.exc_info:
        fields["error"] = logging.Formatter().formatException(record.exc_info)
    return fields


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c in text for c in ' ="\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str)


def configure(level: str = "info", fmt: str = "kv") -> None:
    """Send every logger's records to stderr in the chosen format (`kv` or `json`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # urllib3 logs every connection at debug; that drowns the operator's own lines.
    logging.getLogger("urllib3").setLevel(max(root.level, logging.INFO))
