"""Background work of the proxy (cache fetches, refreshes): every failure is counted and logged, rate-limited.

A failed background task is one `insync_proxy_background_task_failures_total{task}` increment and one
WARNING line with what it was doing and why it failed, never an unretrieved-exception traceback. Clients
can make a task fail again and again (a Metadata request per cache miss while the brokers are away), so
a task's repeats within the summary interval are one summary line (proxy/observability/logs.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from insync_proxy.proxy.observability.logs import RateLimitedLog, error_text

if TYPE_CHECKING:
    from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.background")
_repeated = RateLimitedLog(log)


def report_failure(metrics: ProxyMetrics, task: str, context: str, exc: BaseException) -> None:
    """Count it and log one WARNING (`task` failed: `context`: why), rate-limited per task.

    An error whose cause was already logged where it happened (`already_logged`, e.g. the brokers refusing
    the proxy's credentials) is counted and logged at DEBUG only: one cause, one WARNING.
    """
    metrics.background_task_failures_total.labels(task).inc()
    if getattr(exc, "already_logged", False):
        log.debug("%s failed (%s): %s", task, context, error_text(exc))
        return
    _repeated.warning(task, "%s failed (%s): %s", task, context, error_text(exc))

