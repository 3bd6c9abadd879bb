"""insync-proxy: a Kafka wire-protocol sidecar (KIP-637, KIP-926, KIP-1).

One distinctive top-level name for everything the distribution installs:
``insync_proxy.protocol`` (the sans-IO codec), ``insync_proxy.audit`` (the audit stream's contract),
``insync_proxy.proxy`` (the proxy process) and ``insync_proxy.pipeline`` (the PySpark jobs). In the
source tree they are the top-level folders ``protocol/``, ``audit/``, ``proxy/`` and ``pipeline/``,
mapped into this package by pyproject.toml's ``package-dir`` (a wheel holds them under
``insync_proxy/``).
"""

from pathlib import Path as _Path

#: The subpackages and their folders in a source checkout (pyproject.toml's package-dir says the same).
SOURCE_FOLDERS = ("protocol", "audit", "proxy", "pipeline")

_checkout = _Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and all((_checkout / f / "__init__.py").is_file() for f in SOURCE_FOLDERS):
    # A source checkout on sys.path (PYTHONPATH, benchmarks/, tests): its folders are the subpackages,
    # whatever else is installed. An editable install maps the same folders.
    __path__.append(str(_checkout))
