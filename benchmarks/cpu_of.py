"""Run a command and print its wall time and the CPU seconds of its whole process tree.

    python benchmarks/cpu_of.py -- insync-proxy stream --input-dir in/ --output out/ \\
        --checkpoint ckpt/ --available-now

A JVM that PySpark starts is a child the command may never wait for, so its CPU time never reaches the
command's own rusage: this samples every descendant's user + system time from ``/proc`` (Linux) every
0.1 s and adds each process's last reading (what a process spends in its last 0.1 s is missed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.shared import process_tree  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def descendants_cpu(root: int) -> dict[int, float]:
    """CPU seconds (user + system) of every live descendant of ``root``, by pid."""
    found: dict[int, float] = {}
    for pid in process_tree([root]):
        if pid == root:
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    started = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[int, float] = {}
    while proc.poll() is None:
        for pid, cpu in descendants_cpu(os.getpid()).items():
            seen[pid] = max(seen.get(pid, 0.0), cpu)
        time.sleep(0.1)
    print(f"wall {time.monotonic() - started:.1f} s, CPU {sum(seen.values()):.1f} s of {len(seen)} process(es); "
          f"exit status {proc.returncode}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
