"""Build hook for the optional compiled build; everything else is in pyproject.toml.

``INSYNC_PROXY_COMPILE=1`` compiles the modules every forwarded request runs through with mypyc (the
same source, type hints turned into C): about a third less CPU per request (docs/performance.md). The
interpreted package is the reference and what a plain ``pip install`` gives. ``scripts/compile`` builds
in place for development and tests; the container image builds a compiled wheel (Dockerfile).
"""

from __future__ import annotations

import os

from setuptools import setup

#: The data path: framing, header peek, Produce walks, the connection core and the behaviours on it.
COMPILED_MODULES = [
    "insync_proxy/protocol/api_keys.py",
    "insync_proxy/protocol/primitives.py",
    "insync_proxy/protocol/framing.py",
    "insync_proxy/protocol/headers.py",
    "insync_proxy/protocol/produce.py",
    "insync_proxy/protocol/fetch.py",
    "insync_proxy/proxy/exchange.py",
    "insync_proxy/proxy/core.py",
    "insync_proxy/proxy/observer.py",
    "insync_proxy/proxy/metrics.py",
    "insync_proxy/proxy/connection.py",
    "insync_proxy/proxy/cluster_view.py",
    "insync_proxy/proxy/min_insync.py",
    "insync_proxy/proxy/behaviours/produce_exchange.py",
    "insync_proxy/proxy/behaviours/topic_ids.py",
    "insync_proxy/proxy/behaviours/acks.py",
    "insync_proxy/proxy/behaviours/accounting.py",
    "insync_proxy/proxy/behaviours/isr_learning.py",
    "insync_proxy/proxy/behaviours/addresses.py",
    "insync_proxy/proxy/behaviours/api_versions.py",
    "insync_proxy/proxy/behaviours/config_changes.py",
    "insync_proxy/proxy/behaviours/metadata.py",
    "insync_proxy/proxy/audit/buckets.py",
    "insync_proxy/proxy/audit/summary.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("INSYNC_PROXY_COMPILE", "").lower() not in ("1", "true", "yes"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:  # pip's isolated build has only setuptools: see scripts/compile
        raise SystemExit("INSYNC_PROXY_COMPILE=1 needs mypy in the build environment: "
                         "pip install mypy, then build with --no-build-isolation") from exc
    # the runtime library shared by the modules lives in the package too: insync_proxy/_data_path__mypyc
    return list(mypycify(COMPILED_MODULES, opt_level="3", debug_level="1", group_name="insync_proxy._data_path"))


setup(ext_modules=_ext_modules())
