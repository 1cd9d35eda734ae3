"""The service's logs: JSON lines by default when stderr is not a terminal, plain text on
one, at ``HANDOFF_TRACE_LOG_LEVEL``.

A JSON line is one object: ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, and the event's own fields. ``handoff_trace.request`` writes one line per HTTP
request (``request_id``, ``method``, ``route``, ``path``, ``status``, ``duration_ms``,
``principal``: ``token:NAME``, ``user:NAME`` or null; ``app.web.observe``);
``handoff_trace.ingest`` one line per ingest (``request_id``, ``route``, ``counts``).
uvicorn's access log is off: the request line replaces it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

# Attributes every LogRecord has; anything else on a record is an event field.
# uvicorn's ``color_message`` repeats the message with terminal colours.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        doc.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The message, then the event's fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STANDARD)
        line = f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def use_json(log_format: str, stream: Any = None) -> bool:
    if log_format != "auto":
        return log_format == "json"
    stream = sys.stderr if stream is None else stream
    return not (hasattr(stream, "isatty") and stream.isatty())


def log_config(log_level: str, log_format: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for ``serve``: the service's loggers and uvicorn's
    error log through one handler on stderr; no access log."""
    formatter = "json" if use_json(log_format) else "text"
    handler = {
        "class": "logging.StreamHandler",
        "formatter": formatter,
        "stream": "ext://sys.stderr",
    }
    level = log_level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "app.web.logs.JsonFormatter"},
            "text": {"()": "app.web.logs.TextFormatter"},
        },
        "handlers": {"default": handler},
        "loggers": {
            "handoff_trace": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            # httpx logs each request's URL at INFO: a webhook target's URL may hold its
            # credential (app.notify.worker), so never below WARNING, whatever the level.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }
