"""insync-proxy: a Kafka wire-protocol sidecar (KIP-637, KIP-926, KIP-1).

One distinctive top-level name for everything the distribution installs:
``insync_proxy.protocol`` (the sans-IO codec), ``insync_proxy.audit`` (the audit stream's contract),
``insync_proxy.proxy`` (the proxy process), ``insync_proxy.client`` (client-side helpers: a blocking
client, a producer-side partitioner, check-config's preflight; the proxy's runtime imports none of it),
``insync_proxy.pipeline`` (the PySpark jobs) and
``insync_proxy.devcluster`` (the local Kafka, chaos, certificates and probes of development and tests;
the proxy's runtime imports none of it). In the source tree they are the top-level folders
``protocol/``, ``audit/``, ``proxy/``, ``client/``, ``pipeline/`` and ``devcluster/``, mapped into this package by
pyproject.toml's ``package-dir`` (a wheel holds them under ``insync_proxy/``).
"""

from __future__ import annotations

import sys as _sys
from collections.abc import Sequence as _Sequence
from importlib.machinery import ModuleSpec as _ModuleSpec
from importlib.util import spec_from_file_location as _spec_from_file_location
from pathlib import Path as _Path
from types import ModuleType as _ModuleType

#: The subpackages and their folders in a source checkout (pyproject.toml's package-dir says the same).
SOURCE_FOLDERS = ("protocol", "audit", "proxy", "client", "pipeline", "devcluster")


class _SourceFolders:
    """Finds ``insync_proxy.<folder>`` in a source checkout: exactly the folders of SOURCE_FOLDERS, each
    at the checkout's top level, as package-dir maps them. Nothing else of the checkout (tests/,
    benchmarks/, setup.py) becomes part of the package. Submodules follow from each subpackage's
    ``__path__``, so a compiled module (scripts/compile) beside its source is found as before."""

    def __init__(self, checkout: _Path) -> None:
        self.folders = {f"{__name__}.{name}": checkout / name for name in SOURCE_FOLDERS}

    def find_spec(self, fullname: str, path: _Sequence[str] | None = None,
                  target: _ModuleType | None = None) -> _ModuleSpec | None:
        """The spec of a mapped subpackage; None (the other finders' turn) for any other name."""
        folder = self.folders.get(fullname)
        if folder is None:
            return None
        return _spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and all((_checkout / f / "__init__.py").is_file() for f in SOURCE_FOLDERS):
    # A source checkout on sys.path (the working directory, PYTHONPATH, benchmarks/, tests): its own
    # folders are the subpackages, whatever else is installed. First on the meta path, because an
    # editable install's finder maps the same names to the checkout it was installed from.
    _sys.meta_path.insert(0, _SourceFolders(_checkout))
