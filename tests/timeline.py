"""Where a suite run's wall time went, per worker: `python -m tests.timeline FILE`.

FILE is what `INSYNC_TEST_TIMELINE=FILE ./scripts/test` wrote (tests/conftest.py): one JSON line per test with
its worker, group, start, end and the machine's busy CPU seconds meanwhile. Printed: each worker's groups in the
order it ran them, each group's wall seconds, test count and machine CPU (a group's own cost when it ran alone,
`-n 0`), and the run's span.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.timeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", type=Path, help="what INSYNC_TEST_TIMELINE=FILE ./scripts/test wrote")
    args = parser.parse_args(argv)
    try:
        text = args.file.read_text(encoding="utf-8")
    except OSError as exc:
        parser.error(f"cannot read {args.file}: {exc.strerror}")
    records = [json.loads(line) for line in text.splitlines() if line]
    if not records:
        print(f"{args.file}: no test recorded", file=sys.stderr)
        return 1
    begin = min(r["start"] for r in records)
    end = max(r["end"] for r in records)
    by_worker: dict[str, list[dict[str, object]]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r["start"]):
        by_worker[record["worker"]].append(record)
    print(f"span of the tests: {end - begin:.0f} s, {len(records)} tests, {len(by_worker)} worker(s)")
    for worker, tests in sorted(by_worker.items()):
        busy = sum(float(t["end"]) - float(t["start"]) for t in tests)  # type: ignore[arg-type]
        last = max(float(t["end"]) for t in tests)  # type: ignore[arg-type]
        print(f"\n{worker}: busy {busy:.0f} s, done at +{last - begin:.0f} s")
        groups: list[tuple[str, float, float, int, float]] = []
        for t in tests:
            unit, start, stop = str(t["unit"]), float(t["start"]), float(t["end"])  # type: ignore[arg-type]
            cpu = float(t.get("machine_cpu", 0.0))  # type: ignore[arg-type]
            if groups and groups[-1][0] == unit:
                _, first, _, count, total = groups[-1]
                groups[-1] = (unit, first, stop, count + 1, total + cpu)
            else:
                groups.append((unit, start, stop, 1, cpu))
        for unit, start, stop, count, cpu in groups:
            print(f"  +{start - begin:5.0f} s  {stop - start:6.1f} s  {count:4d} tests  machine CPU {cpu:6.1f} s  {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
