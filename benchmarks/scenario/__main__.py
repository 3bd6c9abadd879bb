"""`python -m benchmarks.scenario`: the scenario runner's command line (the package's docstring says what runs)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import benchmarks.scenario
from benchmarks.scenario import report
from benchmarks.scenario.clock import say
from benchmarks.scenario.proxy import choose_build
from benchmarks.scenario.runner import YearRun


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scenario", description=benchmarks.scenario.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=100, help="VerifiableProducer records a second (100)")
    parser.add_argument("--latency-rate", type=float, default=0.0,
                        help="records a second of each Java latency producer (default: half its maximum one record "
                             "at a time, measured directly at the start)")
    parser.add_argument("--out", type=Path, help="where the summary, timeline and logs go (a new temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the summary JSON here")
    parser.add_argument("--interpreted", action="store_true",
                        help="run the interpreted build (default: the compiled one, made first when missing)")
    args = parser.parse_args(argv)
    build = choose_build(args.interpreted)
    work = args.out or Path(tempfile.mkdtemp(prefix="insync-year-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"a year in {args.minutes:g} minutes; working in {work}")
    run = YearRun(args.minutes, work, rate=args.rate, latency_rate=args.latency_rate, build=build)
    summary = run.run()
    report.write_outputs(run.found, run.now(), summary, work, args.json)
    print(report.table(summary))
    print(f"summary: {work / 'summary.json'}; timeline: {summary['timeline_png']} and {summary['timeline_svg']}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
