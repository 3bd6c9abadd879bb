"""The benchmarks' toolkit: progress lines; processes (their trees, memory, ports listening, stopping them and the
children a run starts); CPU time (of a process, of a tree between two snapshots, of a block); load threads; the
JSON summary.

Imported as `benchmarks.shared` (the repository's root on sys.path, as every benchmark puts it there). What the
tests use too lives in harness/: the proxy as its own process (harness/proxy_process.py) and the raw requests,
Fetch requests included (harness/raw_client.py: fetch_request_body, next_offset).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


def rss_mib(pid: int) -> float:
    """A process's resident memory now (VmRSS), MiB; NaN when /proc has none for it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def cpu_meter(pid: int, into: dict[str, float]) -> Iterator[None]:
    """Measures the wall time and the CPU seconds `pid` used inside the block."""
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    try:
        yield
    finally:
        into["wall_s"] = time.perf_counter() - wall
        into["cpu_s"] = cpu_seconds(pid) - cpu


def process_tree(roots: Iterable[int]) -> list[int]:
    """The root pids and every live descendant (one scan of /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [r for r in roots if Path(f"/proc/{r}").exists()]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU counters at one moment."""

    threads: frozenset[int]
    run_ns: int  # sum of its live threads' run time (/proc/<pid>/task/*/schedstat): exact, but forgets dead threads
    ticks: float  # utime + stime in seconds (/proc/<pid>/stat): every thread's, dead ones too, in 10 ms steps
    children: float  # cutime + cstime in seconds: reaped children's whole lives


def cpu_snapshot(roots: Iterable[int]) -> dict[int, ProcessCpu]:
    """The CPU counters of the processes and their live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in process_tree(roots):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            threads, run_ns = [], 0
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    run_ns += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                    threads.append(int(tid))
                except (OSError, IndexError, ValueError):
                    continue
            out[pid] = ProcessCpu(frozenset(threads), run_ns, (int(fields[11]) + int(fields[12])) / tick,
                                  (int(fields[13]) + int(fields[14])) / tick)
        except (OSError, IndexError, ValueError):
            continue
    return out


def activity(roots: Iterable[int]) -> dict[str, int]:
    """Wakeups and I/O syscalls of the processes and their live descendants, so far: `wakeups` sums the live
    threads' voluntary context switches (a thread that slept in epoll_wait, a futex, a read and was woken),
    `preempted` their involuntary ones; `reads` / `writes` are /proc/<pid>/io's syscr / syscw (read(v) and
    write(v) calls, every thread's, dead ones too; socket calls made with recvmsg/sendmsg are not counted)."""
    out = {"wakeups": 0, "preempted": 0, "reads": 0, "writes": 0}
    for pid in process_tree(roots):
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                        if line.startswith("voluntary_ctxt_switches:"):
                            out["wakeups"] += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            out["preempted"] += int(line.split()[1])
                except OSError:
                    continue
            io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
            out["reads"] += int(io["syscr"])
            out["writes"] += int(io["syscw"])
        except (OSError, ValueError, KeyError):
            continue
    return out


def cpu_between(before: dict[int, ProcessCpu], after: dict[int, ProcessCpu]) -> float:
    """CPU seconds a process tree used between two snapshots.

    A process whose threads are the same in both counts by its threads' run time (nanoseconds); one whose
    threads changed (a JVM stops idle compiler threads) by its utime + stime, which keep dead threads' time;
    one born in between by all it has used; one reaped in between shows up in its parent's children counters
    with its whole life, so what it had used before is taken off again.
    """
    total = 0.0
    for pid, a in after.items():
        b = before.get(pid)
        if b is None:
            total += a.run_ns / 1e9 if a.run_ns else a.ticks
        elif a.threads == b.threads and a.run_ns and b.run_ns:
            total += (a.run_ns - b.run_ns) / 1e9
        else:
            total += a.ticks - b.ticks
        total += a.children - (b.children if b else 0.0)
    for pid, b in before.items():
        if pid not in after:
            total -= b.ticks
    return total


def tree_memory(roots: Iterable[int]) -> dict[str, float]:
    """RSS and PSS (MiB) summed over the processes, and how many processes there are."""
    rss = pss = 0
    pids = process_tree(roots)
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return {"rss_mib": rss / 1024, "pss_mib": pss / 1024, "processes": len(pids)}


def wait_listening(ports: Iterable[int], timeout: float, alive: Callable[[], bool]) -> None:
    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if not alive():
                    raise RuntimeError("exited before listening") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"port {port} not listening after {timeout:.0f}s") from None
                time.sleep(0.1)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Processes:
    """Every child a benchmark starts outside the cluster and proxy (Kafka's performance tools' JVMs, an echo
    server): killed at the end of the run (`kill_all`), and with the benchmark's process if it dies first."""

    def __init__(self) -> None:
        self.running: set[subprocess.Popen[bytes]] = set()

    def run(self, cmd: list[str], timeout: float = 600) -> tuple[int, str]:
        """Runs a command to its end in a session of its own: its exit status and its output (stdout and stderr
        together, as text). Killed when it outlives `timeout` (subprocess.TimeoutExpired then)."""
        # Imported here: the toolkit's readings (cpu_of.py's among them) load no dev cluster.
        from insync_proxy.devcluster.cluster import _die_with_parent

        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_die_with_parent)
        self.running.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            self.running.discard(proc)
        return proc.returncode, out.decode(errors="replace")

    def kill_all(self) -> None:
        for proc in list(self.running):
            if proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        self.running.clear()


CHILDREN = Processes()


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
