"""The proxy's logging: text or JSON lines on stderr, and the interval of the summaries of repeated lines
(proxy/observability/logs.py), set up by `run` and changed live by a reload."""

from __future__ import annotations

import datetime
import json
import logging
import sys

from insync_proxy.proxy.config.defaults import SUMMARY_INTERVAL_SECONDS
from insync_proxy.proxy.observability.logs import set_summary_interval

#: Marks the handler `setup_logging` installed: a reload changes its format, and no one else's.
_OURS = "_insync_proxy_handler"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLogFormatter(logging.Formatter):
    """log_format = "json": one JSON object a line with time (UTC, ISO 8601), level, logger and message."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    """The formatter of a log_format (`text` or `json`)."""
    return JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def setup_logging(level: str, log_format: str = "text",
                  summary_interval_seconds: float = SUMMARY_INTERVAL_SECONDS) -> None:
    """One handler on stderr for every logger, at `level`; repeated lines summarised every
    `summary_interval_seconds` (`log_summary_interval_seconds`)."""
    set_summary_interval(summary_interval_seconds)
    handler = logging.StreamHandler(sys.stderr)
    setattr(handler, _OURS, True)
    handler.setFormatter(formatter(log_format))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True)
    logging.getLogger("insync_proxy").setLevel(getattr(logging, level.upper(), logging.INFO))


def apply_logging(level: str, log_format: str, summary_interval_seconds: float = SUMMARY_INTERVAL_SECONDS) -> None:
    """A reload: the proxy's loggers take `level`; the handler `setup_logging` installed (if any) takes the
    format and, with the root logger, the level; repeated lines take the summary interval from their next window."""
    set_summary_interval(summary_interval_seconds)
    number = getattr(logging, level.upper(), logging.INFO)
    logging.getLogger("insync_proxy").setLevel(number)
    root = logging.getLogger()
    for handler in root.handlers:
        if getattr(handler, _OURS, False):
            root.setLevel(number)
            if isinstance(handler.formatter, JsonLogFormatter) != (log_format == "json"):
                handler.setFormatter(formatter(log_format))


def log_format_in_use() -> str | None:
    """`json` or `text`: the format of the handler `setup_logging` installed; None without one."""
    for handler in logging.getLogger().handlers:
        if getattr(handler, _OURS, False):
            return "json" if isinstance(handler.formatter, JsonLogFormatter) else "text"
    return None
