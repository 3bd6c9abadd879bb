"""`python -m benchmarks.scenario`: the scenario runner's command line (benchmarks/scenario/runner.py)."""

import sys

from benchmarks.scenario.runner import main

sys.exit(main())
