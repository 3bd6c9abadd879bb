"""The scenario runner's import (benchmarks/year_in_an_hour.py): harness/hostile_clients.py, retargeted when the scenario
package lands, then this file goes."""

from harness.hostile_clients import *  # noqa: F403
