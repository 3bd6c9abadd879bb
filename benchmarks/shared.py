"""What the benchmarks share: progress lines, a process's CPU time, load threads and the JSON summary.

Imported as `benchmarks.shared` (the repository's root on sys.path, as every benchmark puts it there).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.proxy_process import ProxyProcess
    from insync_proxy.devcluster.cluster import LocalKafkaCluster


def say(line: str) -> None:
    """A progress line, on stderr (stdout is the report's)."""
    print(line, file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """CPU time of a process so far: the sum of its live threads' run time (Linux /proc/<pid>/task/*/schedstat).

    Nanoseconds, where /proc/<pid>/stat counts 10 ms clock ticks: a 4 s round of a proxy at 1,000
    requests costs ~0.1 s of CPU, 10 ticks, so a tick is 10% of the figure. Threads that exit in between
    are not counted (the proxies' threads live as long as they do). Falls back to utime + stime.
    """
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    except FileNotFoundError:
        total = 0
    if total:
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_threads(target: Callable[..., None], args: list[tuple[Any, ...]], timeout: float) -> float:
    """One daemon thread per argument tuple running `target`; each waited for at most `timeout` seconds.
    Returns the seconds from the first start to the last join (failures are the caller's to collect)."""
    threads = [threading.Thread(target=target, args=a, daemon=True) for a in args]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return time.perf_counter() - started


def stop_run(proxy: ProxyProcess | None, cluster: LocalKafkaCluster) -> None:
    """The end of a run: the proxy stopped and its directory removed, the cluster stopped and removed."""
    if proxy is not None:
        proxy.stop()
        shutil.rmtree(proxy.dir, ignore_errors=True)
    cluster.stop()
    cluster.cleanup()


def json_default(value: object) -> object:
    """What json.dumps cannot write itself: sets sorted, anything else as its text."""
    if isinstance(value, set):
        return sorted(value)
    return str(value)


def write_summary(results: dict[str, Any], output: Path, name: str, stamp: str) -> Path:
    """The run's JSON summary, `<output>/<name>-<stamp>.json`, with the load average at its end."""
    results["loadavg_at_end"] = os.getloadavg()
    output.mkdir(parents=True, exist_ok=True)
    out = output / f"{name}-{stamp}.json"
    out.write_text(json.dumps(results, indent=2, default=json_default) + "\n")
    return out
