"""User-space instructions per Produce request of whole proxy processes, counted by callgrind (not a test).

    python benchmarks/instructions_bench.py [--rate 100] [--seconds 8] [--in-flight 4] [--relay]
                                            [--proxy-arg=--no-audit ...] CHECKOUT [CHECKOUT ...]

CPU time per request moves with the machine's load (caches, frequency, the load generator falling behind);
an instruction count does not: the same on a busy machine as on a quiet one, so two builds can be told apart
by a few percent while other work runs. Each checkout's insync-proxy (as built there: `./scripts/compile`)
runs under `valgrind --tool=callgrind` in front of loopback_bench.py's instant fake broker, with the relay
(benchmarks/byte_relay.py) beside them when asked; each is warmed up, its counters are zeroed
(`callgrind_control -z`), loopback_bench's load runs (16 KiB Produce v12, acks=-1, 4 connections; `--rate`
requests/s in all, default 100: a read per request, as at a moderate rate; 0 for the in-flight window full)
and the counters are dumped: instructions / requests answered. The kernel's work is not counted (the same
syscalls for every target: loopback_bench.py counts them). valgrind counts a `rep movsb` copy per byte: the
16 KiB copy of each request's read is ~16,700 of every target's count, a fraction of a microsecond in reality.
The dumps stay in the printed directory for `callgrind_annotate` (the connections' setup, opened once per
run, is in them: about 2,800 a request at the default rate and length).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import loopback_bench as lb  # noqa: E402
from insync_proxy.devcluster.cluster import free_ports  # noqa: E402


def dumped_total(path: Path) -> int:
    """The instructions of a callgrind dump (its `summary:` line)."""
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("checkouts", nargs="+", type=Path, help="source trees whose insync-proxy runs")
    parser.add_argument("--rate", type=float, default=100, help="requests/s in all (default 100; 0: window full)")
    parser.add_argument("--seconds", type=float, default=8, help="measured load per target (default 8)")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight per connection at most")
    parser.add_argument("--relay", action="store_true", help="count the bare uvloop relay too")
    parser.add_argument("--proxy-arg", action="append", default=[], help="extra `insync-proxy run` argument")
    args = parser.parse_args(argv)
    py = os.path.realpath(sys.executable)  # valgrind runs the interpreter itself, not a shim
    me = str(ROOT / "benchmarks" / "loopback_bench.py")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    broker_port, relay_port = free_ports(2)
    work = Path(tempfile.mkdtemp(prefix="insync-instructions-"))
    processes: list[subprocess.Popen[Any]] = []

    def load(port: int, seconds: float, rate: float) -> int:
        out = subprocess.run([py, me, "--load", str(port), str(seconds), "4", str(args.in_flight), "12", str(rate)],
                             check=True, capture_output=True, text=True, timeout=seconds + 600, env=env)
        return int(out.stdout.strip())

    def callgrind(out: Path, command: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(["valgrind", "--tool=callgrind", "--compress-strings=no", f"--callgrind-out-file={out}", *command],
                                   stderr=subprocess.DEVNULL, **kwargs)
        processes.append(process)
        return process

    try:
        broker = subprocess.Popen([py, me, "--fake-broker", str(broker_port)], stdout=subprocess.PIPE, text=True,
                                  env=env)
        processes.append(broker)
        assert broker.stdout is not None
        broker.stdout.readline()
        targets: list[tuple[str, subprocess.Popen[Any], int, Path]] = []
        for i, checkout in enumerate(args.checkouts):
            bootstrap, admin, base = free_ports(3)
            directory = work / f"{i}-{checkout.resolve().name}"
            directory.mkdir()
            proxy = callgrind(directory / "callgrind.out", [
                py, "-m", "insync_proxy", "run", "--bootstrap-servers", f"127.0.0.1:{broker_port}",
                "--bootstrap-port", str(bootstrap), "--broker-port-base", str(base - 1), "--admin-port", str(admin),
                "--audit-directory", str(directory / "audit"), "--log-level", "WARNING", *args.proxy_arg],
                cwd=directory, env=dict(os.environ, PYTHONPATH=str(checkout.resolve())), stdout=subprocess.DEVNULL)
            lb.wait_until(lambda p=admin: lb._ready(f"http://127.0.0.1:{p}/readyz"), 600, f"{checkout}'s /readyz")
            load(bootstrap, 3, 50)  # the first Metadata opens the listener of node 1
            lb.wait_until(lambda p=base: lb._listening(p), 120, f"{checkout}'s listener of node 1")
            targets.append((str(checkout), proxy, base, directory / "callgrind.out"))
        if args.relay:
            relay = callgrind(work / "relay.out", [py, str(ROOT / "benchmarks" / "byte_relay.py"),
                                                   f"{relay_port}:127.0.0.1:{broker_port}"],
                              stdout=subprocess.PIPE, text=True)
            assert relay.stdout is not None
            relay.stdout.readline()
            targets.append(("relay", relay, relay_port, work / "relay.out"))
        for _name, _process, port, _out in targets:
            load(port, 3, args.rate)  # warm up
        print(f"Produce v12, 16 KiB, acks=-1, 4 connections, "
              f"{f'{args.rate:,.0f} requests/s' if args.rate else f'{args.in_flight} in flight each'}, "
              f"instant fake broker; user-space instructions per request (callgrind; dumps in {work})")
        for name, process, port, out in targets:
            subprocess.run(["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True)
            n = load(port, args.seconds, args.rate)
            subprocess.run(["callgrind_control", "-d", "measured", str(process.pid)], check=True, capture_output=True)
            time.sleep(1)
            dump = max(out.parent.glob(out.name + ".*"), key=lambda f: f.stat().st_mtime)
            print(f"{name}: {n} requests, {dumped_total(dump) / n:,.0f} instructions each ({dump.name})", flush=True)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
