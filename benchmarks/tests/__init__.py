"""The benchmarks' own tests: their pure parts (statistics, tables, peers' configs, goals) and their clients against
a scripted broker (harness/scripted_broker.py); none needs a cluster. Collected by `./scripts/test` (pyproject.toml's
testpaths); they import the benchmarks and the harness as modules, never tests/ and never a file by its path."""
