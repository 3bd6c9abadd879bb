"""Defaults of settings that the runtime also reads: they live with the settings (settings.py), and the
runtime modules that use them import them from here (budget.py, logs.py, broker_ports.py), never the
other way round: configuration imports no runtime module."""

from __future__ import annotations

from typing import Final

#: The budget of a sidecar: `max_buffered_bytes`'s default.
DEFAULT_MAX_BUFFERED_BYTES: Final = 64 * 1024 * 1024
#: One write buffer's ceiling: `max_buffered_bytes_per_connection`'s default (the high-water mark of
#: both write buffers of a connection).
DEFAULT_PER_CONNECTION_BYTES: Final = 4 * 1024 * 1024
#: Seconds a cause's repeats are gathered into one summary line, until `set_summary_interval` says otherwise:
#: the default of the setting `log_summary_interval_seconds`.
SUMMARY_INTERVAL_SECONDS: Final = 60.0
#: node ids 0-89 at broker_port_base + node id: with the default base 9100, ports 9100-9189, below admin 9190.
DEFAULT_NODE_ID_RANGES: Final = ("0-89",)
