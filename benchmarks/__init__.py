"""The benchmarks: each module a script (`python benchmarks/<name>.py`, the scenario runner `python -m
benchmarks.scenario`), and the toolkit they share (benchmarks/shared.py); their own tests in benchmarks/tests.

A package (not a namespace) so that pytest imports benchmarks/tests/ as `benchmarks.tests`, not as a second
top-level `tests`. They use the harness (harness/) and import nothing of tests/ (tests/unit/test_architecture.py);
not part of the installed package.
"""
