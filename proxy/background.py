"""Background work of the proxy (cache fetches, refreshes): every failure is logged once and counted.

A failed background task is one WARNING line with what it was doing and why it failed, plus one
`insync_proxy_background_task_failures_total{task}` increment; never an unretrieved-exception traceback.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from insync_proxy.proxy.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.background")


def report_failure(metrics: ProxyMetrics, task: str, context: str, exc: BaseException) -> None:
    """Log one WARNING (`task` failed: `context`: why) and count it.

    An error whose cause was already logged where it happened (`already_logged`, e.g. the brokers refusing
    the proxy's credentials) is counted and logged at DEBUG only: one cause, one WARNING.
    """
    metrics.background_task_failures_total.labels(task).inc()
    if getattr(exc, "already_logged", False):
        log.debug("%s failed (%s): %s", task, context, exc)
        return
    log.warning("%s failed (%s): %s", task, context, exc or type(exc).__name__)

